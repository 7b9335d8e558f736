#!/usr/bin/env bash
# Builds tessel's tests with GCC's AddressSanitizer and UndefinedBehaviorSanitizer and runs the
# unit, static, example and MPI tests under them, printing CTest's summary and the wall time.
# Usage: scripts/test-sanitizers.sh [ctest arguments...]   (e.g. -R '^unit\.' to run fewer)
#
# Everything comes from the `sanitize` presets of CMakePresets.json:
#   configure  build-sanitize/, RelWithDebInfo at -O1 -g, CMAKE_CXX_FLAGS
#              -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
#              -Wno-error=maybe-uninitialized, -fsanitize=address,undefined for the linker;
#              benchmarks off; TESSEL_TEST_TIME_SCALE 6 (the long-training tests' limits, the
#              parameter-server examples', six times longer). -O1, not -O2: the instrumented template-heavy tests compile 1.7x
#              faster (a unit test file: 104 s against 180 s) and still run at a useful speed.
#              The sanitizers make GCC 12 report -Wmaybe-uninitialized inside libstdc++'s
#              std::regex (std::function in _State's move), which plain builds do not: a warning
#              here, not an error.
#   test       the tests named unit.*, static.*, example.* and mpi.*, and ps.server_requests
#              (a ps's request handling, frames at odd addresses among them; compile_fail.* only
#              compile, install.* and fuzz.* build other projects with other flags), with
#     ASAN_OPTIONS   halt_on_error=1 (the first error ends the process, non-zero), detect_leaks=1,
#                    fast_unwind_on_malloc=0 (see below), check_initialization_order=1,
#                    strict_init_order=1,
#                    detect_stack_use_after_return=1, strict_string_checks=1
#     UBSAN_OPTIONS  halt_on_error=1, print_stacktrace=1, report_error_type=1
#                    (-fno-sanitize-recover=undefined already makes every UB report fatal)
#     LSAN_OPTIONS   suppressions=scripts/sanitizers/lsan.supp, print_suppressions=0
#
# Leaks and MPI: every test program starts MPI (tessel::initialize), and Open MPI leaves what
# MPI_Init allocated unfreed after MPI_Finalize (about 115 KiB in 3,300 allocations per process).
# Leak detection stays on for every test, MPI tests included (no detect_leaks=0 anywhere):
# scripts/sanitizers/lsan.supp suppresses only allocations with a frame in Open MPI's libraries
# (libmpi, libopen-pal, libopen-rte) and those it brings (hwloc, pmix, libevent, whose event loop
# runs Open MPI's progress threads), so a leak of tessel's own is still reported. Open MPI is
# built without frame pointers, so ASan's fast unwinder stops at its first frame and no
# suppression could match; fast_unwind_on_malloc=0 records whole allocation stacks (DWARF
# unwinding at every malloc: slower). mpiexec itself is not instrumented; the processes it starts
# inherit the environment above.
#
# The MPI tests run up to 8 processes on the machine's cores (oversubscribed); under ASan a step
# costs several times a Release one, so the whole run takes a while (docs/testing.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh"
jobs=$(nproc)
start=$(date +%s)
cmake --preset sanitize
cmake --build --preset sanitize -j "$jobs"
built=$(date +%s)
echo "build: $((built - start)) s"
status=0
ctest --preset sanitize -j "$jobs" "$@" || status=$?
# A test that passes on its output (PASS_REGULAR_EXPRESSION: the examples, data_parallel_test)
# passes whatever its exit status, so a sanitizer's report would not fail it: the log of the
# run, which holds every test's output, is searched for one.
log=$root/build-sanitize/Testing/Temporary/LastTest.log
if grep -nE 'ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer' \
     "$log"; then
  echo "sanitizer reports in the output of the tests: $log"
  status=1
fi
end=$(date +%s)
echo "tests: $((end - built)) s; wall time: $((end - start)) s"
exit "$status"
