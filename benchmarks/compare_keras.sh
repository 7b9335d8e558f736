#!/usr/bin/env bash
# Trains the seeds/001 MLP on Fashion-MNIST with tessel and with Keras 3 (JAX backend, CPU) on
# this machine, one after the other in one run, and prints seconds per epoch, test accuracy and
# the throughput ratio. Keras comes from a virtual environment (not needed by CI):
#   python3 -m venv /work/keras-venv && /work/keras-venv/bin/pip install keras jax
# Usage: benchmarks/compare_keras.sh [build-dir] [epochs]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
epochs="${2:-3}"
venv="${KERAS_VENV:-/work/keras-venv}"

cmake --build "$build" --target mlp_fashion_mnist_bench gemm_bound_bench >/dev/null
echo "== tessel"
tessel_line="$("$build/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" | tee /dev/stderr | grep '^RESULT')"
echo "== Keras"
keras_line="$(KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" "$here/keras_mlp_fashion_mnist.py" --epochs "$epochs" | tee /dev/stderr | grep '^RESULT')"

field() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
t=$(field "$tessel_line" seconds_per_epoch); k=$(field "$keras_line" seconds_per_epoch)
ta=$(field "$tessel_line" test_accuracy); ka=$(field "$keras_line" test_accuracy)
echo
printf '%-8s %18s %14s\n' "" "s/epoch (after 1st)" "test accuracy"
printf '%-8s %18s %14s\n' tessel "$t" "$ta"
printf '%-8s %18s %14s\n' keras "$k" "$ka"
echo "throughput ratio tessel/keras: $(python3 -c "print(f'{$k/$t:.2f}x')")"
echo
echo "== GEMM-bound training step vs raw sgemm"
"$build/benchmarks/gemm_bound_bench" --steps 7
