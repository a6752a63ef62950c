"""The service graph built without path strings for its leaves is the graph it was (issue 32).

The oracle is a recording: `data/flat_graph_six_nodes.json` is what main at 8d2563a built
for these nodes (`flat_graph`, then `compact_paths` as the traverser runs it): every
vertex with its ids, names, rank, size, unit, path, parent and children, the walk, every
path's lookup (and four paths that are not there), the path count and the indexes. The
same graph must come out whether the nodes come at once or join in three batches out of
rank order (`add_flat_nodes`, then `renumber_in_rank_order`, as LiveGraph.grow does).
"""

from __future__ import annotations

import json
from pathlib import Path

from fluxnode.broker_conf.rv1 import NodeResources
from fluxnode.scheduler.graph.resource_graph import ResourceGraph
from fluxnode.scheduler.service.flat_graph import add_flat_nodes, flat_graph, renumber_in_rank_order
from support.unlike_nodes import UNLIKE_NODES

RECORDED = Path(__file__).parent / "data" / "flat_graph_six_nodes.json"

NODES = UNLIKE_NODES
MISSING = ["/cluster0/node7/core2", "/cluster0/node3", "/cluster0/leader/memory0/x", "/cluster0/"]


def dump(g: ResourceGraph) -> dict:
    g.compact_paths()
    paths = sorted({v.path for v in g.vertices} | set(MISSING))
    return {
        "vertices": [[v.uniq_id, v.type, v.basename, v.name, v.id, v.rank, v.size, v.unit, v.path,
                      v.parent.uniq_id if v.parent else None, [c.uniq_id for c in v.children]]
                     for v in g.vertices],
        "walk": [v.uniq_id for v in g.walk()],
        "path_count": g.path_count(),
        "lookup": {p: [v.uniq_id for v in g.lookup(p)] for p in paths},
        "by_type": {t: [v.uniq_id for v in vs] for t, vs in g.by_type.items()},
        "by_rank": {str(r): [v.uniq_id for v in vs] for r, vs in g.by_rank.items()},
        "by_name": {n: [v.uniq_id for v in vs] for n, vs in g.by_name.items()},
    }


def test_the_graph_of_all_nodes_at_once_is_the_one_recorded():
    recorded = json.loads(RECORDED.read_text())
    g = flat_graph(NODES)
    assert g.leaf_paths == len(g.vertices) - 1 - len(NODES)  # every leaf without a string
    assert dump(g) == recorded


def test_nodes_joining_out_of_order_give_the_same_graph():
    g = flat_graph([NODES[i] for i in (1, 4)])
    assert add_flat_nodes(g, [NODES[i] for i in (5, 0)])
    assert add_flat_nodes(g, [NODES[i] for i in (3, 2)])
    renumber_in_rank_order(g)
    assert dump(g) == json.loads(RECORDED.read_text())


def test_a_host_name_twice_gives_the_lookups_main_gave():
    """Two ranks of one host name share a node path: the second node's leaves cannot be
    found through it (index_leaves refuses) and get paths of their own; every lookup
    finds what main at 8d2563a found (its answers, printed by that checkout, here)."""
    twice = [NodeResources(rank=0, hostname="n1", cores=[0, 1]),
             NodeResources(rank=1, hostname="n1", cores=[0])]
    g = flat_graph(twice)
    g.compact_paths()
    assert [[v.uniq_id for v in g.lookup(p)] for p in ("/cluster0/n1", "/cluster0/n1/core0",
                                                         "/cluster0/n1/core1")] == \
        [[1, 4], [2, 5], [3]]
    assert g.path_count() == 4


def test_a_leaf_is_held_by_four_lists_and_by_name_reads_as_recorded():
    """The service graph keeps no list of vertices per name (issue 32: 9 B a vertex, 1.7
    MiB of the leader's 1,000-node graph): a leaf is held by `vertices`, `by_type`,
    `by_rank` and its parent's children, nothing else (sys.getrefcount counts its own
    argument and the comprehension's name too). `by_name`, made on demand, reads as the
    recording has it, also after nodes joined out of order and before they are
    renumbered (then in join order, as the lists were), and a removed node leaves it."""
    import sys

    g = flat_graph(NODES)
    assert {sys.getrefcount(v) for v in g.vertices if not v.children} == {4 + 2}
    assert dump(g)["by_name"] == json.loads(RECORDED.read_text())["by_name"]
    joined = flat_graph([NODES[i] for i in (1, 4)])
    assert add_flat_nodes(joined, [NODES[i] for i in (5, 0)])
    # the nodes in the order they were made (by_type's list, kept as they are added)
    order = [v.rank for v in joined.by_type["node"]]
    assert order != sorted(order)
    assert [v.rank for v in joined.by_name["core0"]] == [
        r for r in order if 0 in next(n for n in NODES if n.rank == r).cores]
    node = joined.by_type["node"][0]
    joined.remove_vertex(node)
    assert all(v.rank != node.rank for vs in joined.by_name.values() for v in vs)
    assert sum(map(len, joined.by_name.values())) == len(joined.vertices) - 1 - len(
        node.children)
