#!/usr/bin/env bash
# seeds/001's MLP (batch 32, Adam), samples per second, side by side in one run: asynchronous
# training with parameter servers (1 chief + N workers + 2 ps, ps_bench through
# scripts/ps_cluster.sh) against mirrored_strategy<> on N processes (strategy_bench, one epoch
# of 50,000 Fashion-MNIST images), N = 1 and 2.
# Usage: benchmarks/compare_ps.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
cmake --build "$build" --target ps_bench strategy_bench >/dev/null
printf '| training processes | parameter servers (samples/s) | mirrored_strategy (samples/s) | ratio |\n'
printf '| ---: | ---: | ---: | ---: |\n'
for n in 1 2; do
  ps=$("$here/../scripts/ps_cluster.sh" --workers "$n" --ps 2 "$build/benchmarks/ps_bench" |
       tee -a /dev/stderr | sed -n 's/^RESULT ps .*samples_per_s=\([0-9.]*\).*/\1/p')
  m=$(mpiexec -n "$n" --oversubscribe "$build/benchmarks/strategy_bench" --rounds 1 |
      tee -a /dev/stderr | sed -n 's/^RESULT strategies .*mirrored_s=\([0-9.]*\).*/\1/p')
  mirrored=$(python3 -c "print(f'{50000 / float(\"$m\"):.0f}')")
  ratio=$(python3 -c "print(f'{float(\"$ps\") / float(\"$mirrored\"):.2f}')")
  printf '| %s | %s | %s | %s |\n' "$n" "$ps" "$mirrored" "$ratio"
done
