"""Building a TBON topology of a million ranks (issue 32): time and memory per spec.

    .venv/bin/python bench/topology.py [--size 1000000] [--specs kary:1,kary:2,binomial]
                                       [--python PY]

Each spec runs in a fresh interpreter (`--python`, default this one; another checkout's
to compare): `Topology.from_spec(spec, size)` and its depth (`maxlevel`), timed with the
process CPU clock, and the growth of the peak RSS (VmHWM) over the interpreter after
imports. A second figure walks the tree once, asking every rank for its children (what
`fluxnode start` does to find the ranks that bind a port). Medians of --runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = r"""
import json, sys, time
from fluxnode.broker_conf.topology import Topology

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

spec, size, walk = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "walk"
base = hwm()
t0 = time.process_time()
topo = Topology.from_spec(spec, size)
depth = topo.maxlevel
if walk:
    interior = sum(1 for r in range(size) if topo.children(r))
cpu = time.process_time() - t0
print(json.dumps({"cpu": cpu, "mib": (hwm() - base) / 1024, "depth": depth}))
"""


def one(python: str, spec: str, size: int, walk: bool) -> dict:
    out = subprocess.run([python, "-c", PROBE, spec, str(size), "walk" if walk else "build"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="ranks (default 1000000)")
    parser.add_argument("--specs", default="kary:1,kary:2,kary:0,binomial,mincrit",
                        help="comma-separated topology specs")
    parser.add_argument("--runs", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter to measure with (default: this one)")
    opts = parser.parse_args()
    for spec in opts.specs.split(","):
        for walk in (False, True):
            runs = [one(opts.python, spec, opts.size, walk) for _ in range(opts.runs)]
            what = "build + walk" if walk else "build"
            print(f"{spec:10} {what:13} {opts.size:,} ranks: CPU "
                  f"{statistics.median(r['cpu'] for r in runs):.3f} s, peak RSS +"
                  f"{statistics.median(r['mib'] for r in runs):.1f} MiB, depth {runs[0]['depth']}")


if __name__ == "__main__":
    main()
