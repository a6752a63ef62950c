"""Graph building from GRUG, JGF and R."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from fluxnode.broker_conf.rv1 import RError
from fluxnode.scheduler.graph.resource_graph import FREEZE_MIN_VERTICES, GC_GEN0_THRESHOLD
from fluxnode.scheduler.readers.grug import GrugError, read_grug
from fluxnode.scheduler.readers.jgf import JgfError, read_jgf
from fluxnode.scheduler.readers.rv1 import read_rv1
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
    doc = {
        "graph": {
            "nodes": [
                {
                    "id": "0",
                    "metadata": {
                        "type": "cluster",
                        "name": "c0",
                        "id": 0,
                        "paths": {"containment": "/c0"},
                    },
                },
                {
                    "id": "1",
                    "metadata": {
                        "type": "node",
                        "name": "n0",
                        "id": 0,
                        "rank": 3,
                        "properties": {"foo": "bar"},
                        "paths": {"containment": "/c0/n0"},
                    },
                },
                {"id": "2", "metadata": {"type": "core", "paths": {"containment": "/c0/n0/core2"}}},
            ],
            "edges": [{"source": "0", "target": "1"}, {"source": "1", "target": "2"}],
        }
    }
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


def test_big_graph_is_frozen_out_of_the_gc_and_a_replaced_one_is_freed():
    """In a fresh interpreter (the GC state is process-wide): a big graph is frozen and
    the young threshold raised; when a second graph replaces it, the first one's objects
    leave the frozen set and are collected (a frozen graph with parent <-> child cycles
    would otherwise live forever). A weakly referenced object held by the old graph's root
    vertex is the outside witness: it must be dead, and the frozen set must hold one graph,
    not two."""
    script = """
import gc, json, weakref
from fluxnode.scheduler.graph.resource_graph import FREEZE_MIN_VERTICES
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import Traverser
nodes = FREEZE_MIN_VERTICES // 3 + 1  # a node and its 2 cores each
R = {"version": 1, "execution": {
    "R_lite": [{"rank": f"0-{nodes - 1}", "children": {"core": "0-1"}}],
    "nodelist": [f"n[0-{nodes - 1}]"], "starttime": 0, "expiration": 0}}
before = gc.get_freeze_count()
first = Traverser(read_rv1(R), "first")
first.match({"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
             "with": [{"type": "core", "count": 1}]}], "tasks": [], "attributes": {}})
out = {"size": len(first.g.vertices), "before": before, "frozen": gc.get_freeze_count(),
       "gen0": gc.get_threshold()[0]}
class Witness:  # rides in the old graph's root vertex, which is in parent <-> child cycles
    pass
root = first.g.vertices[0]
root.properties = {**root.properties, "witness": Witness()}
old_graph = weakref.ref(root.properties["witness"])
del first, root
second = Traverser(read_rv1(R), "first")
out["after"] = gc.get_freeze_count()
out["old_graph_alive"] = old_graph() is not None
print(json.dumps(out))
"""
    got = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    assert got["size"] >= FREEZE_MIN_VERTICES and got["frozen"] - got["before"] >= got["size"], got
    assert got["gen0"] == GC_GEN0_THRESHOLD
    assert not got["old_graph_alive"], "the replaced graph is still alive"
    # The frozen set holds what was alive at each freeze: first everything + graph 1, then
    # everything + graph 2. Had graph 1 stayed frozen, it would have grown by a graph
    # (>= one object per vertex); it may differ by a few objects of the process's own.
    assert got["after"] >= got["size"], got
    assert got["after"] - got["frozen"] < got["size"] // 2, got


def test_a_big_match_freezes_its_job_state_and_cancel_leaves_nothing_behind():
    """A gang's planner state is frozen out of the cyclic GC right after the match (no
    young collection rescans it), and since that state holds no reference cycles,
    match + cancel cycles do not grow what stays alive (fresh interpreter)."""
    script = """
import gc, json
from fluxnode.scheduler.graph.resource_graph import FREEZE_MIN_VERTICES
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import Traverser
nodes = FREEZE_MIN_VERTICES // 3 + 1
R = {"version": 1, "execution": {
    "R_lite": [{"rank": f"0-{nodes - 1}", "children": {"core": "0-1"}}],
    "nodelist": [f"n[0-{nodes - 1}]"], "starttime": 0, "expiration": 0}}
gang = {"version": 1, "resources": [{"type": "node", "count": nodes, "with": [
    {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 2}]}]}],
    "attributes": {"system": {"duration": 60}},
    "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}]}
t = Traverser(read_rv1(R), "first")
def alive():
    gc.collect()
    return gc.get_freeze_count() + len(gc.get_objects())
sizes, young = [], []
for _ in range(4):
    r = t.match(gang)
    young.append(gc.get_count()[0])
    t.cancel(r.jobid)
    sizes.append(alive())
print(json.dumps({"sizes": sizes, "young": young}))
"""
    got = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    # frozen right after the match: the young generation did not fill up with job state
    assert all(n < GC_GEN0_THRESHOLD for n in got["young"]), got
    # the first cycles may build lasting caches (child orders); after that, nothing grows
    assert got["sizes"][2] == got["sizes"][3], got


def test_small_matches_leave_their_kept_state_to_a_freeze_not_to_collections():
    """A stream of single-core matches in fast mode keeps objects of each match (the
    changed node's outcome in the root index, its jobs' planner spans). Each match runs
    with the cyclic GC paused, and once the young generation holds GC_GEN0_THRESHOLD
    objects a match freezes them: no collection runs during the stream (gc.callbacks,
    the interpreter's own record, is the witness). Before, young collections ran during
    the walks and rescanned what the matches kept."""
    script = """
import gc, json
from fluxnode.scheduler.graph.resource_graph import FREEZE_MIN_VERTICES
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
nodes = FREEZE_MIN_VERTICES // 33 + 1  # a node and its 32 cores each
R = {"version": 1, "execution": {
    "R_lite": [{"rank": f"0-{nodes - 1}", "children": {"core": "0-31"}}],
    "nodelist": [f"n[0-{nodes - 1}]"], "starttime": 0, "expiration": 0}}
one = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
       "with": [{"type": "core", "count": 1}]}], "tasks": [], "attributes": {}}
t = FastTraverser(read_rv1(R), Policy.parse("low", stable_ties=True))
t.match(one)
runs = []
gc.callbacks.append(lambda phase, info: runs.append(info["generation"]) if phase == "start"
                    else None)
frozen0 = gc.get_freeze_count()
for _ in range(15000):  # until a young generation's worth was kept (~5,000 matches)
    t.match(one)
    if gc.get_freeze_count() - frozen0 >= gc.get_threshold()[0]:
        break
print(json.dumps({"runs": runs, "frozen": gc.get_freeze_count() - frozen0,
                  "threshold": gc.get_threshold()[0]}))
"""
    got = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    # the stream kept more than a young generation's worth: without the pause, collections
    assert got["frozen"] >= got["threshold"], got
    assert got["runs"] == [], got


@pytest.mark.parametrize("stable_ties", [True, False], ids=["fast", "exact"])
def test_matches_make_no_reference_cycles(stable_ties):
    """What a match leaves behind may be frozen out of the cyclic GC unscanned (see
    Traverser.match), so the walks must make no reference cycles: cyclic garbage frozen
    is never freed. Under every policy, a stream of allocations, reservations, failed
    and unsatisfiable matches and cancels, run with the GC disabled, leaves nothing for
    gc.collect() to find."""
    script = """
import gc, json, sys
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import NoMatch
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
R = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-11", "children": {"core": "0-7", "gpu": "0-1"}}],
    "nodelist": ["n[0-11]"], "starttime": 0, "expiration": 0}}
def js(resources):
    return {"version": 1, "resources": resources, "tasks": [],
            "attributes": {"system": {"duration": 60}}}
core = js([{"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 1}]}])
node = js([{"type": "node", "count": 1, "exclusive": True, "with": [
    {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 8}]}]}])
gang = js([{"type": "node", "count": 4, "with": [
    {"type": "slot", "count": 1, "label": "t", "with": [
        {"type": "core", "count": 2}, {"type": "gpu", "count": 1}]}]}])
never = js([{"type": "node", "count": 13, "with": [
    {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 1}]}]}])
out = {}
for policy in sys.argv[2:]:
    t = FastTraverser(read_rv1(R), Policy.parse(policy, stable_ties=sys.argv[1] == "1"))
    gc.collect()
    gc.disable()
    jobs, failed = [], 0
    for i in range(90):
        spec, op = [(core, "allocate"), (node, "allocate_orelse_reserve"),
                    (gang, "allocate"), (never, "allocate_with_satisfiability")][i % 4]
        try:
            jobs.append(t.match(spec, op=op).jobid)
        except NoMatch:
            failed += 1
        if i % 5 == 4 and jobs:
            t.cancel(jobs.pop(0))
    out[policy] = [gc.collect(), failed, len(jobs)]
    gc.enable()
    del t
print(json.dumps(out))
"""
    policies = ["first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex",
                "locality", "variation"]
    got = json.loads(subprocess.run(
        [sys.executable, "-c", script, "1" if stable_ties else "0", *policies],
        capture_output=True, text=True, check=True, timeout=300).stdout)
    for policy in policies:
        garbage, failed, held = got[policy]
        assert failed >= 22 and held > 0, (policy, got[policy])  # every path was taken
        assert garbage == 0, (policy, got[policy])


def test_leaves_holding_one_jobs_containers_change_alone():
    """Fresh leaves a job takes whole share its LeafHold (tags, span ids, allocations):
    a second job's hold on one of them, and the first job's release of one, change that
    leaf alone and never the containers the others still hold."""
    from fluxnode.scheduler.graph.resource_graph import LeafHold, Vertex

    cores = [Vertex(i, "core", "core", f"core{i}", i) for i in range(3)]
    held = LeafHold(7, allocated=True)
    for v in cores:
        v.hold_whole(held)
    a, b, c = cores
    a.hold(8, 2)  # job 8 reserves core0 later: its x_checker span 2, its schedule span 3
    a.hold_units(8, 3, allocated=False)
    assert (a.tags, dict(a.xspans), dict(a.spans)) == ({7, 8}, {7: 1, 8: 2}, {7: 1, 8: 3})
    assert (set(a.allocations), set(a.reservations)) == ({7}, {8})
    assert a.drop_hold(7) == 1 and a.drop_units(7) == 1
    assert (a.tags, dict(a.spans), set(a.allocations)) == ({8}, {8: 3}, set())
    assert b.drop_hold(7) == 1 and b.drop_units(7) == 1
    assert (set(b.tags), dict(b.xspans), dict(b.spans), set(b.allocations)) == (set(), {}, {},
                                                                                  set())
    assert b.drop_hold(7) is None and b.drop_units(7) is None
    for v in (c,):  # untouched: still job 7's, as it was given
        assert (set(v.tags), dict(v.xspans), dict(v.spans), set(v.allocations)) == (
            {7}, {7: 1}, {7: 1}, {7})
    assert set(c.reservations) == set()
    assert (set(held.tags), dict(held.spans)) == ({7}, {7: 1})



def test_vertices_of_one_name_share_one_string():
    # every node of R has its own core0..core3: 8 cores with 4 names, and the graph keeps
    # one string per name, not one per vertex (the rv1 reader makes each name anew)
    R = {"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}],
                                     "nodelist": ["n[0-1]"], "starttime": 0, "expiration": 0}}
    cores = read_rv1(R).by_type["core"]
    assert sorted(c.name for c in cores) == ["core0", "core0", "core1", "core1", "core2",
                                             "core2", "core3", "core3"]
    assert len({id(c.name) for c in cores}) == 4
