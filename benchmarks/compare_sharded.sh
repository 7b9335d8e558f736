#!/usr/bin/env bash
# Runs sharded_state_bench (the 4096-wide MLP with Adam under shard_state none, optimizer,
# gradients and weights, and the last two without overlap, interleaved in one run) on 1 and 2
# processes, one core each, and prints each option's speedup on 2 processes over 1 process.
# Builds nothing: build the target first, e.g.
#   ninja -C build sharded_state_bench
#
#   benchmarks/compare_sharded.sh [build-dir] [bench flags...]
set -euo pipefail

build="build"
if [[ $# -gt 0 && "$1" != --* ]]; then
  build="$1"
  shift
fi
bench="$build/benchmarks/sharded_state_bench"
if [[ ! -x "$bench" ]]; then
  echo "compare_sharded.sh: $bench not found; build it with: ninja -C $build sharded_state_bench" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for np in 1 2; do
  echo "== $np process(es) (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  mpiexec -n "$np" --oversubscribe --bind-to core "$bench" "$@" | tee "$out/p$np.txt"
done
field() {  # field FILE SHARD: samples/s of that option
  grep "^RESULT sharded .* shard=$2 " "$1" | sed -n 's/.* samples_per_s=\([0-9.]*\).*/\1/p'
}
one=$(field "$out/p1.txt" none)
echo
echo "| shard_state | 2 processes, samples/s | over 1 process ($one samples/s) |"
echo "| --- | ---: | ---: |"
for s in none optimizer gradients weights gradients_no_overlap weights_no_overlap; do
  two=$(field "$out/p2.txt" "$s")
  echo "| $s | $two | $(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.2fx", a / b }') |"
done
