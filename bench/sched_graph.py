"""Graph build time and peak memory for 1,000 / 5,000 / 16,384-node graphs.

Each size is built in a fresh process (so peak RSS is that build's):
    .venv/bin/python bench/sched_graph.py [SIZES...]
Nodes are 2 sockets x 32 cores + 4 GPUs (71 vertices per node). The traverser is the
FastTraverser the scheduler service and resource-query build (its init includes
numbering every node's shape, see docs/scheduler.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from sched_common import write_grug


def one(nodes: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = write_grug(Path(d) / "g.graphml", nodes)
        t0 = time.perf_counter()
        g = read_grug(path)
        t1 = time.perf_counter()
        FastTraverser(g, "first")
        t2 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"nodes": nodes, "vertices": len(g.vertices), "read_s": round(t1 - t0, 3),
            "traverser_init_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
            "peak_rss_mib": round(rss, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "sizes",
        nargs="*",
        type=int,
        default=[1000, 5000, 16384],
        metavar="SIZE",
        help="node counts, each built in a fresh process (default: 1000 5000 16384)",
    )
    parser.add_argument("--one", type=int, metavar="N", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one)))
        return
    sizes = args.sizes
    print(
        f"{'nodes':>7} {'vertices':>9} {'read s':>8} {'init s':>8} {'total s':>8} {'peak MiB':>9}"
    )
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True,
                             text=True, check=True).stdout
        r = json.loads(out)
        print(f"{r['nodes']:>7} {r['vertices']:>9} {r['read_s']:>8} {r['traverser_init_s']:>8} "
              f"{r['total_s']:>8} {r['peak_rss_mib']:>9}")


if __name__ == "__main__":
    main()
