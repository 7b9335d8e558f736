#!/usr/bin/env bash
# How tessel and Keras 3 (JAX, CPU) slow down when another process keeps one core busy: seeds/001's
# MLP at batch 32, each alone and beside a busy loop, interleaved round by round; prints the
# seconds per epoch (after the first) and each framework's slowdown (loaded / alone, medians).
# Keras comes from the virtual environment of compare_frameworks.sh.
# Usage: benchmarks/compare_contended.sh [build-dir] [epochs] [rounds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
epochs="${2:-3}"
rounds="${3:-3}"
venv="${KERAS_VENV:-/work/keras-venv}"
cmake --build "$build" --target mlp_fashion_mnist_bench >/dev/null
field() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" <<<"$1"; }
tessel() { field "$("$build/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" --batch 32 | grep '^RESULT')" seconds_per_epoch; }
keras() {
  field "$(KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" "$here/keras_mlp_fashion_mnist.py" \
             --epochs "$epochs" --batch-size 32 2>/dev/null | grep '^RESULT')" seconds_per_epoch
}
busy() { while :; do :; done; }
results="$(mktemp)"
for round in $(seq "$rounds"); do
  for load in alone loaded; do
    pid=""
    if [[ "$load" == loaded ]]; then busy & pid=$!; fi
    echo "tessel $load $(tessel)" | tee -a "$results"
    echo "keras $load $(keras)" | tee -a "$results"
    if [[ -n "$pid" ]]; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  done
done
python3 - "$results" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    name, load, s = line.split()
    runs[(name, load)].append(float(s))
m = {k: statistics.median(v) for k, v in runs.items()}
for name in ("tessel", "keras"):
    print(f"{name}: alone {m[(name, 'alone')]:.3f} s/epoch, beside a busy core "
          f"{m[(name, 'loaded')]:.3f} s/epoch, slowdown {m[(name, 'loaded')] / m[(name, 'alone')]:.2f}x")
print(f"tessel / Keras throughput: alone {m[('keras', 'alone')] / m[('tessel', 'alone')]:.2f}x, "
      f"loaded {m[('keras', 'loaded')] / m[('tessel', 'loaded')]:.2f}x")
PY
rm -f "$results"
