#!/usr/bin/env bash
# Runs sharded_state_bench (the 4096-wide MLP with Adam under shard_state none, optimizer,
# gradients and weights, and the last two without overlap, interleaved in one run) on 1 and 2
# processes, one core each, and prints each option's speedup on 2 processes over 1 process,
# beside the speedup of the step's GEMMs alone through raw OpenBLAS in the same runs (the most a
# GEMM-bound step can gain on these cores). The 1- and 2-process runs alternate PAIRS times
# (default 3); each speedup is the median over the pairs (each 2-process run over the 1-process
# run before it, under shard_state::none), with the lowest and highest.
# Builds nothing: build the target first, e.g.
#   ninja -C build sharded_state_bench
#
#   [PAIRS=3] benchmarks/compare_sharded.sh [build-dir] [bench flags...]
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
pairs="${PAIRS:-3}"
if ! [[ "$pairs" =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_sharded.sh: PAIRS must be a positive whole number, not '$pairs'" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 1; i <= pairs; ++i)); do
  for np in 1 2; do
    echo "== pair $i, $np process(es) (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    mpiexec -n "$np" --oversubscribe --bind-to core "$bench" "$@" | tee "$out/p$np-$i.txt"
  done
done
field() {  # field FILE SHARD: samples/s of that option
  grep "^RESULT sharded .* shard=$2 " "$1" | sed -n 's/.* samples_per_s=\([0-9.]*\).*/\1/p'
}
# gains OPTION BASE: each pair's samples/s of OPTION on 2 processes over BASE's on 1 process.
gains() {
  for ((i = 1; i <= pairs; ++i)); do
    awk -v a="$(field "$out/p2-$i.txt" "$1")" -v b="$(field "$out/p1-$i.txt" "$2")" \
      'BEGIN { printf "%.4f\n", a / b }'
  done
}
# summary: the median, lowest and highest of the numbers on stdin, as "1.52x (1.40-1.60x)".
summary() {
  sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.2fx (%.2f-%.2fx)", m, v[1], v[NR] }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The step's GEMMs alone through raw OpenBLAS: their gain on 2 processes is the most a
# GEMM-bound step can gain on these cores; each option's gain is also given as a share of it
# (the median over the pairs of the option's gain over the GEMMs' in the same pair).
ones=$(for ((i = 1; i <= pairs; ++i)); do field "$out/p1-$i.txt" none; done | median)
echo
echo "| shard_state | over 1 process (${ones} samples/s), median of $pairs | of the GEMMs' gain |"
echo "| --- | ---: | ---: |"
paste <(gains sgemm sgemm) /dev/null > "$out/gemm_gains"
for s in none optimizer gradients weights gradients_no_overlap weights_no_overlap; do
  share=$(paste <(gains "$s" none) "$out/gemm_gains" | awk '{ print $1 / $2 }' | median)
  echo "| $s | $(gains "$s" none | summary) | $(awk -v s="$share" 'BEGIN { printf "%.0f%%", 100 * s }') |"
done
echo "| the step's GEMMs alone (OpenBLAS) | $(gains sgemm sgemm | summary) | |"
