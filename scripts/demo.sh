#!/usr/bin/env bash
# Installs what is missing, builds and runs the demo: the layouts and communication plan of the
# seeds/000 ModelParallel MLP on the meshes 8x1, 4x2, 2x4 and 1x8 (training lands in issue 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target explain_seed_mlp
"$build/examples/explain_seed_mlp"
