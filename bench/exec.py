"""Benchmark: wall time of `fluxnode exec -r all true` on 64 and 256 brokers.

    .venv/bin/python bench/exec.py [--sizes 64,256] [--runs 5] [--topo kary:2]

For each size, starts one `fluxnode start --test-size N` instance (CURVE on every edge),
then times `fluxnode exec -n -r all true` from a client on rank 0, end to end as a user
sees it (Python start of the `fluxnode` command included), `--runs` times; prints the
median and the minimum, and the messages the leader sent for one exec (`rexec.stats`: one
`rexec.fanout` per child subtree). Targets: < 0.5 s at 64 brokers, < 2 s at 256.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from fluxnode.testing.instance import Instance

TARGETS = {64: 0.5, 256: 2.0}


def one_size(size: int, runs: int, topo: str) -> None:
    with Instance(size, topo=topo, timeout=300) as inst:
        env = {**os.environ, "FLUXNODE_URI": inst.uri}
        argv = [sys.executable, "-m", "fluxnode", "exec", "-n", "-r", "all", "true"]
        subprocess.run(argv, env=env, check=True)  # warm the page cache
        before = inst.rpc("rexec.stats")["sent"]
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, check=True, cwd=tempfile.gettempdir())
            times.append(time.perf_counter() - t0)
        after = inst.rpc("rexec.stats")["sent"]
        per_exec = {k: (after.get(k, 0) - before.get(k, 0)) / runs for k in after}
        # the same exec without Python's start-up: the time inside the client
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import fluxnode.commands.exec"], check=True)
        startup = time.perf_counter() - t0
    target = TARGETS.get(size)
    verdict = "" if target is None else (
        f"  target < {target} s: {'met' if statistics.median(times) < target else 'NOT met'}")
    print(f"N={size:<4} topo={topo}  median={statistics.median(times):.3f} s  "
          f"min={min(times):.3f} s  (python start + imports {startup:.3f} s)  "
          f"leader sent per exec: {per_exec}{verdict}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--topo", default="kary:2")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for size in (int(s) for s in args.sizes.split(",")):
        one_size(size, args.runs, args.topo)
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
