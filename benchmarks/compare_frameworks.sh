#!/usr/bin/env bash
# tessel against Keras 3 (JAX backend, CPU) on seeds/001's MLP (Fashion-MNIST) at batch 32 and
# 256, interleaved round by round on this machine, with the GEMM floors of gemm_bound_bench; writes
# a table (docs/benchmarks/cpu_throughput.md) and a plot (docs/benchmarks/cpu_throughput.png).
# Keras and matplotlib come from a virtual environment (not needed by CI):
#   python3 -m venv /work/keras-venv && /work/keras-venv/bin/pip install keras jax matplotlib
# PyTorch is left out where its CPU wheels cannot be had (PyPI's pulls the CUDA libraries).
# A second tessel build to compare with (an earlier commit): BEFORE=<build-dir>.
# Usage: benchmarks/compare_frameworks.sh [build-dir] [epochs] [rounds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
epochs="${2:-3}"
rounds="${3:-2}"
venv="${KERAS_VENV:-/work/keras-venv}"
out="$here/../docs/benchmarks"
mkdir -p "$out"
cmake --build "$build" --target mlp_fashion_mnist_bench gemm_bound_bench >/dev/null
results="$(mktemp)"
field() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" <<<"$1"; }
for round in $(seq "$rounds"); do
  for batch in 32 256; do
    line="$("$build/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" --batch "$batch" | grep '^RESULT')"
    echo "tessel $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    if [[ -n "${BEFORE:-}" ]]; then
      line="$("$BEFORE/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" --batch "$batch" | grep '^RESULT')"
      echo "before $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
    line="$(KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" "$here/keras_mlp_fashion_mnist.py" \
              --epochs "$epochs" --batch-size "$batch" 2>/dev/null | grep '^RESULT')"
    echo "keras $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
  done
done
floor="$("$build/benchmarks/gemm_bound_bench" --steps 5 | grep '^RESULT')"
echo "$floor"
"$venv/bin/python" "$here/plot_throughput.py" "$results" "$(lscpu | sed -n 's/^Model name: *//p')" \
  "$(field "$floor" seconds_per_epoch)" "$(field "$floor" tessel_seconds_per_epoch)" \
  "$(sed -n 's/.* ratio=\([0-9.]*\).*/\1/p' <<<"$(grep gemm_bound <<<"$floor")")" "$out"
rm -f "$results"
