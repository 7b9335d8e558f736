#!/usr/bin/env bash
# Starts a local parameter-server cluster: the same program as every task (the ps tasks, the
# workers and the chief), on 127.0.0.1, each with its own TF_CONFIG (and the cluster's keys when
# given), as a cluster manager would start them one by one. The ps and worker tasks run in the
# background, their lines prefixed with the task ("[worker 1] ..."); the chief in the foreground.
# When the chief ends, the others are stopped, and the script exits with the chief's status.
#
#   scripts/ps_cluster.sh [--workers N] [--ps N] [--port P] [--respawn] [--timeout S]
#                         [--host H] [--keys FILE | --new-keys TOOL] program [args]
#
#   --workers N   worker tasks (default 2)          --ps N      ps tasks (default 1)
#   --port P      the first port; the tasks take P, P+1, ... (default: one drawn from 20000-31999,
#                 below Linux's ephemeral ports (32768-60999), which outgoing connections hold)
#   --respawn     start a worker or ps task again (same TF_CONFIG, TESSEL_RESTARTED=1) when it
#                 exits with an error (or is killed), as a cluster manager's restart policy does
#   --timeout S   stop the chief after S seconds (default 600)
#   --wait-all S  when the chief ends, let the other tasks end on their own for up to S seconds
#                 (a test that they notice the chief is gone); the script then fails, with
#                 status 3, if any had to be stopped
#   --host H      the host of every address (default 127.0.0.1; "[::1]" for IPv6)
#   --keys FILE   the cluster's CURVE keys: every task gets TESSEL_PS_KEYS_FILE=FILE
#   --new-keys TOOL  a new cluster's keys, made by TOOL (tessel-ps-keys) in a scratch directory,
#                 given to every task as --keys does and removed at the end
set -u
workers=2 ps=1 port=$((20000 + RANDOM % 12000)) respawn=0 timeout_s=600 wait_all=0
host=127.0.0.1 keys="" new_keys=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --ps) ps=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --respawn) respawn=1; shift ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --wait-all) wait_all=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --new-keys) new_keys=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "ps_cluster.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 1 ]]; then
  echo "usage: scripts/ps_cluster.sh [--workers N] [--ps N] [--port P] [--respawn] [--timeout S] program [args]" >&2
  exit 2
fi
if [[ $workers -lt 1 || $ps -lt 1 ]]; then
  echo "ps_cluster.sh: a cluster needs at least one worker and one ps task" >&2
  exit 2
fi

scratch=""
if [[ -n $new_keys ]]; then
  scratch=$(mktemp -d)
  keys=$scratch/cluster.keys
  "$new_keys" "$keys" >/dev/null || { rm -rf "$scratch"; exit 2; }
fi
if [[ -n $keys ]]; then
  [[ -f $keys ]] || { echo "ps_cluster.sh: no keys file $keys" >&2; exit 2; }
  export TESSEL_PS_KEYS_FILE=$keys
fi

addresses() {  # first count
  local list="" i
  for ((i = 0; i < $2; i++)); do list+="${list:+, }\"$host:$(($1 + i))\""; done
  echo "$list"
}
chief_list=$(addresses "$port" 1)
worker_list=$(addresses $((port + 1)) "$workers")
ps_list=$(addresses $((port + 1 + workers)) "$ps")
cluster="{\"chief\": [$chief_list], \"worker\": [$worker_list], \"ps\": [$ps_list]}"
config() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": $2}}"; }

pids=()
start_task() {  # type index
  local type=$1 index=$2
  (
    restarted=0
    while :; do
      TF_CONFIG=$(config "$type" "$index") TESSEL_RESTARTED=$restarted "${@:3}" 2>&1 |
        sed -u "s/^/[$type $index] /"
      status=${PIPESTATUS[0]}
      if [[ $status -eq 0 || $respawn -eq 0 ]]; then exit "$status"; fi
      echo "[ps_cluster] $type $index exited with status $status; starting it again"
      restarted=1
      sleep 0.5
    done
  ) &
  pids+=($!)
}
for ((i = 0; i < ps; i++)); do start_task ps "$i" "$@"; done
for ((i = 0; i < workers; i++)); do start_task worker "$i" "$@"; done

# Each task's subshell first (so that it starts nothing again), then its pipeline: continued
# (a stopped task), asked to end, and killed if it has not a second later.
stop_all() {
  local p kids=""
  for p in "${pids[@]}"; do kids+=" $(pgrep -P "$p")"; done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  if [[ -n ${kids// /} ]]; then
    kill -CONT $kids 2>/dev/null
    kill -TERM $kids 2>/dev/null
    sleep 1
    kill -KILL $kids 2>/dev/null
  fi
  wait 2>/dev/null
}
TF_CONFIG=$(config chief 0) timeout "$timeout_s" "$@"
status=$?
if [[ $wait_all -gt 0 ]]; then
  deadline=$((SECONDS + wait_all))
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  done
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      echo "[ps_cluster] tasks still running $wait_all s after the chief ended; stopping them"
      status=3
      break
    fi
  done
  echo "[ps_cluster] the other tasks ended $((SECONDS - deadline + wait_all)) s after the chief"
fi
stop_all
[[ -n $scratch ]] && rm -rf "$scratch"
exit "$status"
