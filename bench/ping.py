"""Benchmark: round trip of broker.ping to a rank 3 levels down (kary:2 rank 7: 0 -> 1 -> 3 -> 7).

    .venv/bin/python bench/ping.py [--count 1000]

Runs `fluxnode start --test-size 8` and, inside it, 1,000 sequential pings from a
client on rank 0's local connector to rank 7 with pad 0 and 64 KiB; prints median and p99.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

INNER = "--inner"


def inner(count: int) -> None:
    from fluxnode.agent.broker.client import Client

    with Client.connect() as c:
        for pad in (0, 65536):
            padding = "p" * pad
            for _ in range(20):  # warm up
                c.rpc("broker.ping", {"pad": padding}, nodeid=7)
            times = []
            for seq in range(count):
                t0 = time.perf_counter()
                resp = c.rpc("broker.ping", {"seq": seq, "pad": padding}, nodeid=7)
                times.append((time.perf_counter() - t0) * 1000.0)
                assert resp["pad"] == padding
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print(
                f"pad={pad:>6}  n={count}  median={statistics.median(times):.3f} ms  p99={p99:.3f} "
                "ms  "
                f"route={resp['route']}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument(INNER, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.count)
        return
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "fluxnode",
            "start",
            "--test-size",
            "8",
            "--topo",
            "kary:2",
            "-q",
            "-S",
            "broker.modules=",
            "--",
            sys.executable,
            __file__,
            INNER,
            "--count",
            str(args.count),
        ],
        timeout=600,
    )
    print(f"(load average: {os.getloadavg()[0]:.2f}; cpus: {os.cpu_count()})")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
