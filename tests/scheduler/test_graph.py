"""Graph building from GRUG, JGF and R."""

from __future__ import annotations

import copy

import pytest
from fluxnode.scheduler.grug_reader import GrugError, read_grug
from fluxnode.scheduler.jgf_reader import JgfError, read_jgf
from fluxnode.scheduler.rv1_reader import RError, read_rv1
from support.sched_graphs import R_TWO_NODES


def test_grug_names_ids_and_scope(tiny_grug):
    g = read_grug(tiny_grug)
    assert g.root.name == "tiny0"
    assert [n.name for n in g.by_type["node"]] == ["node0", "node1"]
    # id_scope=1: core ids are unique per node, not per socket
    node1 = g.lookup("/tiny0/rack0/node1")[0]
    s1 = node1.children[1]
    assert [c.name for c in s1.children if c.type == "core"] == ["core4", "core5", "core6", "core7"]
    assert g.lookup("/tiny0/rack0/node1/socket1/memory3")[0].size == 2
    assert len(g.by_type["core"]) == 16
    # creation order: all nodes before any socket (Fluxion's uniq_id order)
    assert g.by_type["node"][1].uniq_id < g.by_type["socket"][0].uniq_id


def test_grug_networkx_view(tiny_grug):
    nxg = read_grug(tiny_grug).to_networkx()
    assert nxg.number_of_nodes() == 1 + 1 + 2 + 4 + 16 + 4 + 8
    assert nxg.number_of_edges() == nxg.number_of_nodes() - 1


def test_grug_bad_file(tmp_path):
    p = tmp_path / "bad.graphml"
    p.write_text("<graphml")
    with pytest.raises(GrugError):
        read_grug(p)


def test_jgf_roundtrip_and_errors():
    doc = {"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "cluster", "name": "c0", "id": 0, "paths": {"containment": "/c0"}}},
        {"id": "1", "metadata": {"type": "node", "name": "n0", "id": 0, "rank": 3,
                                 "properties": {"foo": "bar"}, "paths": {"containment": "/c0/n0"}}},
        {"id": "2", "metadata": {"type": "core", "paths": {"containment": "/c0/n0/core2"}}}],
        "edges": [{"source": "0", "target": "1"}, {"source": "1", "target": "2"}]}}
    g = read_jgf(doc)
    n0 = g.lookup("/c0/n0")[0]
    assert n0.rank == 3 and n0.properties == {"foo": "bar"}
    assert n0.children[0].name == "core2"  # no "id": numbered by the JGF node id
    bad = copy.deepcopy(doc)
    del bad["graph"]["nodes"][1]["metadata"]["type"]
    with pytest.raises(JgfError, match=r"graph.nodes\[1\].metadata: key 'type' missing"):
        read_jgf(bad)


def test_rv1_from_rlite():
    g = read_rv1(R_TWO_NODES)
    assert [n.name for n in g.by_type["node"]] == ["n0", "n1"]
    assert [n.rank for n in g.by_type["node"]] == [0, 1]
    assert len(g.by_type["core"]) == 8 and len(g.by_type["gpu"]) == 2
    with pytest.raises(RError):
        read_rv1({"version": 1})


def test_big_graph_is_frozen_out_of_the_gc_and_a_replaced_one_is_still_freed():
    import gc

    from fluxnode.scheduler.graph import FREEZE_MIN_VERTICES, GC_GEN0_THRESHOLD
    from fluxnode.scheduler.traverser import Traverser

    nodes = FREEZE_MIN_VERTICES // 3 + 1  # a node and its 2 cores each
    R = {"version": 1, "execution": {"R_lite": [{"rank": f"0-{nodes - 1}", "children": {"core": "0-1"}}],
                                     "nodelist": [f"n[0-{nodes - 1}]"], "starttime": 0, "expiration": 0}}
    threshold = gc.get_threshold()
    try:
        first = Traverser(read_rv1(R), "first")
        assert len(first.g.vertices) >= FREEZE_MIN_VERTICES
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] >= GC_GEN0_THRESHOLD
        frozen = gc.get_freeze_count()
        first.match({"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
                     "with": [{"type": "core", "count": 1}]}], "tasks": [], "attributes": {}})
        del first
        Traverser(read_rv1(R), "first")  # the new graph's freeze frees the old one
        assert gc.get_freeze_count() < frozen * 1.5  # not both graphs
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
