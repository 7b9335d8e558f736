#!/usr/bin/env bash
# Runs all_reduce_bench (tessel's all_reduce against raw MPI_Allreduce) under mpiexec on this
# machine and prints its table. Builds nothing: build the target first, e.g.
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build all_reduce_bench
#
#   benchmarks/run_all_reduce.sh [build-dir] [--four] [bench flags...]
#
# build-dir defaults to ./build. --four also runs it on 4 processes after the 2-process run.
# Any other arguments (--max-mib M, --iters N, --warmup W) go to the benchmark.
set -euo pipefail

build="build"
if [[ $# -gt 0 && "$1" != --* ]]; then
  build="$1"
  shift
fi
four=0
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --four) four=1 ;;
    *) args+=("$1") ;;
  esac
  shift
done

bench="$build/benchmarks/all_reduce_bench"
if [[ ! -x "$bench" ]]; then
  echo "run_all_reduce.sh: $bench not found; build it with: ninja -C $build all_reduce_bench" >&2
  exit 1
fi

# Open MPI refuses to run as root (containers) without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

counts=(2)
[[ $four -eq 1 ]] && counts+=(4)
for np in "${counts[@]}"; do
  echo "== mpiexec -n $np --oversubscribe $bench ${args[*]:-}"
  mpiexec -n "$np" --oversubscribe "$bench" "${args[@]}"
  echo
done
