#!/usr/bin/env bash
# The GPU tests (CTest label `gpu`): the CUDA backend against the host backend, an MLP trained on
# each, the golden Keras cases on the GPU, then the same tests under compute-sanitizer's memcheck.
# They need an NVIDIA GPU: without one this script says so and fails (they are never skipped).
# With .gpu-bundle/bundle.tar.xz (made elsewhere by scripts/gpu-bundle.sh) it runs the bundled
# programs; otherwise it builds them here with the CUDA backend on (every package of
# scripts/packages.txt and the CUDA toolkit needed). --bench also runs gpu_bench and
# benchmarks/gpu_frameworks.py (PyTorch eager, torch.compile, JAX) on the same GPU.
# Usage: scripts/test-gpu.sh [--bench] [build-dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=0
if [[ ${1:-} == --bench ]]; then bench=1; shift; fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test-gpu.sh: no NVIDIA GPU here (nvidia-smi lists none). The GPU tests need one and are" \
       "not skipped: run this on a machine with a GPU (docs/gpu.md)." >&2
  exit 1
fi
# The whole output also goes to a log: $OUT/test-gpu.log on the device tool's machine (it comes
# back with the call), else test-gpu.log in the temporary folder.
log=${OUT:-${TMPDIR:-/tmp}}/test-gpu.log
: >"$log"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -1
  echo "mpiexec: $(command -v mpiexec || echo none)"
  ldconfig -p 2>/dev/null | grep -E 'libnccl|libcublas' | head -4
} 2>&1 | tee -a "$log"
failed=()
run() {  # run NAME COMMAND...: runs it, remembers a failure
  echo "== $1" | tee -a "$log"
  shift
  "$@" 2>&1 | tee -a "$log" || failed+=("$*")
}
if [[ -f $root/.gpu-bundle/bundle.tar.xz ]]; then
  dir=$(mktemp -d)
  tar -xJf "$root/.gpu-bundle/bundle.tar.xz" -C "$dir" || exit 1
  # NCCL: the CUDA toolkit's, or the one PyTorch's wheels bring (nvidia-nccl-cu13).
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TESSEL_GOLDEN_DIR=$root/tests/golden TESSEL_FASHION_MNIST_DIR=$dir/fashion-mnist
  bin=$dir/bin
  if ldd "$bin"/* | grep 'not found'; then
    echo "test-gpu.sh: the bundled programs miss the libraries above (cuBLAS and NCCL come from" \
         "this machine's CUDA toolkit or Python wheels: put their lib folders on LD_LIBRARY_PATH)" >&2
    exit 1
  fi
  run "gpu_tests" "$bin/gpu_tests"
  run "gpu_golden_tests" "$bin/gpu_golden_tests"
  # 2 processes on the one GPU: needs an MPI launcher on this machine.
  if command -v mpiexec >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run "gpu_data_parallel_test (2 processes)" mpiexec -n 2 "$bin/gpu_data_parallel_test"
  else
    echo "test-gpu.sh: no mpiexec here: the 2-process GPU test did not run" >&2
    failed+=("gpu_data_parallel_test (no mpiexec)")
  fi
else
  build=${1:-$root/build-gpu}
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_ENABLE_CUDA=ON || exit 1
  targets=(gpu_tests gpu_golden_tests)
  [[ $bench == 1 ]] && targets+=(gpu_bench)
  cmake --build "$build" --target "${targets[@]}" || exit 1
  bin=$build/tests/gpu
  run "ctest -L gpu" ctest --test-dir "$build" -L gpu --output-on-failure
  [[ $bench == 1 ]] && cp "$build/benchmarks/gpu_bench" "$bin/"
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [[ -n $sanitizer ]]; then
  run "memcheck gpu_tests" "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/gpu_tests"
else
  echo "test-gpu.sh: compute-sanitizer not found (it comes with the CUDA toolkit): memcheck not run" >&2
  failed+=("compute-sanitizer")
fi
if [[ $bench == 1 ]]; then
  run "gpu_bench" "$bin/gpu_bench"
  run "gpu_frameworks.py" python3 "$root/benchmarks/gpu_frameworks.py"
fi
if ((${#failed[@]})); then
  echo "test-gpu.sh: FAILED: ${failed[*]} (the whole output: $log)" | tee -a "$log" >&2
  exit 1
fi
echo "test-gpu.sh: all GPU tests passed (the whole output: $log)" | tee -a "$log"
