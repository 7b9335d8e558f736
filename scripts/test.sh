#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test (static, compile-fail, unit,
# install), printing CTest's summary. Usage: scripts/test.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
"$root/scripts/install-deps.sh"
jobs=$(nproc)
start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
echo "build: $(( $(date +%s) - start )) s"
cd "$build"
ctest --output-on-failure -j "$jobs" -LE gpu  # the GPU tests: scripts/test-gpu.sh
