#!/usr/bin/env bash
# Installs the Debian packages moesim needs to build and test. Idempotent: it asks apt only for what is
# missing, so a second run takes a fraction of a second. Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++           # the build (C++20)
  nlohmann-json3-dev              # JSON: profiles, scenarios, config.json, results
  libboost-program-options-dev    # the command line
  libboost-mpi-dev libopenmpi-dev openmpi-bin   # calibrate net --mpi, the reference path over MPI
  libopenblas-dev                 # kernel microbenchmarks (BLAS) and least squares (its LAPACK)
  iproute2                        # network namespaces for the veth ping-pong test
  libgtest-dev                    # tests
  libbenchmark-dev                # bench/
  gnuplot-nox libgnuplot-iostream-dev libboost-iostreams-dev libboost-filesystem-dev   # report plots (PNG, SVG)
  chromium libpng-dev             # the report test: a headless screenshot of report.html, decoded
  clang-14 libclang-rt-14-dev     # CI: ASan+UBSan with libFuzzer (fuzz/, scripts/fuzz.sh)
  python3                         # validation/check.py: the public validation table's checker (a test)
  clang-format-14                 # the style test: the tree is formatted as .clang-format says
  clang-tidy-14                   # CI: scripts/tidy.sh, .clang-tidy's checks on the changed files
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
