"""`LiveGraph.hold` (a journal replay, `sched.adopt`) finds a node's cores, GPUs and memory
granules without keeping an index per rank (issue 32: the index was 19.4 MiB once
something was held on each of 1,000 nodes of 197 vertices, about 20 KB a node).

The oracles: the shares held are the ones asked for (memory as the lowest whole granules),
a core held once is busy the second time, a core or GPU the node does not have is named
(refused, or pending with `missing_ok`), and a node whose ids are not in order gives the
same vertices as a search by type and id would."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.service.allocation import NodeShare
from fluxnode.scheduler.service.errors import Busy, Unsatisfiable
from fluxnode.scheduler.service.live_graph import LiveGraph

GRANULE = 2048  # MiB: 256 GiB in 128 granules (flat_graph.memory_granule_mib)


def machine(n: int, cores=tuple(range(64)), gpus=tuple(range(4))) -> LiveGraph:
    return LiveGraph(build_R([NodeResources(rank=r, hostname=f"node{r}", cores=list(cores),
                                            gpus=list(gpus), sockets=2, memory_mib=262144)
                              for r in range(n)]))


def test_holding_on_every_node_keeps_no_index():
    g = machine(30)
    g.hold(1, [NodeShare(0, "node0", (0,), (), 0)])  # the first hold's one-time costs
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for r in range(1, 30):
            g.hold(r + 1, [NodeShare(r, f"node{r}", (1, 2), (0,), GRANULE)])
        gc.collect()
        per_node = (tracemalloc.get_traced_memory()[0] - before) / 29
    finally:
        tracemalloc.stop()
    # what the traverser keeps for the hold itself is about 6 KB (planner spans of the
    # node and its 4 leaves); the index added about 20 KB more
    assert per_node < 12_000, f"{per_node:.0f} B kept per node held"


def test_hold_takes_exactly_what_it_names():
    g = machine(3)
    held = g.hold(1, [NodeShare(1, "node1", (7, 3), (2,), GRANULE + 1)]).held
    assert held == [NodeShare(1, "node1", (3, 7), (2,), 2 * GRANULE)]
    with pytest.raises(Busy, match="core 7|7"):
        g.hold(2, [NodeShare(1, "node1", (7,), (), 0)])
    # the lowest free granules: the next hold of memory takes the third and fourth
    again = g.hold(3, [NodeShare(1, "node1", (), (), 2 * GRANULE)]).held
    assert again == [NodeShare(1, "node1", (), (), 2 * GRANULE)]
    with pytest.raises(Unsatisfiable, match="no core 64"):
        g.hold(4, [NodeShare(2, "node2", (64,), (), 0)])
    with pytest.raises(Unsatisfiable, match="no gpu 4"):
        g.hold(4, [NodeShare(2, "node2", (), (4,), 0)])
    partly = g.hold(5, [NodeShare(2, "node2", (1, 64), (4, 0), 0)], missing_ok=True)
    assert partly.held == [NodeShare(2, "node2", (1,), (0,), 0)]
    assert partly.pending == [NodeShare(2, "node2", (64,), (4,), 0)]


def test_a_node_whose_ids_are_out_of_order():
    g = machine(2, cores=(5, 1, 9, 0), gpus=(3, 1))
    held = g.hold(1, [NodeShare(1, "node1", (0, 9, 1), (1,), 0)]).held
    assert held == [NodeShare(1, "node1", (0, 1, 9), (1,), 0)]
    node = next(v for v in g._graph.by_rank[1] if v.type == "node")
    taken = {(v.type, v.id) for v in node.children if v.allocations}
    assert taken == {("core", 0), ("core", 9), ("core", 1), ("gpu", 1)}
