"""The scheduler service's live graph: build from R, and growth when a broker joins.

    .venv/bin/python bench/service_graph.py [--nodes 1000] [--repeat 3]

Nodes are 2 sockets x 4 cores + 64 GiB (137 vertices per node in the service graph:
the node, 8 cores, 128 memory granules). Prints the build time of a LiveGraph from R
(parse R, flat graph, traverser), the time one more node joining takes (added in
place), and the time a new graph for that R takes (what any other change of R costs,
before its journal replay).
"""

from __future__ import annotations

import argparse
import json
import time

from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.service.live_graph import LiveGraph


def machine(n: int) -> dict:
    return build_R([NodeResources(rank=i, hostname=f"node{i}", cores=list(range(8)), sockets=2, memory_mib=65536)
                    for i in range(n)])


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    R, grown = machine(args.nodes), machine(args.nodes + 1)
    build, grow, rebuild = [], [], []
    for _ in range(args.repeat):
        build.append(timed(lambda: LiveGraph(R)))
        graph = LiveGraph(R)
        grow.append(timed(lambda: graph.grow(grown)))  # noqa: B023 (called at once)
        rebuild.append(timed(lambda: LiveGraph(grown)))
    print(json.dumps({"nodes": args.nodes, "build_s": [round(t, 2) for t in build],
                      "grow_one_node_s": [round(t, 2) for t in grow],
                      "rebuild_s": [round(t, 2) for t in rebuild]}))


if __name__ == "__main__":
    main()
