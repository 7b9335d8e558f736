#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ with clang++ (ASan + UBSan) into build-fuzz/ and
# runs each for SECONDS seconds, one after another, printing per harness the inputs executed and
# the coverage reached. Exits non-zero when a harness finds a crash, a sanitizer report, a
# violated invariant, a timeout or an out-of-memory; the input that did it is left in
# build-fuzz/artifacts/<harness>/ (libFuzzer prints how to reproduce it).
#
#   scripts/fuzz.sh SECONDS [HARNESS...]     e.g. scripts/fuzz.sh 600, scripts/fuzz.sh 60 idx
#
# Harnesses (tests/fuzz/fuzz_<name>.cpp): idx, fashion_mnist, regex, collective_timeout, the
# saving ones: checkpoint_manifest, checkpoint_metadata, checkpoint_path, keras_config, zip,
# weights_precheck, weights_index, and the parameter servers' wire: ps_server, ps_worker. The corpus each run grows is kept in build-fuzz/corpus/<harness>/ and used again
# by the next run (delete it to start from the seeds in tests/fuzz/corpus/<harness>/ alone); the
# log of the last run is build-fuzz/logs/<harness>.log. Environment: FUZZ_BUILD (default
# build-fuzz), FUZZ_CXX (default clang++), FUZZ_ARGS (more libFuzzer flags, e.g.
# "-max_len=8192"; not -jobs, whose output goes to other logs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [HARNESS...]   (harnesses: $(cd "$root/tests/fuzz" &&
    ls fuzz_*.cpp | sed 's/^fuzz_//; s/\.cpp$//' | tr '\n' ' '))" >&2
  exit 2
fi
seconds=$1
shift
build=${FUZZ_BUILD:-$root/build-fuzz}
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  mapfile -t harnesses < <(cd "$root/tests/fuzz" && ls fuzz_*.cpp | sed 's/^fuzz_//; s/\.cpp$//')
fi

"$root/scripts/install-deps.sh"
list=$(IFS=';'; echo "${harnesses[*]}")
cmake "-DBINARY_DIR=$build" "-DCXX=${FUZZ_CXX:-clang++}" "-DHARNESSES=$list" \
  -P "$root/tests/fuzz/build_harnesses.cmake"

# Stacks are symbolized by llvm-symbolizer (Debian's llvm package). A UBSan report is fatal (the
# harnesses are built with -fno-sanitize-recover=undefined); ask it for its stack too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

failed=()
summary=()
for h in "${harnesses[@]}"; do
  corpus=$build/corpus/$h
  artifacts=$build/artifacts/$h
  log=$build/logs/$h.log
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  touch "$build/logs/$h.start"
  echo "== fuzz_$h: $seconds s (log: $log)"
  set +e
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$build/fuzz_$h" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} "$corpus" "$root/tests/fuzz/corpus/$h" \
    >"$log" 2>&1
  rc=$?
  set -e
  final_stat() { grep -o "stat::$1: *[0-9]*" "$log" | tail -1 | grep -o '[0-9]*$' || true; }
  execs=$(final_stat number_of_executed_units)
  rate=$(final_stat average_exec_per_sec)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)
  corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"$last" | sed 's/corp: //' || true)
  line=$(printf '%-19s executions %-10s exec/s %-7s cov %-6s ft %-7s corpus %s' "$h" \
    "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")
  found=$(find "$artifacts" -type f -newer "$build/logs/$h.start" | head -5)
  if [[ $rc -ne 0 || -n $found ]]; then
    failed+=("$h")
    line+="   FAILED (exit $rc)"
    echo "fuzz_$h found a problem (exit $rc); the end of its log:" >&2
    tail -40 "$log" >&2
    [[ -n $found ]] && echo "reproducers: $found" >&2
  fi
  echo "$line"
  summary+=("$line")
done

echo "== summary ($seconds s each)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "fuzz: findings in: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
