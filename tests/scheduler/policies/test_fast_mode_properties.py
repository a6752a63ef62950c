"""Property test of the exhaustive policies' fast mode (issue 14): on random graphs and
random streams of allocations and cancels, every fast placement

- is valid: no exclusively held unit is given to two live jobs, and it holds as many
  units of each requested type as exact mode's placement of the same request;
- scores the same as exact mode's (Fluxion's tie order) at every level: per requested
  type, the same total of Fluxion's vertex scores (id + 1, plus the node-centric factor
  of the node above it), as Fluxion's dfu_match_policy defines them;
- is the plain walk's with the same tie rule: the index it keeps across matches and the
  templates of untouched sockets (traversers/root_index.py, shape_templates.py) change
  nothing but the speed.

``locality`` chooses at the root by runs of consecutive scores; its fast tie rule within
a run (higher score first) is ``high``'s order, so fast ``locality`` is held to exact
``high``'s scores here, and test_locality.py checks, with its own runs, that choosing
by score takes as many units from each run as Fluxion's choice by run.

Streams interleave allocations, cancels and vertices going down and up.

Exact mode is kept in the fast traverser's state by replaying each fast placement into it
(Fluxion's ``update``), so both answer every request from the same state. Derandomized
(support.fuzz.PROFILE): hypothesis prints the falsifying graph and stream.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu import MatchResult, NoMatch, Traverser, Unsatisfiable
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fuzz import EXAMPLES, PROFILE
from support.sched_graphs import grug_document, grug_vertices

EXHAUSTIVE = ["low", "high", "lonode", "hinode", "lonodex", "hinodex", "locality", "variation"]
# nodes' perf_class values (variation's scores; no other policy reads them): None leaves
# the property unset, and "fast" is no number: both read as the worst class, 9999
PERF_CLASSES = [None, "0", "1", "2", "9999", "fast"]


def grug(nodes: int, sockets: int, cores: int, gpus: int) -> str:
    gpu = (
        f'<edge id="s2g" source="socket" target="gpu"><data key="id_scope">1</data>'
        f'<data key="multi_scale">{gpus}</data></edge>'
        if gpus
        else ""
    )
    return grug_document(
        '  <graph id="g" edgedefault="directed">\n'
        + grug_vertices(("cluster", "cluster", "c"), ("node", "node", "node"),
                        ("socket", "socket", "socket"), ("core", "core", "core"),
                        ("gpu", "gpu", "gpu"))
        + f"""\
    <edge id="c2n" source="cluster" target="node"><data key="multi_scale">{nodes}</data></edge>
    <edge id="n2s" source="node" target="socket"><data key="multi_scale">{sockets}</data></edge>
    <edge id="s2c" source="socket" target="core"><data key="id_scope">1</data>
      <data key="multi_scale">{cores}</data></edge>
    {gpu}
  </graph>
""")


def spec(resources: list) -> dict:
    return {
        "version": 1,
        "resources": resources,
        "attributes": {"system": {"duration": 3600}},
        "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}],
    }


def slot(n: int, with_: list) -> dict:
    return {"type": "slot", "count": n, "label": "s", "with": with_}


def core(n: int) -> dict:
    return {"type": "core", "count": n}


SHAPES = {
    "cores": lambda a, b: spec([slot(a, [core(b)])]),
    "cores+gpu": lambda a, b: spec([slot(a, [core(b), {"type": "gpu", "count": 1}])]),
    "nodes": lambda a, b: spec(
        [
            {
                "type": "node",
                "count": a,
                "with": [slot(1, [{"type": "socket", "count": 1, "with": [core(b)]}])],
            }
        ]
    ),
    "node-x": lambda a, b: spec(
        [{"type": "node", "count": 1, "exclusive": True, "with": [slot(a, [core(b)])]}]
    ),
    "sockets": lambda a, b: spec([{"type": "socket", "count": a, "with": [slot(1, [core(b)])]}]),
}
STEP = st.one_of(
    st.tuples(
        st.just("alloc"), st.sampled_from(sorted(SHAPES)), st.integers(1, 3), st.integers(1, 3)
    ),
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("toggle"), st.integers(0, 10000)),  # a vertex down, or back up
)


def requested_types(resources: list) -> set[str]:
    out = set()
    for r in resources:
        if r["type"] != "slot":
            out.add(r["type"])
        out |= requested_types(r.get("with", []))
    return out


def score(v, node_centric: bool, variation: bool = False) -> int:
    """Fluxion's score of a vertex under low/high (its id + 1), plus, node-centric, the
    factor of each node above it ((id + 2) * 10000 + |uniq_id mod 10000 - 1|); under
    variation its perf_class (9999 when unset or no number: dfu_match_var_aware.cpp)."""
    if variation:
        pc = v.properties.get("perf_class", "")
        return int(pc) if pc.isdigit() and int(pc) <= 9999 else 9999
    s = v.id + 1
    p = v.parent
    while node_centric and p is not None:
        if p.type == "node":
            s += (p.id + 2) * 10000 + abs(p.uniq_id % 10000 - 1)
        p = p.parent
    return s


def summary(res: MatchResult, types: set[str], node_centric: bool, variation: bool) -> dict:
    count: Counter = Counter()
    total: Counter = Counter()
    for e in res.selection:
        if e.vertex.type in types:
            count[e.vertex.type] += e.needs
            total[e.vertex.type] += score(e.vertex, node_centric, variation)
    return {"count": dict(count), "score": dict(total)}


def try_match(t: Traverser, js: dict, jobid: int) -> MatchResult | None:
    try:
        return t.match(js, jobid=jobid)
    except NoMatch:
        return None


# cheap examples (~15 ms each), and ties met late in a stream need many of them
@settings(PROFILE, max_examples=max(EXAMPLES, 800))
@given(
    policy=st.sampled_from(EXHAUSTIVE),
    dims=st.tuples(st.integers(1, 8), st.integers(1, 2), st.integers(1, 4), st.integers(0, 2)),
    steps=st.lists(STEP, min_size=1, max_size=40),
    classes=st.lists(st.sampled_from(PERF_CLASSES), min_size=8, max_size=8),
    below=st.sampled_from(["nodes", "sockets", "cores"]),
)
def test_fast_placements_are_valid_and_score_as_exact_mode(policy, dims, steps, classes, below):
    def graph(path: Path):
        # perf_class on nodes, and (below) on the sockets or cores of some of them: a
        # class below a vertex keeps the walk's shortcuts off it (perf_class_below.py)
        g = read_grug(path)
        for v in g.vertices:
            pc = classes[v.uniq_id % 8] if v.type == below else None
            if v.type == "node":
                pc = classes[v.id]
            if pc is not None and (v.type == "node" or v.uniq_id % 3 == 0):
                v.set_property("perf_class", pc)
        return g

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.graphml"
        path.write_text(grug(*dims))
        fast = FastTraverser(graph(path), Policy.parse(policy, stable_ties=True))
        plain = Traverser(graph(path), Policy.parse(policy, stable_ties=True))
        exact = Traverser(graph(path), Policy.parse("high" if policy == "locality" else policy))
    centric = exact.policy.node_centric
    variation = exact.policy.variation
    live: list[int] = []
    held: dict[int, int] = {}  # uniq_id of an exclusively held leaf -> job
    jobid = 0
    for step in steps:
        if step[0] == "cancel":
            if live:
                j = live.pop(step[1] % len(live))
                for t in (fast, plain, exact):
                    t.cancel(j)
                held = {u: k for u, k in held.items() if k != j}
            continue
        if step[0] == "toggle":
            vs = [v for v in fast.g.vertices if v.parent is not None]
            v = vs[step[1] % len(vs)]
            status = "up" if v.status == "down" else "down"
            for t in (fast, plain, exact):
                t.set_status(v.path, status)
            continue
        _op, shape, a, b = step
        js = SHAPES[shape](a, b)
        jobid += 1
        got = try_match(fast, js, jobid)
        ref = try_match(exact, js, jobid)
        same = try_match(plain, js, jobid)
        assert (got is None) == (ref is None) == (same is None), (shape, a, b)
        if got is None:
            continue
        assert [(e.vertex.uniq_id, e.needs, e.exclusive) for e in got.selection] == [
            (e.vertex.uniq_id, e.needs, e.exclusive) for e in same.selection
        ]
        types = requested_types(js["resources"])
        assert summary(got, types, centric, variation) == summary(ref, types, centric, variation), (
            shape, a, b)
        for e in got.selection:
            if e.exclusive and not e.vertex.children:
                assert e.vertex.uniq_id not in held, f"{e.vertex.path} given twice"
                held[e.vertex.uniq_id] = jobid
        # exact mode takes the fast placement instead of its own, so both stay in one state
        exact.cancel(jobid)
        by_uid = {v.uniq_id: v for v in exact.g.vertices}
        picks = [(by_uid[e.vertex.uniq_id], e.needs, e.exclusive) for e in got.selection]
        exact.replay(picks, jobid, got.at, got.duration)
        live.append(jobid)


def outcome(t: Traverser, js: dict, jobid: int, op: str):
    """What a match gives: the selection and its status and start, or the refusal."""
    try:
        res = t.match(js, op=op, jobid=jobid)
    except (NoMatch, Unsatisfiable) as exc:
        return type(exc).__name__, str(exc), getattr(exc, "busy", None)
    return res.status, res.at, [(e.vertex.uniq_id, e.needs, e.exclusive) for e in res.selection]


def constraint_of(choice: tuple[str, int], nodes: int) -> dict | None:
    """An RFC 31 constraint on the graph's nodes (named node0, node1, ...): a hostlist
    of the nodes whose bit is set in a mask, or the nodes whose bit is not."""
    kind, mask = choice
    names = [f"node{i}" for i in range(nodes) if mask >> i & 1]
    if kind == "none":
        return None
    hosts = {"hostlist": [",".join(names)]} if names else {"ranks": ["1000"]}
    return hosts if kind == "hostlist" else {"not": [hosts]}


@settings(PROFILE, max_examples=max(EXAMPLES, 300))
@given(
    policy=st.sampled_from(EXHAUSTIVE),
    dims=st.tuples(st.integers(1, 8), st.integers(1, 2), st.integers(1, 4), st.integers(0, 2)),
    steps=st.lists(st.tuples(STEP, st.sampled_from(["none", "hostlist", "not"]),
                             st.integers(0, 255),
                             st.sampled_from(["allocate", "allocate_orelse_reserve",
                                              "allocate_with_satisfiability"])),
                   min_size=1, max_size=30),
)
def test_the_root_index_under_a_constraint_places_as_the_plain_walk(policy, dims, steps):
    """A constraint on the nodes (hostlist, or its negation) of a graph whose root's
    children are the nodes: the fast traverser keeps its root index (the constraint
    skips the children it turns down, root_index.py) and must give, at every step of
    a stream with cancels, vertices going down and up, reservations and satisfiability,
    what the plain walk with the same tie rule gives with the constraint in its walk
    (dfu_select._prune): the same selection, status and start, or the same refusal."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.graphml"
        path.write_text(grug(*dims))
        fast = FastTraverser(read_grug(path), Policy.parse(policy, stable_ties=True))
        plain = Traverser(read_grug(path), Policy.parse(policy, stable_ties=True))
    assert fast._nodes_at_root
    live: list[int] = []
    jobid = 0
    for step, kind, mask, op in steps:
        if step[0] == "cancel":
            if live:
                j = live.pop(step[1] % len(live))
                fast.cancel(j)
                plain.cancel(j)
            continue
        if step[0] == "toggle":
            vs = [v for v in fast.g.vertices if v.parent is not None]
            v = vs[step[1] % len(vs)]
            status = "up" if v.status == "down" else "down"
            fast.set_status(v.path, status)
            plain.set_status(v.path, status)
            continue
        _op, shape, a, b = step
        js = SHAPES[shape](a, b)
        constraint = constraint_of((kind, mask), dims[0])
        if constraint is not None:
            js["attributes"]["system"]["constraints"] = constraint
        jobid += 1
        got = outcome(fast, js, jobid, op)
        assert got == outcome(plain, js, jobid, op), (shape, a, b, constraint, op)
        if got[0] in ("ALLOCATED", "RESERVED"):
            live.append(jobid)
