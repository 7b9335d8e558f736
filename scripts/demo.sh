#!/usr/bin/env bash
# Installs what is missing, builds and runs the demo: seeds/001's MLP trained on Fashion-MNIST
# (Debian's dataset-fashion-mnist) with Keras's output, then evaluated on the test set.
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target mlp_fashion_mnist
"$build/examples/mlp_fashion_mnist"
