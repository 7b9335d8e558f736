#!/usr/bin/env bash
# tessel against Keras 3 (JAX backend, CPU) and PyTorch (eager, CPU) on seeds/001's MLP
# (Fashion-MNIST) at batch 32 and 256, on gemm_bound_bench's 4096-wide step (batch 512, Adam) and
# on seeds/002's CNN (batch 64, tessel on 2 processes under mpiexec, data parallel, each
# framework on the machine's cores), interleaved round by round on this machine, with the GEMM
# floors of gemm_bound_bench; writes a table (docs/benchmarks/cpu_throughput.md) and a plot
# (docs/benchmarks/cpu_throughput.png). MODELS="mlp cnn" (the default) picks what runs; the
# results of what does not run this time are kept from the last run
# (docs/benchmarks/cpu_throughput.txt, the raw lines).
# Keras and matplotlib come from a virtual environment, PyTorch from Debian (none of them needed
# by CI):
#   python3 -m venv /work/keras-venv && /work/keras-venv/bin/pip install keras jax matplotlib
#   apt-get install python3-torch      # PyTorch 1.13 with oneDNN; TORCH_PYTHON=/usr/bin/python3
# (PyPI's torch wheels pull the CUDA libraries.) A framework that cannot be imported is left out,
# and the script says so. A second tessel build to compare with: BEFORE=<build-dir>.
# Usage: benchmarks/compare_frameworks.sh [build-dir] [epochs] [rounds]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../build}"
epochs="${2:-3}"
rounds="${3:-2}"
venv="${KERAS_VENV:-/work/keras-venv}"
torch_python="${TORCH_PYTHON:-/usr/bin/python3}"
models="${MODELS:-mlp cnn}"
out="$here/../docs/benchmarks"
mkdir -p "$out"
cmake --build "$build" --target mlp_fashion_mnist_bench gemm_bound_bench cnn_fashion_mnist_bench \
  >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
results="$(mktemp)"
# What this run does not measure comes from the last run's lines.
if [[ -f "$out/cpu_throughput.txt" ]]; then
  if [[ " $models " != *" mlp "* ]]; then grep -v '^cnn ' "$out/cpu_throughput.txt" >>"$results" || true; fi
  if [[ " $models " != *" cnn "* ]]; then grep '^cnn ' "$out/cpu_throughput.txt" >>"$results" || true; fi
fi
field() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" <<<"$1"; }
have_torch=1
"$torch_python" -c "import torch" 2>/dev/null || { have_torch=0; echo "PyTorch not found by $torch_python: left out"; }
have_keras=1
KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" -c "import keras, jax" 2>/dev/null || { have_keras=0; echo "Keras/JAX not found in $venv: left out"; }
keras() { KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" "$here/keras_mlp_fashion_mnist.py" "$@" 2>/dev/null | grep '^RESULT'; }
torch() { "$torch_python" "$here/torch_mlp_fashion_mnist.py" "$@" | grep '^RESULT'; }
# seeds/002's CNN, 60,000 images an epoch, batch 64, the mean of the epochs (the first included,
# with its compilation where there is one); PyTorch on 2 threads.
threads="$(nproc)"
# The table, the plot and the raw lines from what has been measured so far (after each part of
# each round, so that a run cut short still leaves its complete rounds).
write_outputs() {
  "$venv/bin/python" "$here/plot_throughput.py" "$results" "$(lscpu | sed -n 's/^Model name: *//p')" "$out"
  cp "$results" "$out/cpu_throughput.txt"
}
trap 'rm -f "$results"' EXIT
for round in $(seq "$rounds"); do
  if [[ " $models " == *" cnn "* ]]; then
    line="$(mpiexec -n 2 --oversubscribe "$build/benchmarks/cnn_fashion_mnist_bench" --epochs "$epochs" --seed "$round" | grep '^RESULT')"
    echo "cnn tessel $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    if ((have_keras)); then
      line="$(KERAS_BACKEND=jax JAX_PLATFORMS=cpu "$venv/bin/python" "$here/keras_cnn_fashion_mnist.py" --epochs "$epochs" --seed "$round" 2>/dev/null | grep '^RESULT')"
      echo "cnn keras $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
    if ((have_torch)); then
      line="$("$torch_python" "$here/torch_cnn_fashion_mnist.py" --epochs "$epochs" --seed "$round" --threads "$threads" | grep '^RESULT')"
      echo "cnn torch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
  fi
  write_outputs
  [[ " $models " == *" mlp "* ]] || continue
  for batch in 32 256; do
    line="$("$build/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" --batch "$batch" | grep '^RESULT')"
    echo "tessel $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    if [[ -n "${BEFORE:-}" ]]; then
      line="$("$BEFORE/benchmarks/mlp_fashion_mnist_bench" --epochs "$epochs" --batch "$batch" | grep '^RESULT')"
      echo "before $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
    if ((have_keras)); then
      line="$(keras --epochs "$epochs" --batch-size "$batch")"
      echo "keras $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
    if ((have_torch)); then
      line="$(torch --epochs "$epochs" --batch-size "$batch")"
      echo "torch $batch $(field "$line" seconds_per_epoch) $(field "$line" test_accuracy)" | tee -a "$results"
    fi
  done
  # The 4096-wide step (GFLOP/s of its GEMM work), with raw sgemm on the same GEMMs, and the
  # MLP's GEMM floors per epoch (validation included).
  floor="$("$build/benchmarks/gemm_bound_bench" --steps 5 | grep '^RESULT')"
  echo "wide tessel $(field "$(grep gemm_bound <<<"$floor")" tessel_gflops)" | tee -a "$results"
  echo "wide sgemm $(field "$(grep gemm_bound <<<"$floor")" sgemm_gflops)" | tee -a "$results"
  echo "floor raw $(field "$(grep mlp_gemm_floor <<<"$floor")" seconds_per_epoch)" | tee -a "$results"
  echo "floor tessel $(field "$(grep mlp_gemm_floor <<<"$floor")" tessel_seconds_per_epoch)" | tee -a "$results"
  if ((have_keras)); then echo "wide keras $(field "$(keras --wide --steps 5)" gflops)" | tee -a "$results"; fi
  if ((have_torch)); then echo "wide torch $(field "$(torch --wide --steps 5)" gflops)" | tee -a "$results"; fi
done
write_outputs
