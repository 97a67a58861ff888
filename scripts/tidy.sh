#!/usr/bin/env bash
# clang-tidy 14, with the checks of .clang-tidy, over moesim's C++ files: the changed ones (CI) or all.
#
#   scripts/tidy.sh [--build DIR]              # the files changed since .ci/tidy-base (what CI runs)
#   scripts/tidy.sh [--build DIR] REV          # the files changed since REV (e.g. main, HEAD~3)
#   scripts/tidy.sh [--build DIR] --all        # every file (for a person: 40-60 CPU-minutes)
#   scripts/tidy.sh --mark                     # move .ci/tidy-base to HEAD (then commit it)
#
# Exits 1 when clang-tidy reports an error: every check of .clang-tidy is one (WarningsAsErrors), and the
# whole tree is clean for them, so a finding is always in code the change touched or newly includes.
#
# "Changed" is what differs between a base commit and the working tree (committed or not, and C++ files
# git does not track yet), added or modified, .cpp/.hpp/.h. CI runs on a fresh clone of main, so there is
# no earlier CI run to compare with, and a fixed "last N commits" would both miss the rest of a merge of
# more than N commits and re-tidy the same files at every run. The base is therefore recorded in the
# repository: .ci/tidy-base holds a commit, and whoever merges moves it forward once CI is green
# (scripts/tidy.sh --mark; commit the file), which keeps the range to the work since the last green run.
# Where that commit is missing from the clone (a shallow clone, rewritten history) the last 5 commits
# stand in. A file costs about 20 CPU-seconds (its headers are parsed whole): on CI's two cores, 15 files
# take about 2.5 minutes, and a longer range says so.
#
# Compile commands: DIR's compile_commands.json (default build/; the top CMakeLists.txt exports them).
# The build is a unity build, so the database names the generated unity_N_cxx.cxx files, not the .cpp
# files they include; this script expands each into one entry per .cpp (the same command: the files of a
# target share their flags) in DIR/tidy/compile_commands.json. Nothing is compiled and no second CMake
# configuration is needed. A header is tidied on its own (clang-tidy infers its command from the nearest
# .cpp); diagnostics are reported only in the changed files (--all: in every file of the tree).
# A file the build does not compile (bench/ with MOESIM_BUILD_BENCH=OFF, calibrate/cuda/ without the
# CUDA toolkit, the .cu kernels) is skipped and named.
#
# Environment: CLANG_TIDY (default clang-tidy-14), MOESIM_TIDY_JOBS (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build
mode=changed
base=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --all) mode=all; shift ;;
    --mark) git rev-parse HEAD > .ci/tidy-base; echo "tidy: .ci/tidy-base is now $(cat .ci/tidy-base)"; exit 0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "scripts/tidy.sh: unknown option '$1' (see scripts/tidy.sh --help)" >&2; exit 2 ;;
    *) base=$1; shift ;;
  esac
done
tidy=${CLANG_TIDY:-clang-tidy-14}
jobs=${MOESIM_TIDY_JOBS:-$(nproc)}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "scripts/tidy.sh: no $build/compile_commands.json; configure first: cmake -S . -B $build -G Ninja" >&2
  exit 2
fi

# The database with one entry per .cpp.
db="$build/tidy"
mkdir -p "$db"
python3 - "$build/compile_commands.json" "$db/compile_commands.json" <<'EOF'
import json, re, sys
out = []
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if f.endswith(".cu"):
        continue  # nvcc's command; clang-tidy cannot take it
    if re.search(r"/Unity/unity_\d+_cxx\.cxx$", f):
        for src in re.findall(r'^#include "(.+)"$', open(f).read(), re.M):
            out.append({"directory": e["directory"], "command": e["command"].replace(f, src), "file": src})
    else:
        out.append(e)
json.dump(out, open(sys.argv[2], "w"), indent=0)
EOF
in_db() { grep -qF "\"file\": \"$root/$1\"" "$db/compile_commands.json"; }

# The files.
files=()
skipped=()
tidy_db=$db
extra=()
if [ "$mode" = all ]; then
  # The build's own entries: a unity file parses the headers once for its eight .cpp files, which makes
  # the whole tree about four times quicker than file by file. The .cpp files it includes are checked as
  # its headers are; that it includes .cpp files at all is by design (bugprone-suspicious-include).
  tidy_db=$build
  extra=(--checks=-bugprone-suspicious-include)
  while IFS= read -r f; do files+=("$f"); done < <(python3 - "$build/compile_commands.json" <<'EOF2'
import json, sys
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if not f.endswith(".cu") and "_data.dir/" not in f:
        print(f)
EOF2
  )
  header_filter="^$root/(apps|bench|calibrate|fuzz|model|reports|scenario|sim|tests)/"
else
  if [ -z "$base" ]; then
    base=$(cat .ci/tidy-base 2>/dev/null || true)
    if [ -z "$base" ] || ! git merge-base --is-ancestor "$base" HEAD 2>/dev/null; then
      base=$(git rev-list --first-parent --max-count=6 HEAD | tail -n 1)
      echo "tidy: .ci/tidy-base is not a commit of this clone; the last 5 commits stand in (from ${base:0:12})"
    fi
  fi
  changed=$({
    git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.hpp' '*.h'
    git ls-files --others --exclude-standard -- '*.cpp' '*.hpp' '*.h'
  } | sort -u)
  filter=()
  for f in $changed; do
    [ -f "$f" ] || continue
    case "$f" in
      *.cpp) if in_db "$f"; then files+=("$f"); else skipped+=("$f"); fi ;;
      *)
        # A header of a directory the build compiles (its command is inferred from a .cpp there).
        if grep -qF "\"file\": \"$root/$(dirname "$f")/" "$db/compile_commands.json"; then
          files+=("$f")
        else
          skipped+=("$f")
        fi ;;
    esac
    filter+=("$(printf '%s' "$root/$f" | sed 's/[.[\*^$()+?{|]/\\&/g')")
  done
  header_filter="^($(IFS='|'; echo "${filter[*]:-^$}"))$"
  echo "tidy: files changed since ${base:0:12}: ${#files[@]} to tidy"
  if [ ${#files[@]} -gt 15 ]; then
    echo "tidy: that is many (about 20 CPU-seconds each); once CI is green, scripts/tidy.sh --mark moves the base"
  fi
fi
for f in "${skipped[@]}"; do echo "tidy: skipped $f (this build does not compile it)"; done
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: nothing to tidy"
  exit 0
fi

# clang-tidy, a file per process, the cores busy; its output in $db/tidy.log. The commands are GCC's:
# Clang does not know some of its -Wno-... options, which is no finding.
log="$db/tidy.log"
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -n 1 "$tidy" -p "$tidy_db" --quiet "--header-filter=$header_filter" "${extra[@]}" \
    --extra-arg=-Wno-unknown-warning-option > "$log" 2>&1 || status=$?
# clang-tidy prints "N warnings generated." for the ones it suppresses (system headers, other files).
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Error while processing' "$log" || true
errors=$(grep -c -E '(^|: )error: ' "$log" || true)
if [ "$status" -ne 0 ] || [ "$errors" -gt 0 ]; then
  echo "tidy: $errors errors in ${#files[@]} files (scripts/tidy.sh; the checks are .clang-tidy's)" >&2
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
