"""Where the leader's memory goes with a 1,000-node graph (issue 32), in one process.

    .venv/bin/python bench/leader_memory.py [--nodes 1000] [--cores 64] [--gpus 4]
                                            [--memory-mib 262144] [--top 8]

leader_footprint.py gives the figure (a real leader's RSS); this gives the breakdown, by
building what the leader holds the way it builds it, one part after the other: the
nodes as brokers register them (`NodeResources`), R as the resource service keeps it
and hands it to the scheduler (`NodesR`: those nodes and R's ``execution`` part; its
Fluxion JGF ``scheduling`` key is written only for a reader, `build_R` with it was 85 MiB
here), and the scheduler's service graph (`flat_graph`: node -> cores, GPUs, memory
granules) with its traverser (`FastTraverser`, as `LiveGraph` makes it). For each part: the bytes
tracemalloc saw it keep, per graph vertex, and the RSS it added in a second build
without tracemalloc (whose own bookkeeping doubles RSS); then the graph's bytes by
source line. Memory figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import gc
import os
import tracemalloc
from collections.abc import Callable
from typing import Any

from fluxnode.broker_conf.rv1 import NodeResources, NodesR
from fluxnode.scheduler.service.flat_graph import flat_graph
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser

MiB = 2**20


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def parts(opts: argparse.Namespace) -> list[tuple[str, Callable[[dict], Any]]]:
    """(name, build) in the order the leader makes them; each build reads what the ones
    before it left in ``held`` and returns what it keeps."""
    return [
        ("nodes (NodeResources)", lambda held: [
            NodeResources(rank=r, hostname=f"node{r}", cores=list(range(opts.cores)),
                          gpus=list(range(opts.gpus)), sockets=2, memory_mib=opts.memory_mib)
            for r in range(opts.nodes)]),
        ("R as kept (NodesR)", lambda held: NodesR(held["nodes (NodeResources)"])),
        ("service graph (flat_graph)", lambda held: flat_graph(held["nodes (NodeResources)"])),
        ("traverser (FastTraverser)", lambda held: FastTraverser(
            held["service graph (flat_graph)"], "first")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes (1000)")
    parser.add_argument("--cores", type=int, default=64, help="cores per node (64)")
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per node (4)")
    parser.add_argument("--memory-mib", type=int, default=262144, help="memory per node (256 GiB)")
    parser.add_argument("--top", type=int, default=8, help="source lines of the graph to show")
    opts = parser.parse_args()
    if opts.nodes < 1 or opts.cores < 0 or opts.gpus < 0 or opts.memory_mib < 0:
        parser.error("--nodes must be >= 1 and --cores, --gpus, --memory-mib >= 0")

    held: dict[str, Any] = {}
    rss: dict[str, float] = {}
    for name, build in parts(opts):  # RSS first, untraced
        gc.collect()
        before = rss_mib()
        held[name] = build(held)
        gc.collect()
        rss[name] = rss_mib() - before
    vertices = len(held["service graph (flat_graph)"].vertices)
    total = rss_mib()
    held.clear()
    gc.collect()

    tracemalloc.start()
    print(f"{opts.nodes} nodes, {vertices:,} graph vertices "
          f"({vertices / opts.nodes:.0f} per node); RSS with every part held "
          f"{total:.1f} MiB")
    print(f"{'part':32} {'traced MiB':>10} {'B/vertex':>9} {'RSS MiB':>8}")
    snaps = {}
    for name, build in parts(opts):
        gc.collect()
        snaps[name] = before = tracemalloc.take_snapshot()
        held[name] = build(held)
        gc.collect()
        size = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "lineno"))
        print(f"{name:32} {size / MiB:10.1f} {size / vertices:9.0f} {rss[name]:8.1f}")
    # the traverser's first reinit compacts the graph's paths (freeze_for_gc): the graph
    # as it stays is what both parts kept together
    lines = tracemalloc.take_snapshot().compare_to(snaps["service graph (flat_graph)"], "lineno")
    print("the service graph and traverser together, by source line:")
    for d in lines[:opts.top]:
        frame = d.traceback[0]
        print(f"  {d.size_diff / vertices:6.0f} B/vertex {d.count_diff:9,} objects  "
              f"{os.path.relpath(frame.filename)}:{frame.lineno}")


if __name__ == "__main__":
    main()
