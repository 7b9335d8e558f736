#!/usr/bin/env bash
# Builds the GPU tests and benchmark here (where the CUDA toolkit and every Debian package of
# scripts/packages.txt are installed) and packs them, with the shared libraries they need that a
# GPU machine may lack (Kokkos, OpenBLAS, Open MPI's libraries, ...) and the Fashion-MNIST files,
# into .gpu-bundle/bundle.tar.xz (ignored by git), for a GPU machine that has the NVIDIA driver
# and the CUDA 13 toolkit but no package registry: carry `.gpu-bundle` there and run
# scripts/test-gpu.sh, which finds the bundle (docs/gpu.md). Not for CI: CI has no CUDA toolkit.
# Usage: scripts/gpu-bundle.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu-bundle}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_ENABLE_CUDA=ON \
  -DTESSEL_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target gpu_tests gpu_golden_tests gpu_data_parallel_test gpu_bench
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/fashion-mnist"
binaries=("$build/tests/gpu/gpu_tests" "$build/tests/gpu/gpu_golden_tests"
          "$build/tests/gpu/gpu_data_parallel_test" "$build/benchmarks/gpu_bench")
cp "${binaries[@]}" "$stage/bin/"
# Every library they load, except the C and C++ runtimes (a newer system has newer ones) and
# the driver, cuBLAS and NCCL (the GPU machine's own, matching its driver; cuBLAS is 0.6 GB and
# NCCL 0.2 GB).
ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
    libcuda.so*|libcublas*.so*|libnccl.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/fashion-mnist/" 2>/dev/null ||
  echo "gpu-bundle.sh: no Fashion-MNIST files (apt-get install dataset-fashion-mnist): gpu_bench will not run there" >&2
mkdir -p "$root/.gpu-bundle"
tar -cJf "$root/.gpu-bundle/bundle.tar.xz" -C "$stage" .
echo "gpu-bundle.sh: $(du -h "$root/.gpu-bundle/bundle.tar.xz" | cut -f1) in .gpu-bundle/bundle.tar.xz:" \
     "$(ls "$stage/bin" | tr '\n' ' ')+ $(ls "$stage/lib" | wc -l) libraries"
