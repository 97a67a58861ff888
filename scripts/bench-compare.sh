#!/usr/bin/env bash
# Compares the benchmarks of BASE_REV with this tree's in one run (issue 19), so that both see the same
# machine load: timings of separate runs on a shared machine are not comparable, their ratio here is.
#
#   scripts/bench-compare.sh BASE_REV [FILTER]     e.g. scripts/bench-compare.sh main
#
# Builds BASE_REV's moesim_bench in a temporary git worktree (under a fresh mktemp -d directory, removed
# on exit) and this tree's in its build directory, runs them alternately REPS times (one repetition each,
# the first of each pair alternating) and prints per benchmark the two median wall times, their ratio
# (base / this tree: above 1 is faster) and the median events/s where the benchmark counts events.
# FILTER is a --benchmark_filter regex (default SimulateDbrx100kTokensPLRD/4, the issue's 4-node replay).
#
# Environment: REPS (default 5), BUILD_DIR (this tree's build directory, default build; configured with
# the Release build type if absent), JOBS (build jobs, default 1: the machine may be shared).
set -euo pipefail

die() {
  echo "scripts/bench-compare.sh: $*" >&2
  exit 2
}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: scripts/bench-compare.sh BASE_REV [FILTER]"; fi
filter=${2:-SimulateDbrx100kTokensPLRD/4}
reps=${REPS:-5}
jobs=${JOBS:-1}
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "REPS must be a whole number >= 1, not '$reps'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "JOBS must be a whole number >= 1, not '$jobs'"
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || die "not inside a git work tree"
base=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") || die "'$1' is not a commit of $root"
build=${BUILD_DIR:-build}
[[ "$build" = /* ]] || build="$root/$build"

# This tree's build type (Release unless its build directory says otherwise) is the base's too.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/moesim-bench-compare.XXXXXX")
cleanup() {
  git -C "$root" worktree remove --force "$tmp/src" > /dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP  # through the EXIT trap

echo "building the base ($(git -C "$root" log -1 --format='%h %s' "$base")), $type" >&2
git -C "$root" worktree add --detach --quiet "$tmp/src" "$base"
cmake -S "$tmp/src" -B "$tmp/build" -G Ninja "-DCMAKE_BUILD_TYPE=$type" "${launcher[@]}" > /dev/null
cmake --build "$tmp/build" --target moesim_bench -j "$jobs" > "$tmp/build.log" 2>&1 ||
  { tail -20 "$tmp/build.log" >&2; die "the base's moesim_bench did not build (log above)"; }
echo "building this tree ($build)" >&2
cmake --build "$build" --target moesim_bench -j "$jobs" > "$tmp/build.log" 2>&1 ||
  { tail -20 "$tmp/build.log" >&2; die "this tree's moesim_bench did not build (log above)"; }
declare -A bin=([base]="$tmp/build/bench/moesim_bench" [this]="$build/bench/moesim_bench")
for side in base this; do
  [ -x "${bin[$side]}" ] || die "${bin[$side]} is missing: is Google Benchmark installed (libbenchmark-dev)?"
done

run() {  # run SIDE REP: one repetition, its JSON to $tmp/SIDE.REP.json
  "${bin[$1]}" "--benchmark_filter=$filter" --benchmark_repetitions=1 "--benchmark_out=$tmp/$1.$2.json" \
    --benchmark_out_format=json > /dev/null 2> "$tmp/run.log" ||
    { cat "$tmp/run.log" >&2; die "the $1 benchmark failed (above)"; }
}
for ((r = 1; r <= reps; r++)); do
  echo "repetition $r of $reps" >&2
  if ((r % 2)); then run base "$r" && run this "$r"; else run this "$r" && run base "$r"; fi
done

# name, side, real time, unit, events/s ("-" when not counted): one line per benchmark run. Google
# Benchmark's JSON has one "key": value per line; a run's record ends with its closing brace (the CSV
# reporter cannot mix benchmarks whose counters differ).
for side in base this; do
  for ((r = 1; r <= reps; r++)); do
    awk -v side="$side" '
      /"benchmarks": \[/ { on = 1; next }
      !on { next }
      /^ *"[a-z_]+": / {
        key = $1; gsub(/[":]/, "", key); v = $0; sub(/^[^:]*: */, "", v); gsub(/[",]/, "", v); f[key] = v; next }
      /^ *}/ {
        if (f["name"] != "" && f["error_occurred"] != "true")
          print f["name"], side, f["real_time"], f["time_unit"], \
            ("events_per_second" in f) ? f["events_per_second"] : "-"
        delete f }' "$tmp/$side.$r.json"
  done
done > "$tmp/all.txt"
[ -s "$tmp/all.txt" ] || die "no benchmark matches '$filter' (see moesim_bench --benchmark_list_tests)"

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "base $(git -C "$root" rev-parse --short "$base") vs this tree; medians of $reps alternating runs;" \
  "ratio = base / this"
printf '%-48s %12s %12s %7s %14s %14s\n' benchmark base this ratio "base events/s" "this events/s"
cut -d' ' -f1 "$tmp/all.txt" | awk '!seen[$0]++' | while read -r name; do
  unit=$(awk -v n="$name" '$1 == n { print $4; exit }' "$tmp/all.txt")
  b=$(awk -v n="$name" '$1 == n && $2 == "base" { print $3 }' "$tmp/all.txt" | median)
  t=$(awk -v n="$name" '$1 == n && $2 == "this" { print $3 }' "$tmp/all.txt" | median)
  be=$(awk -v n="$name" '$1 == n && $2 == "base" && $5 != "-" { print $5 }' "$tmp/all.txt" | median)
  te=$(awk -v n="$name" '$1 == n && $2 == "this" && $5 != "-" { print $5 }' "$tmp/all.txt" | median)
  awk -v n="$name" -v b="$b" -v t="$t" -v u="$unit" -v be="$be" -v te="$te" '
    function ms(x) { return x == "" ? "-" : sprintf("%.1f %s", x, u) }  # a side may lack a benchmark
    function ev(x) { return x == "" ? "-" : sprintf("%.2f M/s", x / 1e6) }
    BEGIN { printf "%-48s %12s %12s %7s %14s %14s\n", n, ms(b), ms(t), (b == "" || t == "") ? "-" : \
              sprintf("%.2fx", b / t), ev(be), ev(te) }'
done
