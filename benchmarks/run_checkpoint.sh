#!/usr/bin/env bash
# Checkpoint I/O against the disk: the raw write speed (dd of 1 GiB with conv=fsync, into the
# same directory) beside checkpoint_bench --large (a 1 GB training state: sharded checkpoints and
# Keras .weights.h5, saved and loaded, on 1 process and on 2), interleaved round by round, since
# this machine's disk is shared and its speed moves.
# Usage: benchmarks/run_checkpoint.sh [build-dir] [rounds] [dir]
set -euo pipefail
build="${1:-$(cd "$(dirname "$0")/.." && pwd)/build}"
rounds="${2:-2}"
dir="${3:-${TMPDIR:-/tmp}/tessel_checkpoint_io}"
bench="$build/benchmarks/checkpoint_bench"
mkdir -p "$dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for round in $(seq "$rounds"); do
  rate=$(dd if=/dev/zero of="$dir/dd.bin" bs=1M count=1024 conv=fsync 2>&1 | tail -1 |
         sed -n 's/.* \([0-9.]*\) \([MG]\)B\/s$/\1 \2/p')
  rm -f "$dir/dd.bin"
  read -r value unit <<<"$rate"
  [[ "$unit" == G ]] && value=$(awk -v v="$value" 'BEGIN { print v * 1000 }')
  echo "RESULT dd round=$round write_mb_per_s=$value"
  "$bench" --large --saves 3 --every 1 --dir "$dir/ckpt" | grep '^RESULT'
  mpiexec -n 2 "$bench" --large --saves 3 --every 1 --dir "$dir/ckpt" | grep '^RESULT'
done
rm -rf "$dir"
