#!/usr/bin/env bash
# The cost of a keyed cluster (CURVE with the ZAP handler, ps/security.hpp) on seeds/001's MLP
# (ps_bench: 1 chief, 1 worker, 1 ps by default), open and keyed runs alternated PAIRS times on
# this noisy machine: each run's samples per second, then the medians and their ratio, and the
# raw ZeroMQ round trip of the step's bytes, open and over CURVE, measured in the same runs.
# Usage: benchmarks/compare_ps_security.sh [build-dir] [PAIRS=5] [WORKERS=1] [PS=1]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
pairs=${2:-5} workers=${3:-1} ps=${4:-1}
export OPENBLAS_NUM_THREADS=1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $workers worker(s), $ps ps"
cmake --build "$build" --target ps_bench tessel_ps_keys >/dev/null
run() {  # extra ps_cluster.sh options
  "$here/../scripts/ps_cluster.sh" --workers "$workers" --ps "$ps" "$@" "$build/benchmarks/ps_bench" 2>/dev/null |
    sed -n 's/^RESULT ps .*samples_per_s=\([0-9.]*\).*raw_ms=\([0-9.]*\) raw_curve_ms=\([0-9.]*\).*/\1 \2 \3/p'
}
open_runs=() keyed_runs=() raw=() raw_curve=()
printf '| pair | open (samples/s) | keyed (samples/s) | keyed / open |\n| ---: | ---: | ---: | ---: |\n'
for ((i = 1; i <= pairs; i++)); do
  read -r o r1 c1 <<<"$(run)"
  read -r k r2 c2 <<<"$(run --new-keys "$build/tessel-ps-keys")"
  open_runs+=("$o") keyed_runs+=("$k") raw+=("$r1" "$r2") raw_curve+=("$c1" "$c2")
  printf '| %d | %s | %s | %s |\n' "$i" "$o" "$k" "$(python3 -c "print(f'{$k / $o:.3f}')")"
done
python3 - "${open_runs[*]}" "${keyed_runs[*]}" "${raw[*]}" "${raw_curve[*]}" <<'PY'
import statistics, sys
o, k, r, c = ([float(x) for x in a.split()] for a in sys.argv[1:])
print(f"median: open {statistics.median(o):.0f} samples/s, keyed {statistics.median(k):.0f} "
      f"samples/s, keyed / open {statistics.median(k) / statistics.median(o):.3f} "
      f"(pairs' ratios {min(b / a for a, b in zip(o, k)):.3f}-{max(b / a for a, b in zip(o, k)):.3f})")
print(f"raw ZeroMQ round trip of the step's bytes (median of {len(r)}): open "
      f"{statistics.median(r):.3f} ms, CURVE {statistics.median(c):.3f} ms")
PY
