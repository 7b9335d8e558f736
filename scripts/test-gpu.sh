#!/usr/bin/env bash
# The GPU tests (CTest label `gpu`) or, with --bench, the GPU benchmarks, on a machine with an
# NVIDIA GPU. They need one: without it this script says so and fails (they are never skipped).
#   scripts/test-gpu.sh           the tests: the CUDA backend against the host backend, an MLP
#                                 trained on each, the golden Keras cases on the GPU, data_parallel
#                                 on 2 processes, then gpu_tests under compute-sanitizer's memcheck
#   scripts/test-gpu.sh --bench   only the benchmarks: gpu_bench, then benchmarks/gpu_frameworks.py
#                                 (PyTorch eager, torch.compile, JAX) on the same GPU
# Each is one call of the device tool (10 minutes at most): the whole run stops itself after
# TESSEL_GPU_TIME_LIMIT seconds (540 by default), a part still running then is stopped and counted
# as failed, and the time of each part is printed.
# It first checks the driver: it must be new enough for the CUDA runtime the programs were built
# with. With .gpu-bundle/bundle.tar.xz (made elsewhere by scripts/gpu-bundle.sh) it runs the
# bundled programs, with the bundle's libraries and Open MPI, and this machine's cuBLAS and NCCL,
# which it looks for in the CUDA toolkit, then in the Python wheels (nvidia-cublas,
# nvidia-nccl-cu13). Otherwise it builds the programs here with the CUDA backend on (every package
# of scripts/packages.txt and the CUDA toolkit needed). scripts/gpu-dry-run.sh runs this script
# on a machine without a GPU, to see everything up to CUDA's first call.
# Usage: scripts/test-gpu.sh [--bench] [build-dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=0
if [[ ${1:-} == --bench ]]; then bench=1; shift; fi
what=$([[ $bench == 1 ]] && echo benchmarks || echo tests)
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
start=$(now)
limit=${TESSEL_GPU_TIME_LIMIT:-540}
# Python's frameworks get the loader path as it was: their own CUDA libraries (from their wheels),
# not the bundle's CUDA runtime or the toolkit's cuBLAS.
if [[ -v LD_LIBRARY_PATH ]]; then python_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); else python_env=(env -u LD_LIBRARY_PATH); fi
# The whole output also goes to a log: $OUT/test-gpu.log (--bench: test-gpu-bench.log) on the
# device tool's machine (it comes back with the call), else in the temporary folder.
log=${OUT:-${TMPDIR:-/tmp}}/test-gpu$([[ $bench == 1 ]] && echo -bench).log
: >"$log"
say() { echo "$*" | tee -a "$log"; }
fail_now() { echo "test-gpu.sh: $*" | tee -a "$log" >&2; exit 1; }

# 1. A GPU, and a driver new enough for the CUDA runtime the programs use.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  fail_now "no NVIDIA GPU here (nvidia-smi lists none). The GPU tests need one and are not" \
           "skipped: run this on a machine with a GPU (docs/gpu.md)."
fi
bundle=$root/.gpu-bundle
min_driver_of() {  # the oldest driver a CUDA major version runs on (minor version compatibility)
  case ${1%%.*} in 12) echo 525.60.13 ;; 13) echo 580.65.06 ;; *) echo unknown ;; esac
}
if [[ -f $bundle/bundle.tar.xz ]]; then
  [[ -f $bundle/bundle.txt ]] || fail_now "$bundle/bundle.txt is missing: make the bundle again (scripts/gpu-bundle.sh)"
  cuda=$(sed -n 's/^cuda_runtime=//p' "$bundle/bundle.txt")
  min_driver=$(sed -n 's/^min_driver=//p' "$bundle/bundle.txt")
  cuda_from="the bundle's CUDA runtime"
else
  cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
  [[ -n $cuda ]] || fail_now "no .gpu-bundle/bundle.tar.xz and no nvcc here: nothing to run (docs/gpu.md)"
  min_driver=$(min_driver_of "$cuda")
  cuda_from="this machine's CUDA toolkit (nvcc)"
fi
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
[[ -n $driver ]] || fail_now "nvidia-smi gives no driver version"
if [[ $min_driver == unknown ]]; then
  say "test-gpu.sh: which driver CUDA $cuda needs is not known here; the driver is $driver"
elif [[ $(printf '%s\n' "$min_driver" "$driver" | sort -V | head -1) != "$min_driver" ]]; then
  fail_now "the NVIDIA driver here is $driver, older than $cuda_from, CUDA $cuda, needs" \
           "(driver $min_driver or newer): CUDA would fail at its first call. Use a machine with" \
           "a newer driver, or build with a CUDA toolkit this driver supports."
fi
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "driver $driver: new enough for CUDA $cuda ($cuda_from; needs $min_driver or newer)"
  command -v nvcc >/dev/null && echo "nvcc: $(nvcc --version | tail -1)"
  echo "python3: $(command -v python3 || echo none)"
} 2>&1 | tee -a "$log"

failed=()
times=()
part() {  # part NAME COMMAND...: runs it within what is left of the time limit; times it
  local name=$1 t0 left rc
  shift
  left=$(awk -v l="$limit" -v s="$(seconds_since "$start")" 'BEGIN { printf "%d", l - s }')
  if ((left < 5)); then
    say "== $name: not run, the $limit s limit (TESSEL_GPU_TIME_LIMIT) is spent"
    failed+=("$name (not run: no time left)")
    return
  fi
  say "== $name"
  t0=$(now)
  timeout --kill-after=10 "$left" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  local took
  took=$(seconds_since "$t0")
  times+=("$name: $took s")
  if ((rc == 124 || rc == 137)); then
    say "== $name: stopped after $took s, at the $limit s limit (TESSEL_GPU_TIME_LIMIT)"
    failed+=("$name (stopped at the time limit)")
  elif ((rc != 0)); then
    say "== $name: failed (exit $rc) after $took s"
    failed+=("$name")
  else
    say "== $name: passed in $took s"
  fi
}
finish() {
  say "test-gpu.sh: time of each part: $( ((${#times[@]})) && printf '%s; ' "${times[@]}")$(seconds_since "$start") s in all"
  if ((${#failed[@]})); then
    echo "test-gpu.sh: FAILED: $(printf '%s; ' "${failed[@]}")the whole output: $log" | tee -a "$log" >&2
    exit 1
  fi
  say "test-gpu.sh: all GPU $what passed (the whole output: $log)"
  exit 0
}

# The folders where this machine may keep cuBLAS and NCCL: the CUDA toolkit's, then the Python
# wheels' (nvidia-cublas and nvidia-cuda-runtime install into nvidia/cu13/lib, nvidia-nccl-cu13
# into nvidia/nccl/lib), found by asking python3 where its packages are, without importing them,
# and by looking in the usual places. Never a stubs folder: its libcuda only fails.
cuda_library_folders() {
  local cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}} d
  {
    tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}"
    for d in "$cuda_home" /usr/local/cuda /usr/local/cuda-[0-9]*; do
      echo "$d/lib64"; echo "$d/lib"; echo "$d/targets/x86_64-linux/lib"
    done
    python3 - 2>/dev/null <<'EOF'
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
try:
    import nvidia  # a namespace package: importing it loads no library
    roots += [os.path.dirname(p) for p in nvidia.__path__]
except ImportError:
    pass
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        print(d)
EOF
    for d in /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
             /usr/lib/python3/dist-packages /usr/local/lib/python3*/site-packages; do
      printf '%s\n' "$d"/nvidia/*/lib
    done
    ldconfig -p 2>/dev/null | awk '$NF ~ /^\// { sub(/\/[^\/]*$/, "", $NF); print $NF }'
  } | awk 'NF && !/stubs/ && !seen[$0]++' | while read -r d; do [[ -d $d ]] && echo "$d"; done
}

if [[ -f $bundle/bundle.tar.xz ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  part "unpack the bundle" tar -xJf "$bundle/bundle.tar.xz" -C "$dir"
  [[ -x $dir/bin/gpu_tests ]] || fail_now "the bundle did not unpack into $dir"
  say "bundle: $(grep -v '^#' "$dir/bundle.txt" | tr '\n' ' ')"
  # cuBLAS, cuBLASLt and NCCL: each from the first folder that has it.
  mapfile -t folders < <(cuda_library_folders)
  path=$dir/lib
  for name in $(sed -n 's/^external=//p' "$dir/bundle.txt"); do
    found=
    for d in "${folders[@]}"; do
      if [[ -e $d/$name ]]; then found=$d; break; fi
    done
    if [[ -z $found ]]; then
      fail_now "$name (the bundled programs need it; the bundle leaves cuBLAS and NCCL to this" \
               "machine) is in none of these folders: ${folders[*]:-(none)}. Install the CUDA" \
               "toolkit's cuBLAS or the nvidia-cublas / nvidia-nccl-cu13 wheels, or put the folder" \
               "that has it on LD_LIBRARY_PATH."
    fi
    say "$name: $found"
    [[ :$path: == *:$found:* ]] || path+=:$found
  done
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The driver's libcuda.so.1, which the CUDA runtime opens: where the loader finds it.
  libcuda=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" { print $NF; exit }')
  for d in ${LD_LIBRARY_PATH//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -z $libcuda && -e $d/libcuda.so.1 ]] && libcuda=$d/libcuda.so.1
  done
  if [[ -z $libcuda ]]; then
    say "test-gpu.sh: the driver's libcuda.so.1 is nowhere the loader looks (ldconfig -p," \
        "LD_LIBRARY_PATH, /usr/local/nvidia/lib64): CUDA will report no driver"
  elif [[ $libcuda == /usr/local/nvidia/* ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
    LD_LIBRARY_PATH+=:$(dirname "$libcuda")
  fi
  say "libcuda.so.1: ${libcuda:-none}"
  bin=$dir/bin
  # Every library each program loads, and where from; a missing one or a missing symbol
  # (a library older than the one the bundle was built against) stops here.
  deps=$(ldd -r "$bin"/* "$dir"/openmpi/bin/{mpiexec,orted,ompi_info} 2>&1)
  awk '$2 == "=>" { print $1, $3 }' <<<"$deps" | sort -u | awk '{ printf "  %s => %s\n", $1, $2 }' | tee -a "$log"
  if grep -E 'not found|undefined symbol' <<<"$deps"; then
    fail_now "the bundled programs miss the libraries or symbols above (the bundle carries all but" \
             "the C and C++ runtimes, the driver, cuBLAS and NCCL)"
  fi
  # The bundle's Open MPI, run from where it was unpacked (it was built for /usr).
  . "$dir/openmpi/env.sh" "$dir"
  mpi=$dir/openmpi
  export TESSEL_GOLDEN_DIR=$root/tests/golden TESSEL_FASHION_MNIST_DIR=$dir/fashion-mnist
  if [[ $bench == 0 ]]; then
    part "gpu_tests" "$bin/gpu_tests"
    part "gpu_golden_tests" "$bin/gpu_golden_tests"
    # The bundle's mpiexec and MPI between 2 processes, without the GPU, then data_parallel's
    # 2 processes on the one GPU (MPI on host copies).
    part "cuda_communicator_host_test (2 processes, no GPU)" "$mpi/bin/mpiexec" -n 2 \
      "$bin/cuda_communicator_host_test"
    part "gpu_data_parallel_test (2 processes)" "$mpi/bin/mpiexec" -n 2 "$bin/gpu_data_parallel_test"
  fi
else
  build=${1:-$root/build-gpu}
  part "configure" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_ENABLE_CUDA=ON
  targets=(gpu_tests gpu_golden_tests gpu_data_parallel_test)
  [[ $bench == 1 ]] && targets=(gpu_bench)
  part "build" cmake --build "$build" --target "${targets[@]}"
  ((${#failed[@]})) && finish
  bin=$build/tests/gpu
  [[ $bench == 0 ]] && part "ctest -L gpu" ctest --test-dir "$build" -L gpu --output-on-failure
  [[ $bench == 1 ]] && cp "$build/benchmarks/gpu_bench" "$bin/"
fi
if [[ $bench == 0 ]]; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [[ -n $sanitizer ]]; then
    part "memcheck gpu_tests" "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/gpu_tests"
  else
    say "test-gpu.sh: compute-sanitizer not found (it comes with the CUDA toolkit): memcheck not run"
    failed+=("memcheck (no compute-sanitizer)")
  fi
else
  part "gpu_bench" "$bin/gpu_bench"
  part "gpu_frameworks.py" "${python_env[@]}" python3 "$root/benchmarks/gpu_frameworks.py"
fi
finish
