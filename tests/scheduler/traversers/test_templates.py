"""The walk's template shortcut (an untouched leaf parent replayed from the walk of another
of its shape) must leave what the walk leaves, in fast and in exact mode.

In Fluxion's multi-tier storage graph (t3021, mtl3.graphml) a storage unit hangs under its
rack and, by a second containment edge, under the tier above it. A match walks it once
per parent: the rack's request does not name it (the test fails and the unit stays
unvisited), the storage request does and takes its ssds. A template that marked every
replayed unit visited hid the second walk, so the fifth match failed once the first unit
was full. Fluxion's expected output for cmds02 (8 matches, the 9th fails) is the oracle.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers import shape_templates
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from support.paths import SHARED
from support.sched_graphs import cores, grug_document, grug_vertices, jobspec

DATA = SHARED / "fluxion-corpus" / "data" / "resource"
GRAPH = DATA / "grugs" / "mt-storage" / "mtl3.graphml"
JOB = DATA / "jobspecs" / "mt-storage" / "L3" / "test002.yaml"


@pytest.mark.parametrize("cls", [Traverser, FastTraverser])
@pytest.mark.parametrize("stable", [False, True])
def test_a_unit_left_by_one_parents_walk_is_walked_again_under_the_other(cls, stable):
    if not GRAPH.exists():
        pytest.skip(f"Fluxion's corpus not found at {DATA}")
    t = cls(read_grug(GRAPH), Policy.parse("high", stable_ties=stable))
    job = Jobspec.parse(JOB.read_bytes())
    units = []
    for _ in range(8):
        res = t.match(job)
        units += [e.vertex.name for e in res.selection if e.vertex.type == "mtl1unit"]
    # Fluxion's 002.R.out: four matches in mtl1unit1, then four in mtl1unit0
    assert units == ["mtl1unit1"] * 4 + ["mtl1unit0"] * 4
    with pytest.raises(NoMatch):
        t.match(job)


def _shapes() -> list[dict]:
    slot = {"type": "slot", "count": 1, "label": "default",
            "with": [{"type": "core", "count": 2}]}
    return [
        cores(1),
        cores(3, nodes=1),
        jobspec([{"type": "node", "count": {"min": 1, "max": 2, "operator": "+", "operand": 1},
                  "exclusive": False, "with": [slot]}]),
        jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [slot]}]),
        jobspec([{"type": "node", "count": 1, "with": [{"type": "socket", "count": 1, "with": [
            {"type": "slot", "count": 1, "label": "default", "with": [
                {"type": "core", "count": 1}, {"type": "gpu", "count": 1}]}]}]}]),
        cores(40),  # more than the graph holds
    ]


# Nodes whose sockets and leaves repeat their ids node by node (id_scope 1), so every
# untouched node has one shape and the walk replays a node template (a deep one: its
# children are leaf parents, plus a leaf of its own); in the tiny graph socket ids are
# global, every node's shape its own.
def _edge(n: int, src: str, tgt: str, scale: int, scope: int = 1) -> str:
    return (f'    <edge id="e{n}" source="{src}" target="{tgt}"><data key="id_scope">{scope}'
            f'</data><data key="multi_scale">{scale}</data></edge>\n')


TWIN_NODES = grug_document(
    '  <graph id="twins" edgedefault="directed">\n'
    + grug_vertices(("cluster", "cluster", "twins"), ("node", "node", "node"),
                    ("socket", "socket", "socket"), ("core", "core", "core"),
                    ("gpu", "gpu", "gpu"), ("ssd", "ssd", "ssd"))
    + _edge(1, "cluster", "node", 6, scope=0) + _edge(2, "node", "socket", 2)
    + _edge(3, "socket", "core", 4) + _edge(4, "socket", "gpu", 1) + _edge(5, "node", "ssd", 1)
    + "  </graph>\n")


@pytest.mark.parametrize("graph", ["tiny", "twins"])
@pytest.mark.parametrize("policy", ["low", "high", "hinode", "lonodex", "locality", "first",
                                    "firstnodex"])
def test_exact_mode_shortcuts_leave_the_plain_walks_errno_counts_and_answers(
        tmp_path, tiny_grug, policy, graph):
    """resource-query's FastTraverser in exact mode against the plain Traverser (the walk
    with no shortcut), match by match: answer, errno and visit counts. The errno is what
    resource-query reports for a match that selects nothing (a leaf pruned in line used to
    leave none, so the next jobid was off by one on Fluxion's random cases)."""
    path = tiny_grug
    if graph == "twins":
        path = tmp_path / "twins.graphml"
        path.write_text(TWIN_NODES)
    plain = Traverser(read_grug(path), policy)
    fast = FastTraverser(read_grug(path), policy)
    for t in (plain, fast):
        t.report_errno = True
    shapes = _shapes()
    for i in range(24):
        js = shapes[i % len(shapes)]
        got = []
        for t in (plain, fast):
            try:
                res = t.match(js, op="allocate_orelse_reserve", jobid=i + 1)
                got.append(sorted((e.vertex.uniq_id, e.needs, e.exclusive)
                                  for e in res.selection))
            except NoMatch as exc:
                got.append(type(exc).__name__)
            except Exception as exc:  # Unsatisfiable, TraverserErrno: part of the answer
                got.append(f"{type(exc).__name__}: {exc}")
            got.append((t.errno, t.total_preorder, t.total_postorder))
        assert got[:2] == got[2:], f"match {i + 1} ({policy})"
        if i % 5 == 4 and i + 1 in plain.jobs:
            plain.cancel(i + 1)
            fast.cancel(i + 1)


@pytest.mark.parametrize("policy", ["first", "firstnodex", "low"])
def test_a_request_level_that_never_makes_a_template_stops_numbering_shapes(policy, tmp_path):
    """A single-core first-match walk takes a core of a fresh node and socket each time:
    the walk leaves groups, so it makes no template, and numbering the shapes of that
    node and socket (tuples of their children's fields) was wasted work per match. After
    TPL_GIVE_UP such walks in a row the request level stops numbering shapes of that type,
    and tries again once in TPL_RETRY walks. 400 matches with cancels on 96 nodes pass
    through one retry; every answer is the plain walk's, shapes are
    numbered for only a few of the vertices walked, and a gang of nodes afterwards (a new
    request level) still replays a node template."""
    graph = grug_document(
        '  <graph id="twins" edgedefault="directed">\n'
        + grug_vertices(("cluster", "cluster", "twins"), ("node", "node", "node"),
                        ("socket", "socket", "socket"), ("core", "core", "core"))
        + _edge(1, "cluster", "node", 96, scope=0) + _edge(2, "node", "socket", 2)
        + _edge(3, "socket", "core", 4) + "  </graph>\n")
    path = tmp_path / "g.graphml"
    path.write_text(graph)
    plain, fast = Traverser(read_grug(path), policy), FastTraverser(read_grug(path), policy)
    live: list[int] = []
    walked = 0
    for jobid in range(1, 401):
        got = []
        for t in (plain, fast):
            res = t.match(cores(1), jobid=jobid)
            got.append(sorted((e.vertex.uniq_id, e.needs, e.exclusive) for e in res.selection))
        assert got[0] == got[1], (jobid, got)
        walked += 2  # a node and a socket per match
        live.append(jobid)
        if len(live) > 60:  # firstnodex: a node each
            gone = live.pop(0)
            plain.cancel(gone)
            fast.cancel(gone)
    assert jobid > shape_templates.TPL_RETRY + shape_templates.TPL_GIVE_UP  # a retry came
    numbered = len(fast._shapes) + len(fast._deep_shapes)
    # without giving up: first 98, firstnodex 240, low 381 (low's first match walks every
    # node before its give-up counts are reached)
    bound = (8 if policy == "low" else 4) * shape_templates.TPL_GIVE_UP
    assert numbered < bound < walked, numbered
    gang = jobspec([{"type": "node", "count": 8, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [
            {"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}]}]}])
    for t in (plain, fast):
        for jobid in live:
            t.cancel(jobid)
    got = [sorted(e.vertex.uniq_id for e in t.match(gang, jobid=1000).selection)
           for t in (plain, fast)]
    assert got[0] == got[1]
    assert any(tpl is not None for tpl in fast._templates.values())


@pytest.mark.parametrize("policy", ["first", "low"])
def test_a_fresh_graphs_nodes_are_numbered_before_the_first_match(policy, tmp_path):
    """FastTraverser numbers every node's shape when the graph is (re)built, so that a
    gang's walk of fresh nodes finds each node's template without numbering it there.
    The oracle for the numbers: nodes get one number exactly when their children read the
    same (the Python leaf_fields of each socket, the other children's own fields). Then a
    gang on the fresh graph numbers no new shape, and answers as the plain walk does;
    without the numbering at build time, its walk numbers the four distinct shapes."""
    from fluxnode.scheduler.traversers.leaf_shapes import _leaf_fields_py

    graph = grug_document(  # ids as in bench/: sockets 0-1 and cores 0-7 in each node
        '  <graph id="alike" edgedefault="directed">\n'
        + grug_vertices(("cluster", "cluster", "alike"), ("node", "node", "node"),
                        ("socket", "socket", "socket"), ("core", "core", "core"),
                        ("gpu", "gpu", "gpu"), ("ssd", "ssd", "ssd"))
        + _edge(1, "cluster", "node", 12, scope=0) + _edge(2, "node", "socket", 2, scope=0)
        + _edge(3, "socket", "core", 4) + _edge(4, "socket", "gpu", 1)
        + _edge(5, "node", "ssd", 1, scope=0) + "  </graph>\n")
    path = tmp_path / "g.graphml"
    path.write_text(graph)
    plain, fast = (cls(read_grug(path), policy) for cls in (Traverser, FastTraverser))
    for t in (plain, fast):  # three nodes differ: a core down, a gpu down, the ssd down
        nodes = [v for v in t.g.walk() if v.type == "node"]
        for u, path in ((nodes[2], (0, 1)), (nodes[5], (1, 4)), (nodes[8], (2,))):
            v = u
            for i in path:
                v = v.children[i]
            v.status = "down"
        t.reinit()
    nodes = [v for v in fast.g.walk() if v.type == "node"]
    assert len(nodes) == 12
    seen: dict = {}
    for u in nodes:
        number = fast._deep_shapes.get(u.uniq_id)
        assert type(number) is int, u.name
        key = tuple(_leaf_fields_py(c) if c.children else (c.type, c.id, c.size, c.status)
                    for c in u.children)
        assert seen.setdefault(key, number) == number, u.name
    assert len(set(seen.values())) == len(seen) == 4
    numbered = len(fast._shape_ids)
    gang = jobspec([{"type": "node", "count": 9, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [
            {"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}]}]}])
    got = [sorted(e.vertex.uniq_id for e in t.match(gang, jobid=1).selection)
           for t in (plain, fast)]
    assert got[0] == got[1]
    assert len(fast._shape_ids) == numbered


def test_the_leaders_nodes_share_their_shapes_columns():
    """On the service's flat graph every node is a leaf parent of its own shape (its id
    is part of it), and its children's columns (types, ids, sizes, statuses, a tuple of
    196 each) are the same for every node of a make: the traverser keeps them once
    (issue 32; 33 B per graph vertex before, a fifth of the leader's graph). The oracle
    for the numbers is the fields themselves (equal fields, equal number: here every
    node its own), and for the matches the plain walk's answer."""
    import tracemalloc

    from fluxnode.broker_conf.rv1 import NodeResources
    from fluxnode.scheduler.service.flat_graph import flat_graph

    def nodes():
        return [NodeResources(rank=r, hostname=f"node{r}", cores=list(range(64)),
                              gpus=list(range(4)), sockets=2, memory_mib=262144)
                for r in range(30)]

    g = flat_graph(nodes())
    g.vertices[1 + 197 * 7 + 3].status = "down"  # node7's core2: a column of its own
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fast = FastTraverser(g, "first")
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept / len(g.vertices) < 10, f"{kept / len(g.vertices):.0f} B per vertex"
    leaf_shapes = [whole for whole in fast._shape_ids if whole[0] == "node"]
    assert len(leaf_shapes) == 30
    assert len({id(col) for whole in leaf_shapes for col in whole[4:]}) == 5
    numbers = [fast._shapes.get(u.uniq_id) for u in g.root.children]
    assert len(set(numbers)) == 30 and None not in numbers
    plain = Traverser(flat_graph(nodes()), "first")
    plain.g.vertices[1 + 197 * 7 + 3].status = "down"
    plain.reinit()
    one = jobspec([{"type": "node", "count": 3, "with": [
        {"type": "slot", "count": 1, "label": "default", "with": [
            {"type": "core", "count": 64}, {"type": "memory", "count": 2}]}]}])
    got = [sorted(e.vertex.uniq_id for e in t.match(one, jobid=1).selection)
           for t in (plain, fast)]
    assert got[0] == got[1] and got[0]
