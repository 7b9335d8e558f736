#!/usr/bin/env bash
# A dry run of the GPU bundle on this machine, which has no GPU: it shows, before any GPU time is
# spent, that scripts/test-gpu.sh and the bundle of scripts/gpu-bundle.sh work on a machine that
# has the CUDA toolkit but no Open MPI, no Kokkos, no OpenBLAS and no package registry, as the
# GPU machine is. Every program (gpu_tests, gpu_golden_tests, gpu_bench, and
# `mpiexec -n 2 gpu_data_parallel_test` with the bundle's Open MPI) must start, with all its
# libraries from the bundle, the CUDA toolkit, NCCL's wheel or the C and C++ runtimes; MPI_Init
# must succeed in both processes; and each must stop at CUDA's first call, which finds no driver
# here. `mpiexec -n 2 cuda_communicator_host_test`, which needs no GPU, must pass: MPI works
# between the two processes. Anything else (a library not found, mpiexec or MPI_Init failing, a
# library loaded from elsewhere, Open MPI missing a component or a help file) fails this script,
# loudly.
#
# How: in a mount, PID and network namespace of its own (unshare; root needed), with the loopback
# interface alone (a machine may have no other), overlays hide Open MPI (/usr/lib/<arch>/openmpi,
# /usr/share/openmpi, /etc/openmpi, mpiexec and the other tools in /usr/bin), PMIx, libevent,
# hwloc, Kokkos, OpenBLAS, the Fortran runtime and xz (the bundle is then unpacked by python3); NCCL is hidden in
# the CUDA toolkit and shown instead as PyTorch's wheel would have it (a folder nvidia/nccl/lib
# on python3's path), so that test-gpu.sh's search of the wheels is tried too. A fake
# nvidia-smi, first on PATH, reports an H100 and driver 580.159.04. test-gpu.sh then runs from a
# copy of the repository as the device tool sends it (tracked and untracked files, and
# .gpu-bundle), once for the tests, once with --bench, once with a fake driver 535 that it must
# refuse, and once with one source file changed after the bundle was made (a stale bundle), which
# it must refuse naming the file. The loader's record (LD_DEBUG=libs,files) of every bundled program tells where
# each library came from. The namespace, its mounts and its processes end with the script.
# Run by hand (CI has no CUDA toolkit), not by ctest.
# Usage: scripts/gpu-dry-run.sh [--no-make] [--keep]
#   --no-make  take .gpu-bundle/bundle.tar.xz as it is, instead of making it again
#   --keep     leave the work folder (/tmp/gpu-dry-run.*: the logs, LD_DEBUG's record) behind
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
make=1 keep=0
for a in "$@"; do
  case $a in
    --no-make) make=0 ;;
    --keep) keep=1 ;;
    *) echo "usage: scripts/gpu-dry-run.sh [--no-make] [--keep]" >&2; exit 2 ;;
  esac
done
if [[ $(id -u) != 0 ]] || ! unshare -m --pid --fork true 2>/dev/null; then
  echo "gpu-dry-run.sh: needs root and unshare (mount and PID namespaces) to hide Open MPI" >&2
  exit 1
fi
if [[ $make == 1 ]]; then
  "$root/scripts/gpu-bundle.sh"
fi
[[ -f $root/.gpu-bundle/bundle.tar.xz ]] || { echo "gpu-dry-run.sh: no .gpu-bundle/bundle.tar.xz (scripts/gpu-bundle.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/gpu-dry-run.XXXXXX)
[[ $keep == 1 ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{repo,fakebin,out,tmp,ld,site/nvidia/nccl/lib}

# The repository as the device tool sends it: tracked and untracked-not-ignored files, and the
# carried .gpu-bundle.
(cd "$root" && { git ls-files -z --cached --others --exclude-standard; printf '.gpu-bundle\0'; } |
   while IFS= read -r -d '' f; do if [[ -e $f ]]; then printf '%s\0' "$f"; fi; done |
   tar --null -T - -cf -) | tar -xf - -C "$work/repo"

cat >"$work/fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
# A fake nvidia-smi for scripts/gpu-dry-run.sh: one H100, the driver in $FAKE_DRIVER.
driver=${FAKE_DRIVER:-580.159.04}
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-d1e2a3d4-0000-4000-8000-00000000dry0)" ;;
  *--query-gpu=*)
    q=$(printf '%s\n' "$@" | sed -n 's/^--query-gpu=//p')
    out=
    for f in $(echo "$q" | tr ',' ' '); do
      case $f in
        name) v="NVIDIA H100 80GB HBM3" ;;
        driver_version) v=$driver ;;
        memory.total) v="81559 MiB" ;;
        *) v="[N/A]" ;;
      esac
      out=${out:+$out, }$v
    done
    echo "$out" ;;
  *) echo "NVIDIA-SMI $driver   Driver Version: $driver   CUDA Version: 13.0 (fake, gpu-dry-run.sh)" ;;
esac
EOF
chmod +x "$work/fakebin/nvidia-smi"
cat >"$work/fakebin/compute-sanitizer" <<'EOF'
#!/bin/sh
# A fake compute-sanitizer for scripts/gpu-dry-run.sh: runs the program after its options, or,
# with FAKE_SANITIZER_REFUSES set, refuses the device as it does under gVisor.
[ "$1" = --version ] && { echo "fake compute-sanitizer (gpu-dry-run.sh)"; exit 0; }
while [ $# -gt 0 ]; do
  case $1 in --*) shift 2 ;; *) break ;; esac
done
if [ -n "${FAKE_SANITIZER_REFUSES:-}" ]; then
  echo "========= Error: Device not supported. Please refer to the \"Supported Devices\" section"
  echo "========= Error: process didn't terminate successfully"
  exit 1
fi
echo "========= COMPUTE-SANITIZER (fake)"
exec "$@"
EOF
chmod +x "$work/fakebin/compute-sanitizer"

arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
nccl=$(ls /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 \
          /usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2 2>/dev/null | head -1 || true)
[[ -n $nccl ]] || { echo "gpu-dry-run.sh: no libnccl.so.2 in /usr/local/cuda here" >&2; exit 1; }
nccl_dir=$(dirname "$(readlink -f "$nccl")")

# Inside the namespace (as root): hide, check that it is hidden, run test-gpu.sh three times.
cat >"$work/inside.sh" <<'EOF'
set -uo pipefail
work=$1 arch=$2 nccl=$3 nccl_dir=$4
hide() {  # hide DIR PATTERN...: an overlay over DIR in which the entries matching a PATTERN are gone
  local dir=$1 layer f
  shift
  layer=$(mktemp -d "$work/hide.XXXXXX")
  (cd "$dir" && for p in "$@"; do
     for f in $p; do
       if [[ (-e $f || -L $f) && ! -e $layer/$f ]]; then mknod "$layer/$f" c 0 0; fi  # a whiteout
     done
   done)
  mount -t overlay dry-run-hide -o "lowerdir=$layer:$dir" "$dir"
}
mount --make-rprivate /
# NCCL as PyTorch's wheel has it, then hidden in the toolkit.
touch "$work/site/nvidia/nccl/lib/libnccl.so.2"
mount --bind "$(readlink -f "$nccl")" "$work/site/nvidia/nccl/lib/libnccl.so.2"
hide "$nccl_dir" 'libnccl*'
hide "/usr/lib/$arch" openmpi pmix2 openblas-pthread blas lapack hwloc 'libmpi*' 'libopen-pal*' \
  'libopen-rte*' 'liboshmem*' 'libmca_common*' 'libompitrace*' 'libpmix*' 'libevent*' 'libhwloc*' \
  'libmunge*' '*kokkos*' 'libopenblas*' 'libblas*' 'liblapack*' 'libgfortran*' 'libquadmath*' \
  'libxsmm*'
hide /usr/share openmpi pmix hwloc
hide /etc openmpi
hide /usr/bin 'mpi*' 'orte*' orted 'ompi*' 'opal*' 'osh*' 'shmem*' aggregate_profile profile2mat \
  'xz*' 'unxz' 'lzma*' 'unlzma'
ip link set lo up
mount -t sysfs dry-run-sysfs /sys  # this namespace's interfaces in /sys/class/net
echo "== what is hidden"
bad=0
for p in "/usr/lib/$arch/openmpi" "/usr/lib/$arch/pmix2" /usr/share/openmpi /etc/openmpi \
         "/usr/lib/$arch/libmpi.so.40" "/usr/lib/$arch/libopen-pal.so.40" "/usr/lib/$arch/libpmix.so.2" \
         "/usr/lib/$arch/libevent_core-2.1.so.7" "/usr/lib/$arch/libhwloc.so.15" \
         "/usr/lib/$arch/libopenblas.so.0" "/usr/lib/$arch/libgfortran.so.5" "$nccl"; do
  if [[ -e $p ]]; then echo "still there: $p"; bad=1; else echo "gone: $p"; fi
done
kokkos=$(ls /usr/lib/$arch | grep -i kokkos || true)
[[ -n $kokkos ]] && { echo "Kokkos still there: $kokkos"; bad=1; } || echo "gone: every *kokkos* in /usr/lib/$arch"
for t in mpiexec mpirun orterun orted ompi_info; do
  if command -v $t >/dev/null; then echo "still on PATH: $(command -v $t)"; bad=1; fi
done
((bad)) || echo "gone from PATH: mpiexec mpirun orterun orted ompi_info"
if command -v xz >/dev/null; then echo "still on PATH: $(command -v xz)"; bad=1; else echo "gone from PATH: xz"; fi
echo "network interfaces: $(ls /sys/class/net | tr '\n' ' ')"
[[ $(ls /sys/class/net) == lo ]] || { echo "an interface other than lo is there"; bad=1; }
echo "libnccl.so.2 as a wheel has it: $(ls -la "$work/site/nvidia/nccl/lib/libnccl.so.2" | awk '{print $5, $NF}')"
((bad)) && exit 3
echo "== the bundle's Open MPI, run from where it is unpacked"
mkdir "$work/check"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' \
  "$work/repo/.gpu-bundle/bundle.tar.xz" "$work/check"
(
  export LD_LIBRARY_PATH=$work/check/lib
  . "$work/check/openmpi/env.sh" "$work/check"
  echo "mpiexec: $(command -v mpiexec)"
  ompi_info --path all | grep -E 'Prefix|Libdir|Pkglibdir|Pkgdatadir|Sysconfdir'
  echo "components: $(ompi_info | grep -c ' MCA ')"
  ompi_info >/dev/null
  mpiexec -n 2 "$work/no-such-program"
) >"$work/openmpi.log" 2>&1
cd "$work/repo"
export PATH=$work/fakebin:$PATH PYTHONPATH=$work/site TMPDIR=$work/tmp
mkdir -p "$work"/out/{tests,bench,old-driver,refused,stale}
unset LD_LIBRARY_PATH
echo "== test-gpu.sh"
LD_DEBUG=libs,files LD_DEBUG_OUTPUT=$work/ld/tests OUT=$work/out/tests bash scripts/test-gpu.sh >"$work/tests.log" 2>&1
echo "exit $?" >>"$work/tests.log"
echo "== test-gpu.sh --bench"
LD_DEBUG=libs,files LD_DEBUG_OUTPUT=$work/ld/bench OUT=$work/out/bench bash scripts/test-gpu.sh --bench >"$work/bench.log" 2>&1
echo "exit $?" >>"$work/bench.log"
echo "== test-gpu.sh with a driver 535"
FAKE_DRIVER=535.104.05 OUT=$work/out/old-driver bash scripts/test-gpu.sh >"$work/old-driver.log" 2>&1
echo "exit $?" >>"$work/old-driver.log"
echo "== test-gpu.sh where compute-sanitizer refuses the device"
FAKE_SANITIZER_REFUSES=1 OUT=$work/out/refused bash scripts/test-gpu.sh >"$work/refused.log" 2>&1
echo "exit $?" >>"$work/refused.log"
echo "== test-gpu.sh with a source file changed after the bundle was made"
cp include/tessel/core.hpp "$work/core.hpp"
echo "// changed after the bundle was made" >>include/tessel/core.hpp
OUT=$work/out/stale bash scripts/test-gpu.sh >"$work/stale.log" 2>&1
echo "exit $?" >>"$work/stale.log"
cp "$work/core.hpp" include/tessel/core.hpp
EOF
echo "gpu-dry-run.sh: in $work, a namespace where Open MPI, Kokkos, OpenBLAS and the toolkit's NCCL are hidden"
unshare -m -n --pid --fork --mount-proc --propagation private \
  bash "$work/inside.sh" "$work" "$arch" "$nccl" "$nccl_dir" || {
  echo "gpu-dry-run.sh: FAILED: the namespace could not be set up as the GPU machine is (above)" >&2
  exit 1
}

[[ $keep == 1 ]] && echo "gpu-dry-run.sh: the work folder stays: $work"

# What must be seen. Every check prints one line; any failed one fails the dry run.
set +e
problems=0
ok() { echo "  ok: $*"; }
bad() { echo "  FAILED: $*"; problems=$((problems + 1)); }
check() {  # check FILE PATTERN WHAT: FILE has a line matching the extended regex PATTERN
  if grep -Eq -- "$2" "$1"; then ok "$3"; else bad "$3 (no line matching '$2' in $(basename "$1"))"; fi
}
section() {  # section LOG NAME: the lines test-gpu.sh printed for its part NAME
  awk -v n="$2" 'index($0, "== " n " (at most ") == 1 { on = 1 } on { print } on && index($0, "== " n ":") == 1 { exit }' "$1"
}
# CUDA's error without a driver, and tessel's words for it (Catch2 wraps them over two lines)
no_gpu='CUDA: cudaGetDeviceCount failed: cudaError(InsufficientDriver|NoDevice)'
no_gpu_words='no usable NVIDIA GPU here'
show() {  # show LOG NAME PATTERN...: the part's key lines, and checks each PATTERN is among them
  local log=$1 name=$2 p
  shift 2
  section "$log" "$name" >"$work/part"
  echo "-- $name"
  grep -E "$(IFS='|'; echo "$*")|^== $name: " "$work/part" | awk '!seen[$0]++' | head -6 |
    cut -c1-200 | sed 's/^/   | /'
  [[ -s $work/part ]] || { bad "$name did not run"; return; }
  local before=$problems
  for p in "$@"; do check "$work/part" "$p" "$name: $p"; done
  ((problems == before)) || { echo "   what it printed last:"; tail -8 "$work/part" | cut -c1-200 | sed 's/^/   | /'; }
}

echo "== the tests (scripts/test-gpu.sh)"
# What test-gpu.sh printed (ts, b) and its whole log under $OUT (t, with every part's output).
ts=$work/tests.log
t=$work/out/tests/test-gpu.log
check "$t" '^GPU 0: NVIDIA H100' "the fake nvidia-smi is the one found"
check "$t" '^driver 580\.[0-9.]*: new enough for CUDA' "the driver was checked first"
check "$t" '^xz: none \(the bundle is unpacked by python3' "xz is missing, and said so"
check "$t" '^network interfaces: lo\([a-z]*\) $' "the loopback interface alone"
check "$t" "^bundle's sources: the [0-9]+ files it was built from match this checkout's" "the bundle's sources match the checkout"
check "$t" '^== mpiexec -n 2 true: passed' "mpiexec -n 2 true passed (loopback only)"
check "$t" '^preflight: [0-9.]+ s$' "the preflight's time is printed"
check "$t" '^libcublas\.so\.13: /usr/local/cuda' "cuBLAS found in the CUDA toolkit"
check "$t" '^libcublasLt\.so\.13: /usr/local/cuda' "cuBLASLt found in the CUDA toolkit"
check "$t" "^libnccl\\.so\\.2: $work/site/nvidia/nccl/lib\$" "NCCL found in the wheel's folder (nvidia/nccl/lib), through python3"
missing='=> not found|error while loading shared libraries|cannot open shared object|undefined symbol'
if grep -Eq "$missing" "$t" "$work/bench.log"; then
  bad "a library was not found: $(grep -Eh "$missing" "$t" "$work/bench.log" | head -3)"
else
  ok "no library missing (ldd -r of every bundled program, and their runs)"
fi
check "$t" '^gpu_tests: [0-9]+ test cases, then 1 with NCCL, each in its own process' "gpu_tests' cases listed"
first=$(sed -n 's/^== \(gpu_tests: cuda: the process has a GPU.*\) (at most [0-9]* s)$/\1/p' "$t" | head -1)
show "$t" "$first" "$no_gpu" "$no_gpu_words" 'test cases: 1 \| 1 failed'
n_cases=$(sed -n 's/^gpu_tests: \([0-9]*\) test cases, then \([0-9]*\) with NCCL.*/\1 + \2/p' "$t")
n_cases=$((${n_cases:-0}))
n_failed=$(grep -Ec '^== gpu_tests: .*: failed \(exit [0-9]+\) after' "$t")
if ((n_cases > 0 && n_failed == n_cases)); then ok "each of the $n_cases cases of gpu_tests ran alone and failed at CUDA"
else bad "$n_failed of $n_cases cases of gpu_tests failed as they must"; fi
show "$t" gpu_golden_tests 'gpu_golden_tests is a Catch' "$no_gpu" "$no_gpu_words" \
  'assertions: [0-9]+ \| [1-9][0-9]* passed'
show "$t" "cuda_communicator_host_test (2 processes, no GPU)" \
  'on 2 processes: [0-9]+ checks per process, 0 failed' '^== .*: passed in'
show "$t" "gpu_data_parallel_test (2 processes)" "error \\(process 0 of 2\\): $no_gpu.*$no_gpu_words" \
  "error \\(process 1 of 2\\): $no_gpu.*$no_gpu_words"
check "$t" '^compute-sanitizer: .*fakebin/compute-sanitizer' "the fake compute-sanitizer is the one found"
check "$t" '^== memcheck gpu_tests ~\[nccl\]: failed' "memcheck over the cases without NCCL ran, and failed at CUDA (counted)"
check "$t" '^== memcheck gpu_tests \[nccl\] \(logged, not counted\): failed' "memcheck over the NCCL case ran"
check "$t" '^test-gpu\.sh: logged, not counted: memcheck gpu_tests \[nccl\]' "the NCCL case's memcheck is not counted"
if grep -q '^test-gpu\.sh: failed: .*memcheck gpu_tests \[nccl\]' "$t"; then bad "the NCCL case's memcheck was counted as failed"
else ok "the NCCL case's memcheck is not among the failed"; fi
check "$t" '^test-gpu\.sh: time of each part: mpiexec -n 2 true [0-9.]+ s; gpu_tests: .* [0-9.]+ s; ' "the time of each part is printed"
check "$t" '^test-gpu\.sh: summary: [0-9]+ parts passed, [1-9][0-9]* failed, [0-9]+ skipped' "the summary line"
for f in test-gpu.log test-gpu-parts.tar.gz; do
  if [[ -s $work/out/tests/$f ]]; then ok "\$OUT/$f written"; else bad "no \$OUT/$f"; fi
done
check "$ts" '^exit 1$' "test-gpu.sh failed, as it must without a GPU"

echo "== the benchmarks (scripts/test-gpu.sh --bench)"
bs=$work/bench.log
b=$work/out/bench/test-gpu-bench.log
show "$b" gpu_bench "$no_gpu.*$no_gpu_words"
show "$b" gpu_frameworks.py '^== gpu_frameworks.py: (failed|passed)'
if grep -q '^== gpu_tests' "$b"; then bad "--bench ran the tests too"; else ok "--bench runs only the benchmarks"; fi
check "$bs" '^exit 1$' "test-gpu.sh --bench failed, as it must without a GPU"

echo "== an old driver (a fake 535)"
check "$work/old-driver.log" 'driver here is 535\.[0-9.]*, older than .*CUDA 13\.[0-9]*.*580' "refused, naming both versions"
if grep -q '^== mpiexec' "$work/old-driver.log"; then bad "went on past the driver check"; else ok "stopped before anything else"; fi

echo "== compute-sanitizer refuses the device (as under gVisor)"
r=$work/out/refused/test-gpu.log
check "$r" '^== memcheck gpu_tests ~\[nccl\]: skipped: compute-sanitizer refused this device' "memcheck skipped, saying why"
check "$r" '^== memcheck gpu_tests \[nccl\]: skipped' "the NCCL case's memcheck skipped"
check "$r" '^test-gpu\.sh: summary: [0-9]+ parts passed, [0-9]+ failed, 2 skipped' "both counted as skipped"
if grep -q '^test-gpu\.sh: failed: .*memcheck' "$r"; then bad "a refused memcheck was counted as failed"
else ok "a refused memcheck is not among the failed"; fi

echo "== a stale bundle (a source file changed after it was made)"
check "$work/stale.log" 'made from other sources than this checkout.*include/tessel/core\.hpp' "refused, naming the file"
check "$work/stale.log" '^exit 1$' "failed"
if grep -q '^== mpiexec' "$work/stale.log"; then bad "went on past the source check"; else ok "stopped before anything ran"; fi

echo "== the bundle's Open MPI from its own folder"
o=$work/openmpi.log
sed 's/^/   | /' "$o" | grep -v 'no-such-program' | head -12
check "$o" "^mpiexec: $work/check/openmpi/bin/mpiexec\$" "mpiexec is the bundle's"
for d in Prefix Pkglibdir Pkgdatadir Sysconfdir; do
  check "$o" "^ *$d: $work/check/" "ompi_info's $d is in the bundle"
done
check "$o" 'components: ([5-9][0-9]|[1-9][0-9][0-9])$' "ompi_info finds the bundle's components"
check "$o" 'mpiexec was unable to launch the specified application' \
  "mpiexec's help messages are found (its help files in the bundle)"
if grep -Eiq "couldn't open the help file|unable to open|component was not found" "$o"; then
  bad "Open MPI missed a help file or component: $(grep -Ei "couldn't open|unable to open|was not found" "$o" | head -2)"
else
  ok "no help file or component missing"
fi

echo "== where each bundled program's libraries came from (LD_DEBUG=libs,files)"
# Allowed: the bundle (where test-gpu.sh unpacked it), the CUDA toolkit, the wheel's folder, and
# the C and C++ runtimes (the GPU machine's own). Anything else means the bundle lacks it.
base='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|ld-linux-x86-64\.so\.2|libgcc_s\.so\.1|libstdc\+\+\.so\.6|libnss_[a-z]+\.so\.2)$'
seen=()
py_in_bundle=0
for f in "$work"/ld/tests.* "$work"/ld/bench.*; do
  prog=$(sed -n 's/^ *[0-9]*:\tinitialize program: //p' "$f" | head -1)
  if grep -q 'initialize program: .*python3' "$f"; then
    # Python (gpu_frameworks.py) must not look in the bundle: its frameworks bring their own CUDA.
    # Its image's lines: from the exec that started it (after the last image's "transferring
    # control") to the end.
    awk '{ sub(/^ *[0-9]+:\t/, "") }
         py { print; next }
         /initialize program: .*python3/ { py = 1; printf "%s", buf; print; next }
         /^transferring control:/ { buf = ""; next }
         { buf = buf $0 "\n" }' "$f" >"$work/python"
    if grep -q "search path=.*$work/tmp/tmp\.[^/]*/lib" "$work/python"; then py_in_bundle=1; fi
    continue
  fi
  case $prog in */bin/gpu_*|*/bin/cuda_communicator_host_test|*/openmpi/bin/mpiexec) ;; *) continue ;; esac
  top=${prog%/bin/*}; top=${top%/openmpi}
  awk '{ sub(/^ *[0-9]+:\t/, "") }
       /^ *trying file=/ { t = $0; sub(/.*trying file=/, "", t); next }
       /generating link map/ { f = $0; sub(/^file=/, "", f); sub(/ \[.*/, "", f); print (f ~ /^\// ? f : t); t = "" }' \
      "$f" | sort -u >"$work/loaded"
  counts=$(while read -r l; do
    case $l in
      "$top"/*) echo bundle ;;
      "$work"/site/*) echo wheel ;;
      /usr/local/cuda*) echo toolkit ;;
      *) if [[ $(basename "$l") =~ $base ]]; then echo "C/C++ runtime"; else echo "ELSEWHERE $l"; fi ;;
    esac
  done <"$work/loaded" | sort | uniq -c | awk '{ n = $1; $1 = ""; printf "%s%d from%s", (NR > 1 ? ", " : ""), n, $0 }')
  name=${prog#"$top"/}
  seen+=("$name")
  if [[ $counts == *ELSEWHERE* ]]; then bad "$name: $counts"; else ok "$name: $counts"; fi
done
if ((py_in_bundle)); then
  bad "python3 (gpu_frameworks.py) searched the bundle's libraries"
else
  ok "python3 (gpu_frameworks.py) did not search the bundle's libraries"
fi
for p in bin/gpu_tests bin/gpu_golden_tests bin/cuda_communicator_host_test \
         bin/gpu_data_parallel_test openmpi/bin/mpiexec bin/gpu_bench; do
  n=0
  for s in "${seen[@]}"; do [[ $s == "$p" ]] && n=$((n + 1)); done
  # mpiexec: -n 2 true, then the two MPI tests; gpu_tests: listed, then one case at a time
  case $p in
    bin/cuda_communicator_host_test|bin/gpu_data_parallel_test) want=2 ;;
    openmpi/bin/mpiexec) want=3 ;;
    bin/gpu_tests) want=$((n_cases + 2)) ;;
    *) want=1 ;;
  esac
  ((n >= want)) || bad "$p started $n times, not $want or more"
done

if ((problems)); then
  echo "gpu-dry-run.sh: FAILED: $problems of the checks above (the logs: rerun with --keep)" >&2
  exit 1
fi
echo "gpu-dry-run.sh: passed: every program started, with its libraries from the bundle, the toolkit" \
     "or the wheel, MPI_Init succeeded in both processes, and each stopped at CUDA (no driver here)"
