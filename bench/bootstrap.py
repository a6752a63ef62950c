"""Benchmark: wall time of `fluxnode start --test-size N true` and memory per broker.

    .venv/bin/python bench/bootstrap.py [--sizes 1,16,64,256] [--repeat 3] [--with-scheduler]
                                        [--python PY]

Brokers load no modules unless --with-scheduler (then rank 0 loads the default
fluxnode.scheduler.service, as plain `fluxnode start` does).

Targets (2-core machine): N=64 to quorum in < 3 s, N=256 < 10 s, broker RSS < 40 MiB.
RSS counts pages shared copy-on-write with the launcher; PSS splits them fairly.
CPU is user + system time of `fluxnode start` and every broker it forked and reaped (from
getrusage of the children): on a machine shared with other work it varies far less than
the wall time; so do the minor page faults per broker (the same children), which a
forked broker's CPU mostly is and which the load does not change. `--python` runs
another checkout's interpreter (the figures before a change).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLUXNODE = [sys.executable, "-m", "fluxnode"]

MEASURE = r"""
import json, os, sys
from pathlib import Path
root = Path(os.environ["FLUXNODE_URI"].removeprefix("local://")).parent.parent
info = json.loads((root / "instance.json").read_text())
out = []
for b in info["brokers"]:
    rss = pss = 0
    for line in open(f"/proc/{b['pid']}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    try:
        for line in open(f"/proc/{b['pid']}/smaps_rollup"):
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    out.append((rss, pss))
print(json.dumps(out))
"""


MODULES: list[str] = ["-S", "broker.modules="]


def run(n: int, command: list[str]) -> tuple[float, float, str, int]:
    """(wall seconds, CPU seconds, stdout, minor faults) of one `fluxnode start --test-size n`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([*FLUXNODE, "start", "--test-size", str(n), "-q", *MODULES, "--", *command],
                       capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"N={n}: fluxnode start failed ({p.returncode}): {p.stderr.strip()}")
    return elapsed, cpu, p.stdout, after.ru_minflt - before.ru_minflt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,16,64,256")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--with-scheduler", action="store_true", help="rank 0 loads the default scheduler module"
    )
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter to run fluxnode with (default: this one)")
    args = ap.parse_args()
    if args.with_scheduler:
        MODULES.clear()
    FLUXNODE[0] = args.python
    print(
        f"{'N':>5} {'median s':>9} {'min s':>7} {'CPU s':>7} {'RSS MiB max':>12} "
        f"{'RSS MiB avg':>12} {'PSS MiB avg':>12} {'faults/broker':>14}"
    )
    results = []
    for n in (int(x) for x in args.sizes.split(",")):
        runs = [run(n, ["true"]) for _ in range(args.repeat)]
        times = [r[0] for r in runs]
        _, _, out, _ = run(n, [sys.executable, "-c", MEASURE])
        mem = json.loads(out)
        rss = [r / 1024 for r, _ in mem]
        pss = [p / 1024 for _, p in mem]
        row = {
            "n": n,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "cpu_s": statistics.median(r[1] for r in runs),
            "rss_max_mib": max(rss),
            "rss_avg_mib": statistics.mean(rss),
            "pss_avg_mib": statistics.mean(pss),
            "faults_per_broker": statistics.median(r[3] for r in runs) / n,
        }
        results.append(row)
        print(f"{n:>5} {row['median_s']:>9.2f} {row['min_s']:>7.2f} {row['cpu_s']:>7.2f} "
              f"{row['rss_max_mib']:>12.1f} "
              f"{row['rss_avg_mib']:>12.1f} {row['pss_avg_mib']:>12.1f} "
              f"{row['faults_per_broker']:>14.0f}", flush=True)
    print(f"(load average at end: {os.getloadavg()[0]:.2f}; cpus: {os.cpu_count()})")
    Path(os.environ.get("BENCH_JSON", "/dev/null")).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
