"""The service's graph places the same whatever order brokers joined in: a graph grown by
joins out of rank order (LiveGraph.grow) answers every request exactly as a graph built
from the whole R at once (the oracle). Seeded; the seed is printed."""

from __future__ import annotations

import random

import pytest
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind
from fluxnode.scheduler.service.errors import Busy, Unsatisfiable
from fluxnode.scheduler.service.live_graph import LiveGraph
from fluxnode.scheduler.service.request import AllocRequest
from support import seeds

NODES = [NodeResources(rank=i, hostname=f"vm{i}", cores=list(range(2 + i % 3)),
                       memory_mib=1024) for i in range(8)]


def grown(order: list[list[int]]) -> LiveGraph:
    joined: list[NodeResources] = []
    g = None
    for batch in order:
        joined += [NODES[r] for r in batch]
        R = build_R(sorted(joined, key=lambda n: n.rank))
        if g is None:
            g = LiveGraph(R)
        else:
            assert g.grow(R) == sorted(batch)
    return g


def answers(g: LiveGraph, policy: str, stream: list) -> list:
    out = []
    for jobid, (cores, count) in enumerate(stream, 1):
        ask = AllocRequest(kinds=(SlotKind(cores, 0, 0, count),), policy=policy)
        try:
            p = g.allocate(jobid, ask)
            out.append(sorted((n.rank, n.cores) for n in p.nodes))
        except (Busy, Unsatisfiable) as exc:
            out.append(type(exc).__name__)
    return out


@pytest.mark.parametrize("policy", ["first", "low", "high", "lonode", "hinode"])
def test_placements_do_not_depend_on_join_order(policy):
    seed = seeds.choose("test_placements_do_not_depend_on_join_order")
    rng = random.Random(seed)
    ranks = list(range(8))
    rng.shuffle(ranks)
    cut = sorted(rng.sample(range(1, 8), 3))
    order = [ranks[a:b] for a, b in zip([0, *cut], [*cut, 8], strict=True)]
    stream = [(rng.randint(1, 2), rng.randint(1, 3)) for _ in range(12)]
    whole = LiveGraph(build_R(NODES))
    assert answers(grown(order), policy, stream) == answers(whole, policy, stream), order


def test_the_docs_example_out_of_order():
    """docs/index.md's `alloc --slots 3 --cores-per-slot 1` on 4 two-core nodes, with rank 1
    joining last: the same placement as with all four at once."""
    nodes = [NodeResources(rank=i, hostname=f"vm{i}", cores=[0, 1]) for i in range(4)]
    ask = AllocRequest(kinds=(SlotKind(1, 0, 0, 3),))
    whole = LiveGraph(build_R(nodes)).allocate(1, ask).nodes
    g = LiveGraph(build_R([nodes[0], nodes[2], nodes[3]]))
    assert g.grow(build_R(nodes)) == [1]
    assert g.allocate(1, ask).nodes == whole
