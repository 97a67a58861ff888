#!/usr/bin/env bash
# Fuzzes moesim's parsers with libFuzzer (fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]
#   scripts/fuzz.sh --configure      # only configure the Clang build directory (CI builds all of it)
#
# Runs each target (default: all of them) for SECONDS (default 30) under AddressSanitizer and
# UndefinedBehaviorSanitizer, starting from the seed corpus in fuzz/corpus/<target> and the regression
# inputs in fuzz/regressions/<target>. New inputs go to <build>/fuzz-work/<target>/corpus, findings to
# <build>/fuzz-work/<target>/findings/ (crash-*, leak-*, timeout-*, oom-*). Prints one summary line per
# target and exits 1 if any target found something.
#
# Environment:
#   MOESIM_FUZZ_BUILD  the Clang build directory (default build-fuzz; configured and built if needed)
#   MOESIM_FUZZ_JOBS   targets fuzzed at once (default 1; each uses one core)
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [ "${1:-}" = "--configure" ]; then
  configure_only=1
  shift
fi
seconds=${1:-30}
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "scripts/fuzz.sh: SECONDS must be a whole number >= 1, not '$seconds'; e.g. scripts/fuzz.sh 600" >&2
  exit 2
fi
all=(units hw_profile hf_config scenario measured_runs trace safetensors pingpong_frame bench_outputs)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  if [[ ! " ${all[*]} " =~ " $t " ]]; then
    echo "scripts/fuzz.sh: unknown target '$t'; the targets are: ${all[*]}" >&2
    exit 2
  fi
done
build=${MOESIM_FUZZ_BUILD:-build-fuzz}
jobs=${MOESIM_FUZZ_JOBS:-1}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DMOESIM_SANITIZE=ON -DMOESIM_FUZZ=ON -DMOESIM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON
fi
[ "$configure_only" -eq 1 ] && exit 0
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}")

run_one() {
  local t=$1 seconds=$2 build=$3
  local work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/findings"
  local inputs=("$work/corpus" "fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && inputs+=("fuzz/regressions/$t")
  # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: one over 2 GiB is an out-of-memory bug
  # (moesim must refuse an input it cannot hold, not be killed).
  local t0=$SECONDS
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TMPDIR="$work" \
    "$build/fuzz/fuzz_$t" "${inputs[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/findings/" -print_final_stats=1 > "$work/log.txt" 2>&1
  local rc=$? took=$((SECONDS - t0))
  local execs rate cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log.txt" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log.txt" | tail -1 | cut -d' ' -f2)
  local found
  found=$(find "$work/findings" -type f | wc -l)
  printf '%-15s %5ss  %10s execs  %7s exec/s  cov %6s  corpus %5s  findings %s%s\n' "$t" "$took" "${execs:-?}" \
    "${rate:-?}" "${cov:-?}" "$(ls "$work/corpus" | wc -l)" "$found" \
    "$([ "$rc" -ne 0 ] && echo "  (exit $rc: see $work/log.txt)")"
  [ "$rc" -eq 0 ] && [ "$found" -eq 0 ]
}
export -f run_one
echo "fuzzing ${#targets[@]} target(s), ${seconds} s each, ${jobs} at a time (logs: $build/fuzz-work/<target>/log.txt)"
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$build"
