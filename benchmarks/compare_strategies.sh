#!/usr/bin/env bash
# seeds/001 under tf.distribute's MirroredStrategy, side by side in one run: tessel's
# mirrored_strategy<> against data_parallel<> on 2 processes (strategy_bench, interleaved), then
# TensorFlow's MirroredStrategy with the CPU split into 2 logical devices
# (tf_mirrored_mlp_fashion_mnist.py). TensorFlow comes from the Python index into a venv:
#   python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu
# Usage: benchmarks/compare_strategies.sh [build-dir] [tf-python]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
python=${2:-/tmp/tfenv/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
cmake --build "$build" --target strategy_bench >/dev/null
tessel=$(mpiexec -n 2 "$build/benchmarks/strategy_bench" --rounds 3 | tee /dev/stderr | grep '^RESULT')
tf=$("$python" "$here/tf_mirrored_mlp_fashion_mnist.py" --epochs 3 --replicas 2 2>/dev/null |
     tee /dev/stderr | grep '^RESULT')
value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
m=$(value mirrored_s "$tessel"); d=$(value data_parallel_s "$tessel"); t=$(value seconds_per_epoch "$tf")
printf '| seconds per epoch (2 replicas) | tessel mirrored_strategy | tessel data_parallel | TensorFlow MirroredStrategy |\n'
printf '| --- | ---: | ---: | ---: |\n| seeds/001 MLP, batch 32 | %s | %s | %s |\n' "$m" "$d" "$t"
python3 -c "print(f'mirrored/data_parallel {float(\"$m\")/float(\"$d\"):.3f}; TensorFlow/tessel mirrored {float(\"$t\")/float(\"$m\"):.1f}x')"
