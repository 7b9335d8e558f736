#!/usr/bin/env bash
# Runs the same benchmarks from two builds, interleaved (A, B, A, B, ...), so that a change meant
# to keep the speed (a redesign) is measured against the code before it in one run on one
# machine: the seeds/001 MLP epoch on Fashion-MNIST, the GEMM-bound step against raw sgemm, and
# the data-parallel step on 2 processes, and
# tessel's all_reduce against raw MPI_Allreduce (2 processes, 1-16 MiB). Prints each run's RESULT lines and a table of medians
# with the ratio B / A. Builds nothing: build mlp_fashion_mnist_bench, gemm_bound_bench,
# data_parallel_bench and all_reduce_bench in both build directories first, e.g. for the code before a change:
#   git worktree add /tmp/before <commit>
#   cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C /tmp/before/build mlp_fashion_mnist_bench gemm_bound_bench data_parallel_bench \
#     all_reduce_bench
#
#   benchmarks/compare_builds.sh <build-A> <build-B> [rounds]    (rounds: 3 by default)
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: benchmarks/compare_builds.sh <build-A> <build-B> [rounds]" >&2
  exit 2
fi
a="$1" b="$2" rounds="${3:-3}"
for build in "$a" "$b"; do
  for t in mlp_fashion_mnist_bench gemm_bound_bench data_parallel_bench all_reduce_bench; do
    if [[ ! -x "$build/benchmarks/$t" ]]; then
      echo "compare_builds.sh: $build/benchmarks/$t not found; build it with: ninja -C $build $t" >&2
      exit 1
    fi
  done
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
run() {  # run <label> <build>
  local label="$1" build="$2"
  "$build/benchmarks/mlp_fashion_mnist_bench" --epochs 3 | grep '^RESULT tessel' |
    sed "s/^/$label /" | tee -a "$out/results"
  "$build/benchmarks/gemm_bound_bench" --steps 5 | grep '^RESULT gemm_bound' |
    sed "s/^/$label /" | tee -a "$out/results"
  OPENBLAS_NUM_THREADS=1 mpiexec -n 2 --oversubscribe --bind-to core \
    "$build/benchmarks/data_parallel_bench" --steps 6 --warmup 2 --only throughput |
    grep '^RESULT throughput' | sed "s/^/$label /" | tee -a "$out/results"
  mpiexec -n 2 --oversubscribe "$build/benchmarks/all_reduce_bench" --max-mib 16 --iters 10 |
    grep '^RESULT all_reduce' | sed "s/^/$label /" | tee -a "$out/results"
}
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds"
  run A "$a"
  run B "$b"
done
# Medians per build of: seconds per epoch, GEMM-bound ratio to sgemm, data-parallel ms per step.
python3 - "$out/results" "$a" "$b" <<'PY'
import re, statistics, sys
rows = open(sys.argv[1]).read().splitlines()
def values(label, kind, key):
    return [float(re.search(key + r"=([0-9.]+)", r).group(1))
            for r in rows if r.startswith(label + " RESULT " + kind)]
print(f"\nA = {sys.argv[2]}\nB = {sys.argv[3]}\n")
print("| benchmark | A (median) | B (median) | B / A |\n| --- | --- | --- | --- |")
for name, kind, key in [("seeds/001 MLP, s/epoch", "tessel", "seconds_per_epoch"),
                        ("GEMM-bound step, ratio to raw sgemm", "gemm_bound", "ratio"),
                        ("data parallel, 2 processes, ms/step", "throughput", "ms_per_step"),
                        ("all_reduce / raw MPI, worst size (paired)", "all_reduce", "paired_max")]:
    va, vb = values("A", kind, key), values("B", kind, key)
    if not va or not vb:
        print(f"| {name} | missing | missing | |"); continue
    ma, mb = statistics.median(va), statistics.median(vb)
    print(f"| {name} | {ma:.3f} | {mb:.3f} | {mb / ma:.3f} |")
PY
rm -rf "$out"
