#!/usr/bin/env bash
# Installs what is missing, builds and runs the demo: seeds/001's MLP trained data-parallel on 2
# processes (mpiexec, one process per device) on Fashion-MNIST (Debian's dataset-fashion-mnist),
# with Keras's output printed by process 0, then evaluated on the test set.
# Usage: scripts/demo.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target mlp_fashion_mnist
# Open MPI refuses to run as root unless told it may (containers, CI machines).
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpiexec -n 2 --oversubscribe "$build/examples/mlp_fashion_mnist"
