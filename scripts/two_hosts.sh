#!/usr/bin/env bash
# Runs an MPI program on two hosts made on this machine, as a cluster of two machines runs it:
# two network namespaces joined by a veth pair (addresses 10.77.0.1 and 10.77.0.2), each with
# its own hostname (host0, host1) and one process, Open MPI's daemons started on the second host
# through plm_rsh_agent (as ssh would), its TCP transport between them, and each process given
# the TF_CONFIG of its rank ({"cluster": {"worker": ["10.77.0.1:20000", "10.77.0.2:20000"]},
# "task": {"type": "worker", "index": <rank>}}).
#
#   scripts/two_hosts.sh [--timeout S] program [args...]
#
# Needs root (ip netns), iproute2 and util-linux (unshare). The namespaces are named after this
# script's process id and removed when it ends, so runs do not collide. Exit code: the program's,
# 2 when the hosts cannot be made here (the reason is printed).
set -uo pipefail

timeout_s=300
if [[ "${1:-}" == "--timeout" ]]; then
  timeout_s=$2
  shift 2
fi
if [[ $# -lt 1 ]]; then
  echo "usage: scripts/two_hosts.sh [--timeout S] program [args...]" >&2
  exit 2
fi
program=$1
[[ $program == */* ]] && program=$(readlink -f "$program")
shift

fail_setup() {
  echo "two_hosts.sh: $1; the two-host run cannot be made on this machine" >&2
  exit 2
}
[[ $(id -u) == 0 ]] || fail_setup "making network namespaces needs root (ip netns), and this is uid $(id -u)"
command -v ip > /dev/null || fail_setup "'ip' is missing (Debian package iproute2)"
command -v unshare > /dev/null || fail_setup "'unshare' is missing (Debian package util-linux)"

tag=tsl$$
ns0=${tag}a
ns1=${tag}b
dir=$(mktemp -d /tmp/tessel-two-hosts.XXXXXX)
cleanup() {
  ip netns del "$ns0" 2> /dev/null
  ip netns del "$ns1" 2> /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

if ! err=$(ip netns add "$ns0" 2>&1); then
  fail_setup "'ip netns add' was refused ($err): network namespaces need CAP_SYS_ADMIN (a \
container started without it, or without /var/run/netns, refuses them)"
fi
ip netns add "$ns1" || fail_setup "'ip netns add $ns1' failed"
ip link add "${tag}x" type veth peer name "${tag}y" || fail_setup "a veth pair was refused"
ip link set "${tag}x" netns "$ns0"
ip link set "${tag}y" netns "$ns1"
ip -n "$ns0" addr add 10.77.0.1/24 dev "${tag}x"
ip -n "$ns1" addr add 10.77.0.2/24 dev "${tag}y"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "${tag}x" up
ip -n "$ns1" link set "${tag}y" up

# Open MPI's rsh agent: "agent <host> <command>" runs the daemon's command on that host.
cat > "$dir/agent.sh" << AGENT
#!/bin/sh
host=\$1
shift
case "\$host" in
  10.77.0.1) exec ip netns exec $ns0 unshare --uts sh -c "hostname host0; \$*" ;;
  10.77.0.2) exec ip netns exec $ns1 unshare --uts sh -c "hostname host1; \$*" ;;
  *) echo "two_hosts.sh agent: no host \$host" >&2; exit 1 ;;
esac
AGENT
# Each process's TF_CONFIG, from its rank, as a cluster manager would give it.
cat > "$dir/worker.sh" << 'WORKER'
#!/bin/sh
export TF_CONFIG="{\"cluster\": {\"worker\": [\"10.77.0.1:20000\", \"10.77.0.2:20000\"]}, \
\"task\": {\"type\": \"worker\", \"index\": ${OMPI_COMM_WORLD_RANK}}}"
exec "$@"
WORKER
chmod +x "$dir/agent.sh" "$dir/worker.sh"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$dir/hostfile"

ip netns exec "$ns0" unshare --uts sh -c 'hostname host0; exec "$@"' two_hosts \
  env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout --signal=KILL "$timeout_s" \
  mpiexec --hostfile "$dir/hostfile" -n 2 \
  --mca plm_rsh_agent "$dir/agent.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  "$dir/worker.sh" "$program" "$@"
