#!/usr/bin/env bash
# Runs data_parallel_bench (the 4096-wide MLP, data_parallel<>, one fixed global batch) on 1 and
# 2 processes and prints the speedup against the ideal 2.0; the 2-process run also measures the
# exposed communication with and without overlap, and Open MPI's progress of one bucket's
# MPI_Iallreduce. Builds nothing: build the target first, e.g.
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build data_parallel_bench
#
#   benchmarks/run_data_parallel.sh [build-dir] [bench flags...]
#
# build-dir defaults to ./build. Other arguments (--batch B, --steps N, --warmup W,
# --optimizer sgd|adam, --rounds R, --block K) go to every run.
#
# One process = one core = one device: OPENBLAS_NUM_THREADS=1 in the 1- and 2-process runs (on a
# 2-core machine). The reference run "1 process, 2 BLAS threads" uses both cores in one process.
set -euo pipefail

build="build"
if [[ $# -gt 0 && "$1" != --* ]]; then
  build="$1"
  shift
fi
bench="$build/benchmarks/data_parallel_bench"
if [[ ! -x "$bench" ]]; then
  echo "run_data_parallel.sh: $bench not found; build it with: ninja -C $build data_parallel_bench" >&2
  exit 1
fi

# Open MPI refuses to run as root (containers) without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_version=$(mpiexec --version 2>/dev/null | head -n 1 || true)
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), ${mpirun_version}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Open MPI binds each process of a 1- or 2-process job to one core (what we want for one
# process = one core); the 2-thread reference run must not be bound, or both threads share a
# core.
run() {  # run NAME PROCS BLAS_THREADS BIND [bench flags...]
  local name="$1" np="$2" threads="$3" bind="$4"
  shift 4
  local cmd=(mpiexec -n "$np" --oversubscribe --bind-to "$bind" "$bench" "$@")
  echo
  echo "== $name: OPENBLAS_NUM_THREADS=$threads ${cmd[*]} (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  OPENBLAS_NUM_THREADS="$threads" "${cmd[@]}" | tee "$out/$name.txt"
}

start=$(date +%s)
run p1t1 1 1 core --only throughput "$@"
# tessel's default: libnbc's reduce-scatter + allgather (Rabenseifner, algorithm 3), which
# tessel::initialize selects unless the user set OMPI_MCA_coll_libnbc_iallreduce_algorithm.
run p2t1 2 1 core "$@"
# Open MPI's own choice (0): for fewer than 4 processes or MPI_IN_PLACE, a binomial reduce +
# broadcast of the whole buffer through a temporary copy of it.
OMPI_MCA_coll_libnbc_iallreduce_algorithm=0 run p2t1_nbc0 2 1 core "$@"
run p1t2 1 2 none --only throughput "$@"

field() {  # field NAME KEY: KEY=value from NAME's throughput RESULT line
  grep '^RESULT throughput' "$out/$1.txt" | sed -n "s/.* $2=\([0-9.]*\).*/\1/p"
}
echo
echo "== throughput at one global batch ($(( $(date +%s) - start )) s for the four runs)"
printf '| run | ms/step | samples/s | speedup vs 1 process | cores busy per process |\n| --- | --- | --- | --- | --- |\n'
base=$(field p1t1 samples_per_s)
for row in "p1t1:1 process, 1 BLAS thread" "p2t1:2 processes, 1 BLAS thread each" \
           "p2t1_nbc0:2 processes, Open MPI's own iallreduce choice (algorithm 0)" \
           "p1t2:1 process, 2 BLAS threads (reference)"; do
  name=${row%%:*}
  label=${row#*:}
  ms=$(field "$name" ms_per_step)
  sps=$(field "$name" samples_per_s)
  printf '| %s | %s | %s | %s | %s |\n' "$label" "$ms" "$sps" \
    "$(awk -v a="$sps" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')" \
    "$(field "$name" cores_per_process)"
done
for name in p2t1 p2t1_nbc0; do
  awk -v a="$(field $name samples_per_s)" -v b="$base" -v n="$name" \
    'BEGIN { printf "%s: 2 processes give %.2fx the 1-process throughput (ideal 2.00x, %.0f%% scaling efficiency)\n", n, a / b, 50 * a / b }'
done
