"""How big the published resource list is, and what it costs, at N nodes (issue 30).

    .venv/bin/python bench/resource_shapes.py [--nodes 20000] [--seed 1]

Why: the lead binder writes the leader's resource list into one ConfigMap, which the API
server caps at 1 MiB of values; the list is written as groups of nodes of one shape
(scheduler/binder/resource_shapes.py), gzip'd when large. This prints, for three clusters of
`--nodes` nodes (64 cores each, entries as resource.list gives them), the size the per-node
list would take, the size written, its form, and the CPU time to write it and to read it
back (what the binder and the plugin spend):

- uniform: every node the same and free (one group);
- three types: 8, 32 or 64 cores, none, half or all allocated (a few dozen groups);
- scattered: every node with its own random cores allocated (a group per node and state:
  the worst case).
"""

from __future__ import annotations

import argparse
import json
import random
import time

from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder import resource_shapes

BUDGET = resource_shapes.MAX_OBJECT - 4096  # what the publisher gives the list


def entry(rank: int, cores: list[int]) -> dict:
    return {"rank": rank, "hostname": f"sim{rank}", "ncores": len(cores), "ngpus": 0,
            "cores": idset.encode(cores), "gpus": ""}


def listing(kind: str, nodes: int, rng: random.Random) -> dict:
    out: dict[str, list[dict]] = {"free": [], "allocated": [], "down": []}
    for rank in range(nodes):
        if kind == "uniform":
            total, taken = 64, []
        elif kind == "three types":
            total = rng.choice((8, 32, 64))
            taken = list(range(rng.choice((0, total // 2, total))))
        else:
            total = 64
            taken = sorted(rng.sample(range(total), rng.randint(0, total)))
        rest = [c for c in range(total) if c not in set(taken)]
        if taken:
            out["allocated"].append(entry(rank, taken))
        if rest:
            out["free"].append(entry(rank, rest))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for kind in ("uniform", "three types", "scattered"):
        lst = listing(kind, args.nodes, rng)
        per_node = len(json.dumps(lst, separators=(",", ":")))
        t = time.process_time()
        data, binary, ids = resource_shapes.fitting(lst, "t", "g", BUDGET)
        written = time.process_time() - t
        t = time.process_time()
        back = resource_shapes.ungroup(resource_shapes.decode(data, binary, "t", "g"))
        read = time.process_time() - t
        assert sum(map(len, back.values())) == sum(map(len, lst.values()))
        size = resource_shapes.object_size(data, binary)
        form = ("gzip" if binary["g"] else "text") + ("" if ids else ", counts only")
        print(f"{kind:>12}: per-node list {per_node:>9,} B; written {size:>9,} B ({form}); "
              f"CPU write {written * 1000:6.0f} ms, read {read * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
