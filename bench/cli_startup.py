"""How long `fluxnode --help` (or any fluxnode command line) takes from exec to exit: the
first thing a new user runs, and the cost every script pays per call.

    .venv/bin/python bench/cli_startup.py [--runs N] [-- ARGS ...]

Runs the installed `fluxnode` entry point (beside this interpreter) N times and prints the
median and range of the wall time, and the median CPU time (user + system of the child,
which depends less on what else the machine runs).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def one_run(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    parser.add_argument("args", nargs="*", default=["--help"], help="fluxnode's arguments")
    opts = parser.parse_args()
    exe = os.path.join(os.path.dirname(sys.executable), "fluxnode")
    argv = [exe, *opts.args]
    one_run(argv)  # warm the page cache and .pyc files
    walls, cpus = zip(*(one_run(argv) for _ in range(opts.runs)), strict=True)
    print(
        f"fluxnode {' '.join(opts.args)}: {opts.runs} runs, wall median "
        f"{statistics.median(walls) * 1e3:.0f} ms (min {min(walls) * 1e3:.0f}, "
        f"max {max(walls) * 1e3:.0f}), CPU median {statistics.median(cpus) * 1e3:.0f} ms; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
