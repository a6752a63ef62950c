"""score_fresh_leaves: the compiled loop against its Python reference.

The reference (``_score_fresh_leaves_py``) is what ``inline_leaves._explore_cached`` did in
line for each leaf before the loop was compiled, and what the conformance corpora check
against Fluxion's own outputs with the extension in use. Here both meet the same random
runs of children (fresh leaves, visited ones, leaves with a planner, an x_checker or
allocations, down, empty, children with children, types no request names, a node under
a node-centric policy, requests exclusive or not) and must leave the same state: the
index and counts returned, the visited set, and every Evals with its groups and edges.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import Edge, EGroup, Scoring
from fluxnode.scheduler.traversers import leaf_scores
from hypothesis import given, settings
from hypothesis import strategies as st

compiled = pytest.mark.skipif(not leaf_scores.COMPILED,
                              reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")

GRANDCHILD = [Vertex(9999, "core", "core", "core9999", 0)]

kid = st.fixed_dictionaries({
    "type": st.sampled_from(["core", "core", "core", "gpu", "node", "memory"]),
    "id": st.integers(-3, 2**40),
    "size": st.sampled_from([1, 1, 1, 0, 16, 2**63 - 1]),
    "status": st.sampled_from(["up"] * 6 + ["down", "drain"]),
    "state": st.sampled_from(["fresh"] * 8 + ["visited", "schedule", "x_checker",
                                               "allocations", "parent"]),
})


def _children(specs: list[dict]) -> tuple[Vertex, list[Vertex], set[int]]:
    u = Vertex(0, "socket", "socket", "socket0", 0)
    kids, visited = [], set()
    for n, k in enumerate(specs, start=1):
        c = Vertex(n, k["type"], k["type"], f"{k['type']}{n}", k["id"], size=k["size"])
        c.status = k["status"]
        state = k["state"]
        if state == "visited":
            visited.add(n)
        elif state == "schedule":
            c.schedule = object()
        elif state == "x_checker":
            c.x_checker = object()
        elif state == "allocations":
            c.allocations = {7: 1}
        elif state == "parent":
            c.children = GRANDCHILD
        kids.append(c)
    u.children = kids
    return u, kids, visited


def _state(dfu: Scoring, visited: set[int]) -> tuple:
    """What the loop leaves, by value (vertices by uniq_id)."""
    evals = {}
    for t, ev in dfu.types.items():
        groups = [(g.score, g.count, g.needs, g.exclusive, g.root, g.label,
                   [(e.vertex.uniq_id, e.count, e.needs, e.exclusive, e.parent.uniq_id)
                    for e in g.edges]) for g in ev.egroups]
        evals[t] = (ev.total, ev.qual, groups)
    return evals, sorted(visited)


def _run(impl, specs, start, leaf_types, exclusive, xtypes, excl, checking, allocating,
         centric, base, seeded, by_id=True):
    u, kids, visited = _children(specs)
    leaf_r = {t: Request(t, None, exclusive) for t in leaf_types}
    dfu = Scoring()
    if seeded:  # an Evals the walk filled before the run: added to, not replaced
        dfu.evals("core").total = 5
    got = impl(kids, start, u, leaf_r, visited, dfu, xtypes, excl, checking, allocating,
               centric, base, by_id)
    return got, _state(dfu, visited)


@compiled
@settings(max_examples=400, deadline=None)
@given(specs=st.lists(kid, max_size=40), start=st.integers(0, 45),
       leaf_types=st.sets(st.sampled_from(["core", "gpu", "node"]), max_size=3),
       exclusive=st.sampled_from([None, True, False]),
       xtypes=st.sets(st.sampled_from(["core", "gpu"]), max_size=2),
       flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
       base=st.integers(-2**40, 2**40), seeded=st.booleans(), by_id=st.booleans())
def test_the_compiled_loop_leaves_what_the_python_loop_leaves(specs, start, leaf_types,
                                                              exclusive, xtypes, flags,
                                                              base, seeded, by_id):
    excl, checking, allocating, centric = flags
    args = (specs, start, leaf_types, exclusive, frozenset(xtypes), excl, checking,
            allocating, centric, base, seeded, by_id)
    py = _run(leaf_scores._score_fresh_leaves_py, *args)
    c = _run(leaf_scores._c_score, *args)
    assert py == c


def test_a_run_of_fresh_cores_stops_at_the_first_that_is_not():
    """The contract with the answer written out: three fresh cores scored (base + id,
    their units, one edge each from the parent), a visited one skipped, and the run
    stops at the down core (checking), which the caller walks."""
    specs = [dict(type="core", id=i, size=1, status="up", state="fresh") for i in range(3)]
    specs.insert(1, dict(type="core", id=9, size=1, status="up", state="visited"))
    specs.append(dict(type="core", id=4, size=1, status="down", state="fresh"))
    specs.append(dict(type="core", id=5, size=1, status="up", state="fresh"))
    impls = {leaf_scores._score_fresh_leaves_py, leaf_scores.score_fresh_leaves}
    for impl in impls:
        got, (evals, visited) = _run(impl, specs, 0, {"core"}, None, frozenset(), False,
                                     True, True, False, 2, False)
        assert got == (4, 3, 1, 4)
        total, qual, groups = evals["core"]
        assert (total, qual) == (3, 3)
        assert [g[0] for g in groups] == [2, 3, 4]
        assert all(g[6] == [(g[6][0][0], 1, 1, False, 0)] for g in groups)
        assert visited == [1, 2, 3, 4]
        # not by id (the variation policy's leaves): every one scores base
        got, (evals, _visited) = _run(impl, specs, 0, {"core"}, None, frozenset(), False,
                                      True, True, False, 2, False, False)
        assert got == (4, 3, 1, 2)
        assert [g[0] for g in evals["core"][2]] == [2, 2, 2]


@compiled
def test_bad_arguments_are_refused():
    u, kids, visited = _children([])
    with pytest.raises(ValueError):
        leaf_scores._c_score(kids, -1, u, {}, visited, Scoring(), (), False, True, True,
                             False, 2, True)
    with pytest.raises(TypeError):
        leaf_scores._c_score(kids, 0, u, [], visited, Scoring(), (), False, True, True,
                             False, 2, True)
    with pytest.raises(TypeError):
        leaf_scores._c_score(kids, 0, u, {})


group = st.tuples(st.integers(-2**40, 2**40), st.sampled_from([True, False, None]),
                  st.integers(0, 3), st.integers(0, 3))


def _groups(specs: list[tuple]) -> list[EGroup]:
    out = []
    for n, (score, exclusive, count, needs) in enumerate(specs, start=1):
        v = Vertex(n, "core", "core", f"core{n}", n)
        out.append(EGroup(score, count, bool(exclusive), edges=[
            Edge(v, count, needs, exclusive, GRANDCHILD[0])]))
    return out


def _slots(impl, groups, start, n, label):
    """The slots by value, and for each whether its edge is the group's own object."""
    got = impl(groups, start, n, label)
    return [(s.score, s.count, s.needs, s.exclusive, s.root, s.label,
             [(e.vertex.uniq_id, e.count, e.needs, e.exclusive, e.parent.uniq_id)
              for e in s.edges], s.edges[0] is g.edges[0])
            for s, g in zip(got, groups[start:], strict=False)], len(got)


@compiled
@settings(max_examples=300, deadline=None)
@given(specs=st.lists(group, max_size=12), start=st.integers(0, 14), n=st.integers(0, 14),
       label=st.sampled_from(["task", "default", ""]))
def test_the_compiled_unit_slots_are_the_python_ones(specs, start, n, label):
    groups = _groups(specs)
    assert _slots(leaf_scores._unit_slots_py, groups, start, n, label) == \
        _slots(leaf_scores._c_slots, groups, start, n, label)


def test_a_unit_slot_keeps_an_edge_that_takes_all_exclusively():
    """Written out: the slot scores MATCH_MET more than its group, holds one unit, and
    keeps the group's edge when it already takes all its units exclusively; any other
    edge is replaced by one that does."""
    groups = _groups([(7, True, 1, 1), (3, False, 1, 1), (5, True, 2, 1)])
    for impl in {leaf_scores._unit_slots_py, leaf_scores.unit_slots}:
        slots, count = _slots(impl, groups, 0, 3, "task")
        assert count == 3
        assert [s[0] for s in slots] == [8, 4, 6]
        assert [s[7] for s in slots] == [True, False, False]
        assert all(s[1:6] == (1, 0, True, False, "task") for s in slots)
        assert [s[6][0][1:4] for s in slots] == [(1, 1, True), (1, 1, True), (2, 2, True)]
