#!/usr/bin/env bash
# The GPU tests (CTest label `gpu`) and the GPU benchmarks, on a machine with an NVIDIA GPU. They
# need one: without it this script says so and fails (they are never skipped).
#   scripts/test-gpu.sh           the tests: a preflight, then each part under its own time cap
#   scripts/test-gpu.sh --bench   only the benchmarks: gpu_bench, then benchmarks/gpu_frameworks.py
#                                 (PyTorch eager, torch.compile, JAX) on the same GPU, then the
#                                 time of each kernel of the wide and the CNN step (ncu)
#   scripts/test-gpu.sh --all     the tests, then the benchmarks in the time left (one call)
# Made for one call of the device tool (10 minutes at most, 15 minutes of GPU time in all), so
# that a run tells as much as it can whatever fails and cannot spend the time on a hang:
# - a preflight (about 20 s) prints the GPU, the driver, the kernel, the network interfaces, xz,
#   compute-sanitizer, where cuBLAS, cuBLASLt and NCCL were found, and checks the bundle's source
#   hashes against this checkout (a stale bundle is refused, naming the files that differ) and
#   `mpiexec -n 2 true` with the bundle's Open MPI;
# - every part runs under its own `timeout` (its cap, or what is left of TESSEL_GPU_TIME_LIMIT:
#   480 s for the tests, 540 s with --all), goes on past a failure, and prints its time and result;
#   collectives give up after TESSEL_COLLECTIVE_TIMEOUT=60 s, NCCL_DEBUG=WARN;
# - gpu_tests runs one test case per process, so that a crash costs one case;
# - memcheck (compute-sanitizer, --report-api-errors no) over the cases without NCCL; the NCCL
#   case under memcheck alone, logged and not counted (NCCL's driver probes are reported as
#   errors); both skipped, with a message, where the sanitizer refuses the device (gVisor);
# - one summary line at the end: parts passed / failed / skipped.
# The logs go under $OUT when it is set (the device tool brings it back), else under the temporary
# folder: test-gpu.log (--bench: test-gpu-bench.log), everything; test-gpu-parts.tar.gz, one log
# per part.
# With .gpu-bundle/bundle.tar.xz (made elsewhere by scripts/gpu-bundle.sh) it runs the bundled
# programs, with the bundle's libraries and Open MPI, and this machine's cuBLAS and NCCL, which it
# looks for in the CUDA toolkit, then in the Python wheels (nvidia-cublas, nvidia-nccl-cu13); the
# benchmarks read Fashion-MNIST from .gpu-bundle/fashion-mnist (carried only with them).
# Otherwise it builds the programs here with the CUDA backend on (every package of
# scripts/packages.txt and the CUDA toolkit needed). scripts/gpu-dry-run.sh runs this script on
# a machine without a GPU, to see everything up to CUDA's first call.
# Usage: scripts/test-gpu.sh [--bench | --all] [build-dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tests=1 bench=0
case ${1:-} in
  --bench) tests=0 bench=1; shift ;;
  --all) bench=1; shift ;;
esac
what=$( ((tests && bench)) && echo "tests and benchmarks" || { ((bench)) && echo benchmarks || echo tests; })
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
start=$(now)
limit=${TESSEL_GPU_TIME_LIMIT:-$( ((tests && bench)) && echo 540 || echo 480)}
# Python's frameworks get the loader path as it was: their own CUDA libraries (from their wheels),
# not the bundle's CUDA runtime or the toolkit's cuBLAS.
if [[ -v LD_LIBRARY_PATH ]]; then python_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); else python_env=(env -u LD_LIBRARY_PATH); fi
# A hang ends in a minute with the collective named (comm/watchdog.hpp), not at the time limit.
export TESSEL_COLLECTIVE_TIMEOUT=${TESSEL_COLLECTIVE_TIMEOUT:-60} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
logs=${OUT:-${TMPDIR:-/tmp}}
log=$logs/test-gpu$( ((tests)) || echo -bench).log
parts_dir=$(mktemp -d)
trap 'rm -rf "$parts_dir"' EXIT
: >"$log"
say() { echo "$*" | tee -a "$log"; }
fail_now() {
  echo "test-gpu.sh: $*" | tee -a "$log" >&2
  echo "test-gpu.sh: summary: stopped before the parts ran (above); the whole output: $log" | tee -a "$log" >&2
  exit 1
}

passed=() failed=() skipped=() uncounted=() times=()
record() {  # record passed|failed TEXT: a part's result, or among the uncounted (counted=0)
  if [[ ${counted:-1} == 0 ]]; then uncounted+=("$2")
  elif [[ $1 == passed ]]; then passed+=("$2")
  else failed+=("$2"); fi
}
# part NAME CAP COMMAND...: runs it within CAP seconds and what is left of the limit;
# `counted=0 part ...` logs its result without counting it.
part() {
  local name=$1 cap=$2 t0 left rc took file
  shift 2
  left=$(awk -v l="$limit" -v s="$(seconds_since "$start")" 'BEGIN { printf "%d", l - s }')
  if ((left < 5)); then
    say "== $name: not run, the $limit s limit (TESSEL_GPU_TIME_LIMIT) is spent"
    record failed "$name (not run: no time left)"
    return 1
  fi
  ((cap > left)) && cap=$left
  file=$parts_dir/$(tr -c 'A-Za-z0-9._-' '_' <<<"$name" | cut -c1-60).log
  say "== $name (at most $cap s)"
  t0=$(now)
  timeout --kill-after=5 "$cap" "$@" 2>&1 | tee "$file" >>"$log"
  rc=${PIPESTATUS[0]}
  took=$(seconds_since "$t0")
  last_log=$file
  # The end of a failed part's output on the screen too (all of it in the logs).
  ((rc != 0)) && tail -n "${TESSEL_GPU_TAIL:-12}" "$file" | cut -c1-240 | sed 's/^/   | /'
  times+=("$name $took s")
  if ((rc == 124 || rc == 137)); then
    say "== $name: stopped at its cap after $took s"
    record failed "$name (stopped at its $cap s cap)"
  elif ((rc != 0)); then
    say "== $name: failed (exit $rc) after $took s"
    record failed "$name"
  else
    say "== $name: passed in $took s"
    record passed "$name"
  fi
  return "$rc"
}
skip() { say "== $1: skipped: $2"; skipped+=("$1"); }
finish() {
  say "test-gpu.sh: time of each part: $( ((${#times[@]})) && printf '%s; ' "${times[@]}")$(seconds_since "$start") s in all"
  ((${#failed[@]})) && say "test-gpu.sh: failed: $(printf '%s; ' "${failed[@]}")"
  ((${#skipped[@]})) && say "test-gpu.sh: skipped: $(printf '%s; ' "${skipped[@]}")"
  ((${#uncounted[@]})) && say "test-gpu.sh: logged, not counted: $(printf '%s; ' "${uncounted[@]}")"
  tar -czf "$logs/test-gpu-parts.tar.gz" -C "$parts_dir" . 2>/dev/null
  say "test-gpu.sh: summary: ${#passed[@]} parts passed, ${#failed[@]} failed, ${#skipped[@]} skipped" \
      "(GPU $what; logs: $log, $logs/test-gpu-parts.tar.gz)"
  ((${#failed[@]} == 0))
  exit
}

# ---- preflight -----------------------------------------------------------------------------------
say "== preflight"
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
  say "which driver CUDA $cuda needs is not known here; the driver is $driver"
elif [[ $(printf '%s\n' "$min_driver" "$driver" | sort -V | head -1) != "$min_driver" ]]; then
  fail_now "the NVIDIA driver here is $driver, older than $cuda_from, CUDA $cuda, needs" \
           "(driver $min_driver or newer): CUDA would fail at its first call. Use a machine with" \
           "a newer driver, or build with a CUDA toolkit this driver supports."
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1 || true)
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "driver $driver: new enough for CUDA $cuda ($cuda_from; needs $min_driver or newer)"
  echo "kernel: $(uname -r) ($(uname -m)); cores: $(nproc); memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "network interfaces: $(for i in /sys/class/net/*; do [[ -e $i ]] && printf '%s(%s) ' "${i##*/}" "$(cat "$i/operstate" 2>/dev/null)"; done)"
  echo "xz: $(command -v xz || echo 'none (the bundle is unpacked by python3'"'"'s lzma)')"
  echo "compute-sanitizer: ${sanitizer:-none} $([[ -n $sanitizer ]] && "$sanitizer" --version 2>/dev/null | tail -1)"
  command -v nvcc >/dev/null && echo "nvcc: $(nvcc --version | tail -1)"
  echo "python3: $(command -v python3 || echo none)"
} 2>&1 | tee -a "$log"
# 2. The bundle was made from this checkout's sources: each file the build read, by its hash.
if [[ -f $bundle/bundle.tar.xz ]]; then
  [[ -f $bundle/sources.sha256 ]] || fail_now "$bundle/sources.sha256 is missing: make the bundle again (scripts/gpu-bundle.sh)"
  say "bundle: $(grep -v '^#' "$bundle/bundle.txt" | tr '\n' ' ')"
  stale=$(cd "$root" && sha256sum --check --quiet "$bundle/sources.sha256" 2>&1 | sed -n 's/: FAILED.*$//p' | head -8)
  if [[ -n $stale ]]; then
    fail_now "the bundle was made from other sources than this checkout's: these differ:" \
             "$(tr '\n' ' ' <<<"$stale")- make it again here (scripts/gpu-bundle.sh) and carry the new one"
  fi
  say "bundle's sources: the $(wc -l <"$bundle/sources.sha256") files it was built from match this checkout's"
fi

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
unpack() {  # unpack ARCHIVE DIR: with xz where it is, else with python3's lzma
  if command -v xz >/dev/null; then
    tar -xJf "$1" -C "$2"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' "$1" "$2"
  fi
}

if [[ -f $bundle/bundle.tar.xz ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir" "$parts_dir"' EXIT
  unpack "$bundle/bundle.tar.xz" "$dir" 2>&1 | tee -a "$log"
  [[ -x $dir/bin/gpu_tests ]] || fail_now "the bundle did not unpack into $dir"
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
    say "the driver's libcuda.so.1 is nowhere the loader looks (ldconfig -p," \
        "LD_LIBRARY_PATH, /usr/local/nvidia/lib64): CUDA will report no driver"
  elif [[ $libcuda == /usr/local/nvidia/* ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
    LD_LIBRARY_PATH+=:$(dirname "$libcuda")
  fi
  say "libcuda.so.1: ${libcuda:-none}"
  bin=$dir/bin
  # Every library each program loads, and where from; a missing one or a missing symbol
  # (a library older than the one the bundle was built against) stops here.
  deps=$(ldd -r "$bin"/* "$dir"/openmpi/bin/{mpiexec,orted,ompi_info} 2>&1)
  awk '$2 == "=>" { print $1, $3 }' <<<"$deps" | sort -u | awk '{ printf "  %s => %s\n", $1, $2 }' >>"$log"
  if grep -E 'not found|undefined symbol' <<<"$deps"; then
    fail_now "the bundled programs miss the libraries or symbols above (the bundle carries all but" \
             "the C and C++ runtimes, the driver, cuBLAS and NCCL)"
  fi
  # The bundle's Open MPI, run from where it was unpacked (it was built for /usr).
  . "$dir/openmpi/env.sh" "$dir"
  mpiexec=$dir/openmpi/bin/mpiexec
else
  build=${1:-$root/build-gpu}
  targets=(gpu_tests gpu_golden_tests gpu_data_parallel_test cuda_communicator_host_test)
  ((bench)) && targets+=(gpu_bench)
  part configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTESSEL_ENABLE_CUDA=ON -DTESSEL_BUILD_EXAMPLES=OFF
  part build 3600 cmake --build "$build" --target "${targets[@]}" || finish
  bin=$build/tests/gpu
  ((bench)) && cp "$build/benchmarks/gpu_bench" "$bin/"
  mpiexec=$(command -v mpiexec || echo mpiexec)
fi
# One machine, loopback enough: Open MPI's and NCCL's sockets on the loopback interface, which
# every machine has (a machine may have no other), and shared memory between the processes.
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo} \
       OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
say "environment: TESSEL_COLLECTIVE_TIMEOUT=$TESSEL_COLLECTIVE_TIMEOUT NCCL_DEBUG=$NCCL_DEBUG" \
    "NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME OMPI_MCA_oob_tcp_if_include=$OMPI_MCA_oob_tcp_if_include" \
    "OMPI_MCA_btl=$OMPI_MCA_btl"
part "mpiexec -n 2 true" 15 "$mpiexec" -n 2 true
say "preflight: $(seconds_since "$start") s"

# ---- the tests -----------------------------------------------------------------------------------
catch_spec() {  # a Catch2 test spec matching exactly the test case named $1
  sed 's/[][\\,*~"]/\\&/g' <<<"$1"
}
export TESSEL_GOLDEN_DIR=$root/tests/golden
if ((tests)); then
  # gpu_tests, one test case per process; the first (the GPU is usable) names CUDA's reason
  # where it is not, and the NCCL case runs last, alone.
  mapfile -t cases < <(timeout 20 "$bin/gpu_tests" --list-test-names-only '~[nccl]' 2>/dev/null | awk 'NF')
  mapfile -t nccl_cases < <(timeout 20 "$bin/gpu_tests" --list-test-names-only '[nccl]' 2>/dev/null | awk 'NF')
  if ((${#cases[@]} == 0)); then
    part "gpu_tests (all cases: they could not be listed)" 150 "$bin/gpu_tests" --durations yes
  else
    say "gpu_tests: ${#cases[@]} test cases, then ${#nccl_cases[@]} with NCCL, each in its own process"
    for c in "${cases[@]}" "${nccl_cases[@]}"; do
      part "gpu_tests: $c" 60 "$bin/gpu_tests" --durations yes "$(catch_spec "$c")"
    done
  fi
  part gpu_golden_tests 80 "$bin/gpu_golden_tests"
  # The bundle's mpiexec and MPI between 2 processes, without the GPU, then data_parallel's
  # 2 processes on the one GPU (MPI on host copies).
  part "cuda_communicator_host_test (2 processes, no GPU)" 30 "$mpiexec" -n 2 \
    "$bin/cuda_communicator_host_test"
  part "gpu_data_parallel_test (2 processes)" 60 "$mpiexec" -n 2 "$bin/gpu_data_parallel_test"
  # memcheck: the cases without NCCL, API errors not reported (NCCL and cuBLAS probe the driver
  # with calls that fail by design); then the NCCL case alone, not counted.
  if [[ -z $sanitizer ]]; then
    skip "memcheck" "compute-sanitizer not found (it comes with the CUDA toolkit)"
  else
    refused='Device not supported|not supported on this|Error 999|unknown error'
    part "memcheck gpu_tests ~[nccl]" 110 "$sanitizer" --tool memcheck --report-api-errors no \
      --error-exitcode 1 "$bin/gpu_tests" --durations yes '~[nccl]'
    rc=$?
    if ((rc != 0)) && grep -Eq "$refused" "$last_log"; then
      unset 'failed[-1]'
      skip "memcheck gpu_tests ~[nccl]" "compute-sanitizer refused this device (as under gVisor): $(grep -Em1 "$refused" "$last_log" | cut -c1-160)"
      skip "memcheck gpu_tests [nccl]" "compute-sanitizer refused this device"
    else
      counted=0 part "memcheck gpu_tests [nccl] (logged, not counted)" 30 "$sanitizer" \
        --tool memcheck --report-api-errors no --error-exitcode 1 "$bin/gpu_tests" \
        --durations yes '[nccl]'
      say "   (memcheck over NCCL: $(grep -c '=========.*Invalid\|========= Program hit' "$last_log") reports; not counted)"
    fi
  fi
fi

# ---- the benchmarks ------------------------------------------------------------------------------
if ((bench)); then
  data=${TESSEL_FASHION_MNIST_DIR:-$bundle/fashion-mnist}
  if [[ ! -f $data/train-images-idx3-ubyte.gz ]]; then
    [[ -d /usr/share/datasets/fashion-mnist ]] && data=/usr/share/datasets/fashion-mnist
  fi
  export TESSEL_FASHION_MNIST_DIR=$data
  say "Fashion-MNIST: $data"
  epochs=$( ((tests)) && echo 2 || echo 3)
  part gpu_bench 120 "$bin/gpu_bench" --epochs "$epochs"
  # The frameworks' parts (TESSEL_GPU_FRAMEWORKS: mlp, wide, cnn, or none; torch.compile takes
  # a minute or more to compile each).
  if [[ ${TESSEL_GPU_FRAMEWORKS:-} == none ]]; then
    skip gpu_frameworks.py "TESSEL_GPU_FRAMEWORKS=none"
  else
    part gpu_frameworks.py 330 "${python_env[@]}" PYTHONUNBUFFERED=1 python3 \
      "$root/benchmarks/gpu_frameworks.py" --epochs "$epochs" \
      --what "${TESSEL_GPU_FRAMEWORKS:-mlp,wide,cnn}"
  fi
  # The time of each kernel of 3 steps (Nsight Compute, at the GPU's own clocks): where a step's
  # time goes beyond its GEMMs.
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
  for p in ${TESSEL_GPU_PROFILE-wide cnn}; do
    if [[ -z $ncu ]]; then skip "kernel times of 3 $p steps" "ncu (Nsight Compute) not found"; continue; fi
    part "kernel times of 3 $p steps (ncu)" 90 "$ncu" --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --print-summary per-kernel \
      "$bin/gpu_bench" --only "$p" --steps 20 --profile "$p"
  done
fi
finish
