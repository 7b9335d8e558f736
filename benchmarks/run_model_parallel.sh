#!/usr/bin/env bash
# Runs model_parallel_bench (4 x dense(8192), Megatron layouts, Adam) on 1 process (one device)
# and on 2 processes (a 1x2 data x model mesh), alternating, one core per process
# (OPENBLAS_NUM_THREADS=1), for each batch size, and prints the medians: step time, the weights
# and optimizer state each process holds, and the bytes the collectives moved against the plan's.
# Builds nothing: ninja -C build model_parallel_bench first.
#
#   benchmarks/run_model_parallel.sh [build-dir] [rounds] [batch sizes...]   (defaults: build 2 32 256)
set -euo pipefail
build="${1:-build}"
rounds="${2:-2}"
shift $(( $# > 2 ? 2 : $# ))
batches=(32 256)
[[ $# -gt 0 ]] && batches=("$@")
bench="$build/benchmarks/model_parallel_bench"
if [[ ! -x "$bench" ]]; then
  echo "run_model_parallel.sh: $bench not found; build it with: ninja -C $build model_parallel_bench" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$(mktemp)
for batch in "${batches[@]}"; do
  for ((r = 1; r <= rounds; ++r)); do
    "$bench" --batch "$batch" --steps 3 | grep '^RESULT' | tee -a "$out"
    mpiexec -n 2 --bind-to core "$bench" --batch "$batch" --steps 3 | grep '^RESULT' | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=([0-9.]+)", l)) for l in open(sys.argv[1])]
print("\n| batch | processes | ms/step (median) | weights MB/process | Adam state MB/process | collective MB/step | planned MB/step |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for batch in sorted({r["batch"] for r in rows}, key=int):
    for p in ("1", "2"):
        rs = [r for r in rows if r["batch"] == batch and r["processes"] == p]
        ms = statistics.median(float(r["ms_per_step"]) for r in rs)
        r = rs[0]
        print(f"| {batch} | {p} | {ms:.0f} | {r['weight_mb_per_process']} | {r['optimizer_mb_per_process']} | {r['collective_mb_per_step']} | {r['planned_mb_per_step']} |")
PY
rm -f "$out"
