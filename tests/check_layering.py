#!/usr/bin/env python3
"""No module includes a module above it (issue 22).

The modules, lowest first, and the folders that hold them:
  model      model/             units, architectures, hardware, the cost model
  sim        sim/               placements, the event core, the decode and serving engines, traces
  scenario   scenario/          the parameter table and the instruments as libraries (estimate, simulate, serve)
  calibrate  calibrate/         microbenchmarks, fits, validation (calibrate/reference/ is `reference`, above it)
  reference  calibrate/reference/
  reports    reports/           sweeps, the report directory, its calibration
apps/, tests/, bench/ and fuzz/ sit above all of them. A file may include its own module and those below.
Prints one line per offending include (file:line: what it includes) and exits 1 if there is any.
"""
import pathlib
import re
import sys

ORDER = ["model", "sim", "scenario", "calibrate", "reference", "reports"]
FOLDERS = {"model": "model", "sim": "sim", "scenario": "scenario", "calibrate": "calibrate",
           "reference": "calibrate/reference", "reports": "reports"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]moesim/([a-z_]+)/')


def module_of(path: pathlib.Path, root: pathlib.Path):
    rel = path.relative_to(root).as_posix()
    best = None
    for name, folder in FOLDERS.items():  # the longest folder that holds the file (reference inside calibrate)
        if rel.startswith(folder + "/") and (best is None or len(FOLDERS[best]) < len(folder)):
            best = name
    return best


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    bad = []
    checked = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".cpp", ".hpp", ".cu", ".cuh") or "build" in path.relative_to(root).parts[0]:
            continue
        own = module_of(path, root)
        if own is None:
            continue
        checked += 1
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) in ORDER and ORDER.index(m.group(1)) > ORDER.index(own):
                bad.append(f"{path.relative_to(root)}:{n}: module {own} includes moesim/{m.group(1)}/, a module "
                           f"above it (order: {' < '.join(ORDER)}); move what it needs down, or the file up")
    for b in bad:
        print(b)
    if checked == 0:
        print(f"no source files found under {root}: give the source root", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
