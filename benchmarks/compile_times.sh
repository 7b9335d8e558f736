#!/usr/bin/env bash
# The compile times of a build, from ninja's log: every translation unit's time, the worst
# example and test translation units, each group's total, and the whole build.
#
#   benchmarks/compile_times.sh [--fresh] [--top N] [build-dir]
#
# --fresh first configures and builds build-dir from nothing, without ccache (CCACHE_DISABLE=1),
# as on a new machine (the directory is removed first only if it holds a CMakeCache.txt, i.e. is
# a build directory). Times are wall-clock seconds of each compiler run while `-j` of them ran
# side by side: on a 2-core machine with -j 2, compare builds made the same way. To time one
# translation unit alone, run its command from `ninja -t commands` by itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fresh=0
top=25
build=""
while (($#)); do
  case "$1" in
    --fresh) fresh=1 ;;
    --top) top=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) build=$1 ;;
  esac
  shift
done
build=${build:-$root/build}

if ((fresh)); then
  if [[ -e "$build" && ! -f "$build/CMakeCache.txt" ]]; then
    echo "compile_times: '$build' exists and is not a build directory; name another" >&2
    exit 2
  fi
  rm -rf "$build"
  start=$(date +%s)
  CCACHE_DISABLE=1 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  CCACHE_DISABLE=1 cmake --build "$build" -j "$(nproc)" > "$build/compile_times.build.log"
  echo "fresh build: $(($(date +%s) - start)) s (configure and build, -j $(nproc), no ccache)"
fi

log="$build/.ninja_log"
if [[ ! -f "$log" ]]; then
  echo "compile_times: no ninja log in '$build' (build it with the Ninja generator first)" >&2
  exit 2
fi

python3 - "$log" "$top" <<'EOF'
import re
import sys

log, top = sys.argv[1], int(sys.argv[2])
last = {}  # output -> (start, end): the newest run of each output
for line in open(log):
    if line.startswith('#'):
        continue
    start, end, _mtime, out, _hash = line.rstrip('\n').split('\t')
    last[out] = (int(start), int(end))


def group(out):
    rules = [
        (r'\.gch$', 'precompiled headers'),
        (r'^CMakeFiles/tessel_(compiled|cuda|cuda_compiled)\.dir/', 'the library'),
        (r'^tests/layering/', 'headers compiled alone'),
        (r'^tests/sanitize/CMakeFiles/tessel_compiled_sanitized', 'the library (sanitized)'),
        (r'^tests/sanitize/', 'sanitized programs'),
        (r'^tests/CMakeFiles/tessel_catch_session', "Catch2's implementation"),
        (r'^tests/gpu/', 'GPU tests (built, run on a GPU)'),
        (r'^tests/mpi/', 'MPI tests'),
        (r'^tests/CMakeFiles/static_', 'static tests'),
        (r'^tests/CMakeFiles/unit_tests\.dir/', 'unit tests'),
        (r'^examples/', 'examples'),
        (r'^benchmarks/', 'benchmarks'),
    ]
    for pattern, name in rules:
        if re.search(pattern, out):
            return name
    return 'other'


units = [(end - start, out) for out, (start, end) in last.items()
         if out.endswith(('.o', '.gch'))]
links = [(end - start, out) for out, (start, end) in last.items()
         if not out.endswith(('.o', '.gch'))]
units.sort(reverse=True)
if not units:
    sys.exit('compile_times: the log names no translation unit')
print(f'{"seconds":>8}  translation unit (the {min(top, len(units))} slowest of {len(units)})')
for ms, out in units[:top]:
    print(f'{ms / 1000:8.1f}  {out}')

groups = {}
for ms, out in units:
    g = groups.setdefault(group(out), [0, 0, 0, ''])
    g[0] += 1
    g[1] += ms
    if ms > g[2]:
        g[2], g[3] = ms, out
print()
print(f'{"units":>6} {"total s":>9} {"worst s":>8}  group (worst unit)')
for name, (n, total, worst, worst_out) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
    print(f'{n:6d} {total / 1000:9.1f} {worst / 1000:8.1f}  {name} ({worst_out.split("/")[-1]})')

def worst(prefixes):
    cand = [(ms, out) for ms, out in units if group(out) in prefixes]
    return max(cand) if cand else (0, '-')

ms, out = worst({'examples'})
print(f'\nworst example unit: {ms / 1000:.1f} s  {out}')
ms, out = worst({'unit tests', 'MPI tests', 'static tests', 'sanitized programs'})
print(f'worst test unit:    {ms / 1000:.1f} s  {out}')
compile_ms = sum(ms for ms, _ in units)
link_ms = sum(ms for ms, _ in links)
span = max(e for _, e in last.values()) - min(s for s, _ in last.values())
print(f'whole build: {len(units)} units, {compile_ms / 1000:.0f} s of compiling, '
      f'{link_ms / 1000:.0f} s of linking and other steps, {span / 1000:.0f} s from first to last step')
EOF
