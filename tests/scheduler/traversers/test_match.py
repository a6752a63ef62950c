"""Jobspec-driven matching: policies, reservations, cancel, status, constraints."""

from __future__ import annotations

import pytest
from fluxnode.scheduler import writers
from fluxnode.scheduler.policies.policy import PolicyError
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser, TraverserError, Unsatisfiable
from fluxnode.scheduler.traversers.flexible import FlexibleTraverser
from support import seeds
from support.sched_graphs import R_TWO_NODES, cores, jobspec


def picked(res, type_="core"):
    return [(e.vertex.parent.parent.name if type_ == "core" else "", e.vertex.name)
            for e in res.selection if e.vertex.type == type_]


@pytest.mark.parametrize(("policy", "node", "core"), [
    ("high", None, "core7"), ("low", None, "core0"), ("first", "node1", "core7"),
    ("lonode", "node0", "core0"), ("hinode", "node1", "core7")])
def test_policies_pick_their_end(tiny_grug, policy, node, core):
    t = Traverser(read_grug(tiny_grug), policy)
    res = t.match(cores(1))
    [(got_node, got_core)] = picked(res)
    assert got_core == core
    assert node is None or got_node == node
    assert res.status == "ALLOCATED" and res.at == 0


def test_allocate_until_full_then_busy(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "low")
    for _ in range(16):
        t.match(cores(1))
    with pytest.raises(NoMatch) as exc:
        t.match(cores(1))
    assert exc.value.busy


def test_unsatisfiable_request(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "low")
    with pytest.raises(Unsatisfiable):
        t.match(cores(99), op="allocate_with_satisfiability")
    with pytest.raises(Unsatisfiable):
        t.match(cores(99), op="satisfiability")
    # slots form where the cores are: one socket has 4 of them
    assert t.match(cores(4), op="satisfiability").status == "SATISFIABLE"
    with pytest.raises(Unsatisfiable):
        t.match(cores(5), op="satisfiability")


def test_reserve_then_backfill_and_cancel(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "low")
    whole = jobspec([{"type": "node", "count": 2, "exclusive": True,
                      "with": [{"type": "slot", "count": 2, "label": "default",
                                "with": [{"type": "core", "count": 4}]}]}], duration=100)
    a = t.match(whole)
    r = t.match(whole, op="allocate_orelse_reserve")
    assert (a.status, r.status, r.at) == ("ALLOCATED", "RESERVED", 100)
    t.cancel(a.jobid)
    long_job = t.match(cores(1), op="allocate_orelse_reserve")
    assert (long_job.status, long_job.at) == ("RESERVED", 200)  # would overlap the reservation
    short = cores(1) | {"attributes": {"system": {"duration": 50}}}
    b = t.match(short, op="allocate_orelse_reserve")
    assert b.status == "ALLOCATED"  # backfilled before the reservation starts
    with pytest.raises(TraverserError):
        t.cancel(a.jobid)


def test_node_exclusive_policy_takes_whole_node(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "lonodex")
    res = t.match(cores(1))
    node = [e for e in res.selection if e.vertex.type == "node"][0]
    assert node.exclusive
    assert len([e for e in res.selection if e.vertex.type == "core"]) == 8


def test_down_vertices_never_allocated_and_allocations_kept(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "low")
    kept = t.match(cores(1))
    t.set_status("/tiny0/rack0/node1", "down")
    free_on_node0 = sum(1 for c in t.g.by_type["core"]
                        if c.parent.parent.name == "node0" and not c.allocations)
    for _ in range(free_on_node0):
        res = t.match(cores(1))
        assert [n.name for n in res.nodes] == ["node0"]
    with pytest.raises(NoMatch):
        t.match(cores(1))
    assert kept.jobid in t.jobs
    t.set_status("/tiny0/rack0/node1", "up")
    assert t.match(cores(1)).selection


def test_partial_cancel_by_rank():
    t = Traverser(read_rv1(R_TWO_NODES), "low")
    res = t.match(cores(4, nodes=2))
    assert {n.name for n in res.nodes} == {"n0", "n1"}
    assert t.partial_cancel(res.jobid, [1]) is False
    again = t.match(cores(4, nodes=1))
    assert [n.name for n in again.nodes] == ["n1"]
    assert t.partial_cancel(res.jobid, [0]) is True
    assert res.jobid not in t.jobs


def test_constraints_properties_hostlist_ranks():
    g = read_rv1(R_TWO_NODES)
    g.lookup("/cluster0/n1")[0].set_property("fast", "")
    t = Traverser(g, "low")
    on_fast = t.match(cores(1, nodes=1) | {"attributes": {"system": {
        "duration": 60, "constraints": {"properties": ["fast"]}}}})
    assert [n.name for n in on_fast.nodes] == ["n1"]
    not_fast = t.match(cores(1, nodes=1) | {"attributes": {"system": {
        "duration": 60, "constraints": {"not": [{"properties": ["fast"]}]}}}})
    assert [n.name for n in not_fast.nodes] == ["n0"]
    by_rank = t.match(cores(1, nodes=1) | {"attributes": {"system": {
        "duration": 60, "constraints": {"or": [{"ranks": ["1"]}, {"hostlist": ["n9"]}]}}}})
    assert [n.name for n in by_rank.nodes] == ["n1"]
    with pytest.raises(NoMatch):
        t.match(cores(1, nodes=1) | {"attributes": {"system": {
            "duration": 60, "constraints": {"hostlist": ["n7"]}}}})


def test_graph_growth_keeps_allocations():
    t = Traverser(read_rv1(R_TWO_NODES), "low")
    held = t.match(cores(4, nodes=2))
    with pytest.raises(NoMatch):
        t.match(cores(1, nodes=1))
    t.add_resources({"version": 1, "execution": {
        "R_lite": [{"rank": "2", "children": {"core": "0-3"}}], "nodelist": ["n2"]}})
    grown = t.match(cores(2, nodes=1))
    assert [n.name for n in grown.nodes] == ["n2"]
    assert held.jobid in t.jobs


def test_writers_rv1_nosched_and_simple():
    t = Traverser(read_rv1(R_TWO_NODES), "low")
    res = t.match(jobspec([{"type": "node", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "default",
         "with": [{"type": "core", "count": 2}, {"type": "gpu", "count": 1}]}]}], duration=60))
    R = writers.rv1_nosched(res)
    assert R["execution"]["R_lite"] == [{"rank": "0", "children": {"core": "0-1", "gpu": "0"}}]
    assert R["execution"]["nodelist"] == ["n0"]
    assert R["execution"]["expiration"] == 60 and "scheduling" not in R
    assert "scheduling" in writers.rv1(res)
    assert writers.simple(res).splitlines()[-1] == "      ---cluster0[1:s]"
    assert writers.pretty_simple(res).splitlines()[0] == "      ---cluster0[1:shared]"


def test_bad_policy_and_jobspec(tiny_grug):
    with pytest.raises(PolicyError):
        Traverser(read_grug(tiny_grug), "sideways")
    t = Traverser(read_grug(tiny_grug), "low")
    with pytest.raises(ValueError, match="resources"):
        t.match({"version": 1, "resources": [], "tasks": [], "attributes": {}})


def test_find_allocated_and_down(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "low")
    t.match(cores(1))
    names = [e.vertex.name for e in t.find("sched-now=allocated")]
    assert names[0] == "core0" and names[-1] == "tiny0"
    t.set_status("/tiny0/rack0/node1", "down")
    down = {e.vertex.name for e in t.find("status=down")}
    assert "node1" in down and "core4" in down and "node0" not in down


def _node_of(res) -> str:
    return next(e.vertex.name for e in res.selection if e.vertex.type == "node")


def _one_core(exclusive_node: bool = False) -> dict:
    node = {"type": "node", "count": 1, "with": [{"type": "socket", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 1}]}]}]}
    if exclusive_node:
        node["exclusive"] = True
    return jobspec([node])


def test_first_explores_untouched_nodes_before_used_ones(tiny_grug):
    """Fluxion's first-match order: an edge no job went through weighs UINT64_MAX, so
    every untouched node comes before one a job used, whatever is free on it; the
    used node's weight is its free units of the last filter type (here node: a
    shared node stays at one free node); cancels leave weights as they are."""
    t = Traverser(read_grug(tiny_grug), "first")
    a = t.match(_one_core())
    assert _node_of(a) == "node1"           # highest uniq_id among untouched
    b = t.match(_one_core())
    assert _node_of(b) == "node0"           # untouched beats node1's 7 free cores
    t.cancel(a.jobid)
    t.cancel(b.jobid)
    # both weigh 1 free node now (cancel did not reorder): tie broken by uniq_id
    assert _node_of(t.match(_one_core())) == "node1"


def test_first_skips_a_node_held_exclusively(tiny_grug):
    t = Traverser(read_grug(tiny_grug), "first")
    whole = t.match(_one_core(exclusive_node=True))
    assert _node_of(whole) == "node1"
    # node1 weighs 0 free nodes, node0 is untouched: the next shared job goes to node0
    assert _node_of(t.match(_one_core())) == "node0"
    assert t._weights[whole.nodes[0].uniq_id] == 0


def test_xor_slots_take_exactly_one_alternative_the_first_that_fits(tiny_grug):
    """Under -T flexible, sibling xor_slots are alternatives: a socket (4 cores, 1 GPU)
    takes the GPU shape while GPUs last, then the cores-only shape; never both."""
    def xor(label, *with_):
        return {"type": "xor_slot", "count": 1, "label": label, "with": list(with_)}

    js = jobspec([{"type": "socket", "count": 1, "with": [
        xor("gpu", {"type": "core", "count": 2}, {"type": "gpu", "count": 1}),
        xor("cpu", {"type": "core", "count": 2})]}])
    t = FlexibleTraverser(read_grug(tiny_grug), "first")
    shapes = []
    for _ in range(8):
        res = t.match(js)
        kinds = sorted(e.vertex.type for e in res.selection if e.vertex.type in ("core", "gpu"))
        shapes.append(tuple(kinds))
    assert shapes[:4] == [("core", "core", "gpu")] * 4      # one GPU shape per socket
    assert shapes[4:] == [("core", "core")] * 4             # then the other alternative
    with pytest.raises(NoMatch) as exc:
        t.match(js)
    assert exc.value.busy


def test_find_jobid_span_means_the_jobs_subtree_filter_spans(tiny_grug):
    """As Fluxion's job2span: vertices whose subtree filter holds a span of the job
    (vertices with children), not the leaves' own schedule spans."""
    t = Traverser(read_grug(tiny_grug), "first")
    res = t.match(cores(1))
    spans = {e.vertex.type for e in t.find(f"jobid-span={res.jobid}")}
    tags = {e.vertex.type for e in t.find(f"jobid-tag={res.jobid}")}
    assert "core" in tags and "core" not in spans
    assert {"socket", "node", "rack"} <= spans


def test_xor_slots_that_can_never_fit_are_unsatisfiable_not_busy(tiny_grug):
    never = jobspec([{"type": "socket", "count": 1, "with": [
        {"type": "xor_slot", "count": 1, "label": "a", "with": [{"type": "core", "count": 9}]},
        {"type": "xor_slot", "count": 1, "label": "b", "with": [{"type": "gpu", "count": 3}]}]}])
    t = FlexibleTraverser(read_grug(tiny_grug), "first")
    for op in ("allocate_with_satisfiability", "allocate_orelse_reserve"):
        with pytest.raises(Unsatisfiable):
            t.match(never, op=op)
    with pytest.raises(NoMatch) as exc:  # a plain allocate gives no verdict, like the base
        t.match(never)
    assert exc.value.busy


@pytest.mark.parametrize("graph", ["rv1", "sockets"])
@pytest.mark.parametrize("policy", ["lonodex", "hinodex", "firstnodex", "low", "first"])
def test_leaves_sharing_planners_are_never_given_twice(policy, graph, tiny_grug):
    """A job that takes a node whole gives the node's fresh leaves planners they share
    (Planner.share), and the sockets of it the job's x_checker; a later reservation on
    one of them copies it first, a cancel drops it. Against a ledger kept from the
    matches' selections alone (each exclusive leaf's time windows), a random stream of
    allocations, reservations and cancels never gives a leaf to two jobs at once, and
    once every job is cancelled the whole machine is taken at once again. Graphs: nodes
    of cores and GPUs (rv1), and nodes of 2 sockets of 4 cores, a GPU and memory."""
    import random

    from fluxnode.scheduler.policies.policy import Policy
    from fluxnode.scheduler.traversers.dfu_fast import FastTraverser

    seed = seeds.choose("test_leaves_sharing_planners_are_never_given_twice")
    rng = random.Random(seed)
    if graph == "rv1":
        nodes = 4
        R = {"version": 1, "execution": {
            "R_lite": [{"rank": f"0-{nodes - 1}", "children": {"core": "0-7", "gpu": "0-1"}}],
            "nodelist": [f"n[0-{nodes - 1}]"], "starttime": 0, "expiration": 0}}
        g = read_rv1(R)
    else:
        nodes, g = 2, read_grug(tiny_grug)
    t = FastTraverser(g, Policy.parse(policy, stable_ties=rng.random() < 0.5))

    def whole(n, duration):
        per_node = [{"type": "core", "count": 8}, {"type": "gpu", "count": 2}]
        if graph == "sockets":  # Fluxion finds no cores of a socket from a slot above it
            per_node = [{"type": "socket", "count": 2, "with": [
                {"type": "core", "count": 4}, {"type": "gpu", "count": 1}]}]
        return jobspec([{"type": "node", "count": n, "exclusive": True, "with": [
            {"type": "slot", "count": 1, "label": "default", "with": per_node}]}], duration)

    ledger: dict[int, list[tuple[int, int, int]]] = {}  # leaf -> (start, end, job)
    live: list[int] = []
    for jobid in range(1, 121):
        if live and rng.random() < 0.3:
            gone = live.pop(rng.randrange(len(live)))
            t.cancel(gone)
            for windows in ledger.values():
                windows[:] = [w for w in windows if w[2] != gone]
        duration = rng.choice([10, 60, 3600])
        spec = rng.choice([cores(rng.randint(1, 3)), whole(1, duration), whole(2, duration)])
        spec = {**spec, "attributes": {"system": {"duration": duration}}}
        try:
            res = t.match(spec, op="allocate_orelse_reserve", jobid=jobid)
        except NoMatch:
            continue
        live.append(jobid)
        start, end = res.at, res.at + res.duration
        for e in res.selection:
            if e.exclusive and not e.vertex.children:
                windows = ledger.setdefault(e.vertex.uniq_id, [])
                clash = [w for w in windows if w[0] < end and start < w[1]]
                assert not clash, (seed, jobid, e.vertex.path, clash)
                windows.append((start, end, jobid))
    for jobid in live:
        t.cancel(jobid)
    res = t.match(whole(nodes, 60), jobid=1000)
    assert res.status == "ALLOCATED" and res.at == 0, seed
    assert sum(1 for e in res.selection if e.vertex.type == "core") == nodes * 8


@pytest.mark.parametrize("gang", [3, 30])
def test_first_match_child_order_after_an_update_is_the_order_sorted_afresh(gang):
    """The first-match policies keep each parent's children sorted by edge weight and
    move the ones an update re-weighs: a few by bisection, many (a gang's nodes under the
    cluster) in one pass and one sort. Either way the kept order must be the one a fresh
    sort of the current weights gives (Fluxion's by_outedges: heaviest first, then the
    higher uniq_id), after allocations, a cancel and more allocations."""
    from fluxnode.scheduler.traversers.dfu_fast import FastTraverser

    # nodes of 4 and of 2 cores: a gang leaves them weighed 3 and 1, interleaved by id
    R = {"version": 1, "execution": {
        "R_lite": [{"rank": "0-19", "children": {"core": "0-3"}},
                   {"rank": "20-39", "children": {"core": "0-1"}}],
        "nodelist": ["n[0-39]"], "starttime": 0, "expiration": 0}}
    t = FastTraverser(read_rv1(R), "first")
    root = t.g.root
    nodes = jobspec([{"type": "node", "count": gang, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 1}]}]}])

    def fresh_order():
        return sorted((-t.edge_weight_of(root, c), -c.uniq_id, i)
                      for i, c in enumerate(root.children))

    t.match(cores(1), jobid=1)  # builds the cluster's order, and moves one node
    assert t._order[root.uniq_id] == fresh_order()
    for jobid in (2, 3):
        t.match(nodes, jobid=jobid)
        assert t._order[root.uniq_id] == fresh_order(), jobid
    t.cancel(2)
    t.match(nodes, jobid=4)
    assert t._order[root.uniq_id] == fresh_order()
    weights = {-w for w, _u, _i in t._order[root.uniq_id]}
    assert len(weights) > 1  # the matches did re-weigh edges
