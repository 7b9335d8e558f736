#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test (static, compile-fail, unit,
# install), printing CTest's summary. Usage: scripts/test.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
"$root/scripts/install-deps.sh"
jobs=$(nproc)
start=$(date +%s)
# ccache (installed with the other packages) when it is there and not disabled (CCACHE_DISABLE=1 builds
# as a fresh machine would: benchmarks/compile_times.sh measures so). Paths are taken relative to
# the checkout, so that another clone on the same machine finds the same entries.
launcher=()
if command -v ccache > /dev/null && [[ "${CCACHE_DISABLE:-0}" != 1 ]]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  # The precompiled header (cmake/TesselPrecompiledHeaders.cmake) is cached as ccache's manual says.
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
cmake --build "$build" -j "$jobs"
echo "build: $(( $(date +%s) - start )) s"
cd "$build"
ctest --output-on-failure -j "$jobs" -LE gpu  # the GPU tests: scripts/test-gpu.sh
