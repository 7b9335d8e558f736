#!/usr/bin/env bash
# Builds the GPU tests and benchmark here (where the CUDA toolkit and every Debian package of
# scripts/packages.txt are installed) and packs them into .gpu-bundle/bundle.tar.xz (ignored by
# git) with everything a GPU machine may lack: the shared libraries they load (Kokkos, OpenBLAS,
# ...) and a whole Open MPI that runs from wherever it is unpacked (mpiexec, its components, help
# files and PMIx). Beside it: bundle.txt (what was built with what), sources.sha256 (the hash of
# every source file the build read, which scripts/test-gpu.sh checks against the checkout it runs
# in, so that a stale bundle is refused) and fashion-mnist/ (the four IDX files, for the
# benchmarks only: carry it with a benchmark call). The GPU machine needs the NVIDIA driver, the C and
# C++ runtimes, cuBLAS and NCCL (from its CUDA toolkit or its Python wheels), and no package
# registry: carry `.gpu-bundle` there and run scripts/test-gpu.sh, which finds the bundle
# (docs/gpu.md). scripts/gpu-dry-run.sh tries the bundle here, on a file tree that hides
# Open MPI and Kokkos. Not for CI: CI has no CUDA toolkit.
# Usage: scripts/gpu-bundle.sh [build-dir]
#
# The bundle's tree (scripts/test-gpu.sh knows it):
#   bin/            gpu_tests gpu_golden_tests gpu_data_parallel_test gpu_bench, and
#                   cuda_communicator_host_test (MPI between 2 processes, no GPU needed)
#   lib/            the shared libraries of all the programs and components below
#   openmpi/bin/    mpiexec (Open MPI's orterun), orted, ompi_info
#   openmpi/lib/openmpi3/  Open MPI's components (MCA), less the network fabrics' (below)
#   openmpi/share/openmpi/ its help files;  openmpi/etc/ its configuration (openmpi-mca-params.conf)
#   openmpi/env.sh  sourced as `. openmpi/env.sh DIR` (DIR: where the bundle was unpacked): the
#                   environment that runs this Open MPI from there
#   pmix/lib/pmix/  PMIx's components;  pmix/share/pmix/ its help files
#   bundle.txt      what was built with what (also .gpu-bundle/bundle.txt, read before unpacking)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu-bundle}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ompi_lib=/usr/lib/$multiarch/openmpi/lib           # Debian's Open MPI 4.1 (libopenmpi3)
pmix_root=/usr/lib/$multiarch/pmix2                # and its external PMIx (libpmix2)
for need in "$ompi_lib/openmpi3" "$pmix_root/lib/pmix" /usr/bin/orterun /usr/bin/orted /usr/share/openmpi; do
  [[ -e $need ]] || { echo "gpu-bundle.sh: $need missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done

# The hash of every source file the programs are built from (and the golden files the tests read
# from the checkout), as the device tool sends them: tracked and untracked-not-ignored files;
# taken before the build and checked after it, so that an edit during the build is caught.
mkdir -p "$build"
(cd "$root" && git ls-files -z --cached --others --exclude-standard -- include src tests benchmarks \
   cmake CMakeLists.txt | xargs -0 sha256sum) >"$build/sources.sha256"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_ENABLE_CUDA=ON \
  -DTESSEL_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target gpu_tests gpu_golden_tests gpu_data_parallel_test gpu_bench \
  cuda_communicator_host_test
if ! (cd "$root" && sha256sum --check --quiet "$build/sources.sha256"); then
  echo "gpu-bundle.sh: the files above changed while the programs were built: run it again" >&2
  exit 1
fi
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cuda_version=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
# The oldest driver each CUDA major version runs on (CUDA's release notes, "minor version
# compatibility": any 13.x runtime on a 580 driver).
case ${cuda_version%%.*} in
  12) min_driver=525.60.13 ;;
  13) min_driver=580.65.06 ;;
  *) echo "gpu-bundle.sh: CUDA $cuda_version: which driver it needs is not known here; add it" >&2
     exit 1 ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib} "$stage/openmpi"/{bin,etc,lib/openmpi3,share} \
         "$stage/pmix/lib/pmix" "$stage/pmix/share"
cp "$build/tests/gpu/gpu_tests" "$build/tests/gpu/gpu_golden_tests" \
   "$build/tests/gpu/gpu_data_parallel_test" "$build/tests/gpu/cuda_communicator_host_test" \
   "$build/benchmarks/gpu_bench" "$stage/bin/"
cp /usr/bin/orterun "$stage/openmpi/bin/mpiexec"
cp /usr/bin/orted /usr/bin/ompi_info "$stage/openmpi/bin/"
# Open MPI's components, less those of network fabrics a one-machine run never uses, which need
# large libraries (UCX, libfabric, InfiniBand verbs, PSM), and those of OpenSHMEM (oshrun).
for c in "$ompi_lib"/openmpi3/mca_*.so; do
  case $(basename "$c") in
    mca_*_ucx.so|mca_*_ofi.so|mca_btl_openib.so|mca_btl_usnic.so|mca_mtl_psm*.so) ;;
    mca_atomic_*|mca_memheap_*|mca_scoll_*|mca_spml_*|mca_sshmem_*) ;;
    mca_reachable_netlink.so) ;;  # libnl; mca_reachable_weighted does the same job
    *) cp "$c" "$stage/openmpi/lib/openmpi3/" ;;
  esac
done
cp -r /usr/share/openmpi "$stage/openmpi/share/"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$stage/openmpi/etc/"
cp "$pmix_root"/lib/pmix/*.so "$stage/pmix/lib/pmix/"
cp -r "$pmix_root/share/pmix" "$stage/pmix/share/"
# Open MPI was built for /usr (Debian's --prefix=/usr --sysconfdir=/etc/openmpi); each of its
# installation folders can be given through the environment instead (OPAL_*), and PMIx's
# (PMIX_INSTALL_PREFIX; its component folder is an MCA parameter, which Debian sets in
# pmix2/share/pmix-mca-params.conf, not carried).
cat >"$stage/openmpi/env.sh" <<'EOF'
# The bundle's Open MPI run from where the bundle was unpacked: . openmpi/env.sh DIR
# (made by scripts/gpu-bundle.sh; DIR/lib must be on LD_LIBRARY_PATH too)
b=$1
export OPAL_PREFIX=$b/openmpi OPAL_EXEC_PREFIX=$b/openmpi OPAL_BINDIR=$b/openmpi/bin \
       OPAL_LIBDIR=$b/lib OPAL_PKGLIBDIR=$b/openmpi/lib/openmpi3 OPAL_DATAROOTDIR=$b/openmpi/share \
       OPAL_DATADIR=$b/openmpi/share OPAL_PKGDATADIR=$b/openmpi/share/openmpi \
       OPAL_SYSCONFDIR=$b/openmpi/etc \
       PMIX_INSTALL_PREFIX=$b/pmix PMIX_MCA_mca_base_component_path=$b/pmix/lib/pmix
export PATH=$b/openmpi/bin:$PATH
# mpiexec refuses root without these; the device tool's commands run as root
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No binding (each process keeps every core; tessel divides them among the processes itself), and
# shared memory without the single copy through process_vm_readv, which sandboxes may refuse.
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_btl_vader_single_copy_mechanism=none
EOF
# Every library those programs and components load, except the C and C++ runtimes (a newer
# system has newer ones), the driver, and cuBLAS and NCCL (the GPU machine's own, matching its
# driver; cuBLAS is 0.6 GB and NCCL 0.2 GB), which scripts/test-gpu.sh finds there.
external=()
while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|ld-linux*) ;;
    libgcc_s.so*|libstdc++.so*|libcuda.so*) ;;
    libcublas*.so*|libnccl.so*) external+=("$name") ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done < <(ldd "$stage"/bin/* "$stage"/openmpi/bin/{mpiexec,orted,ompi_info} \
             "$stage"/openmpi/lib/openmpi3/*.so \
             "$stage"/pmix/lib/pmix/*.so | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
if ldd "$stage"/bin/* "$stage"/openmpi/bin/{mpiexec,orted,ompi_info} "$stage"/openmpi/lib/openmpi3/*.so \
       "$stage"/pmix/lib/pmix/*.so | grep 'not found'; then
  echo "gpu-bundle.sh: the libraries above are missing here" >&2
  exit 1
fi
cp "$build/sources.sha256" "$stage/"
{
  echo "# made by scripts/gpu-bundle.sh; read by scripts/test-gpu.sh"
  echo "cuda_runtime=$cuda_version"
  echo "min_driver=$min_driver"
  echo "external=$(printf '%s\n' "${external[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')"
  echo "commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "sources=$(sha256sum <"$stage/sources.sha256" | cut -c1-16) ($(wc -l <"$stage/sources.sha256") files)"
  echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "open_mpi=$(ompi_info --version 2>/dev/null | head -1 | sed 's/.*v//')"
} >"$stage/bundle.txt"
chmod 755 "$stage"  # the mode of "." in the archive: what a folder it is unpacked into gets
mkdir -p "$root/.gpu-bundle"
rm -f "$root/.gpu-bundle/bundle.tar.xz"
tar -cf - -C "$stage" . | xz -T0 >"$root/.gpu-bundle/bundle.tar.xz"
cp "$stage/bundle.txt" "$stage/sources.sha256" "$root/.gpu-bundle/"
mkdir -p "$root/.gpu-bundle/fashion-mnist"
cp /usr/share/datasets/fashion-mnist/*.gz "$root/.gpu-bundle/fashion-mnist/" 2>/dev/null ||
  echo "gpu-bundle.sh: no Fashion-MNIST files (apt-get install dataset-fashion-mnist): gpu_bench will not run there" >&2
echo "gpu-bundle.sh: $(du -h "$root/.gpu-bundle/bundle.tar.xz" | cut -f1) in .gpu-bundle/bundle.tar.xz:" \
     "$(ls "$stage/bin" | tr '\n' ' ')+ Open MPI $(sed -n 's/^open_mpi=//p' "$stage/bundle.txt")" \
     "($(ls "$stage/openmpi/lib/openmpi3" | wc -l) components) + $(ls "$stage/lib" | wc -l) libraries;" \
     "CUDA $cuda_version (driver >= $min_driver); from the GPU machine: ${external[*]}"
