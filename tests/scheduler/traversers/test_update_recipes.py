"""Update recipes (update_recipes.py): a gang's nodes updated by replaying the first.

The oracle is the plain Traverser, which keeps no templates, no kits and no recipes: it
walks every node of every gang; in its runs the SpanPool keeps nothing either, so every
walk makes its own shared planners and filters, where the fast runs take those of
earlier walks with the same window (job_spans.SpanPool). The same random stream of
gangs, single-core jobs, whole nodes, cancels and partial cancels runs three times in
fresh interpreters: on the plain Traverser, on the FastTraverser with the compiled
apply_recipe, and on the FastTraverser with FLUXNODE_PURE_PYTHON=1 (the Python
apply_recipe). After every command each run dumps what every vertex holds (planner
points, filter points, job ids, allocations) and every selection; the three dumps must
be equal. Some cores are down, so that fresh nodes of one gang are marked at different
cores. A recipe given to a vertex that is not fresh, or marked otherwise, would change a
dump (mutations that skip the fresh check, or the check of each marked child's mark,
fail this test), and so would a pooled planner of another window (a pool keyed by the
start time alone fails it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import seeds

SCRIPT = r"""
import json, random, sys
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from fluxnode.scheduler.traversers import update_recipes

seed, kind, policy, which, grug = sys.argv[1:6]
rng = random.Random(int(seed))
if kind == "rv1":
    R = {"version": 1, "execution": {
        "R_lite": [{"rank": "0-23", "children": {"core": "0-3", "gpu": "0"}}],
        "nodelist": ["n[0-23]"], "starttime": 0, "expiration": 0}}
    g = read_rv1(R)
else:
    g = read_grug(grug)
cls = Traverser if which == "plain" else FastTraverser
applied = [0]
reused = [0]
from fluxnode.scheduler.traversers import job_spans, update_walk
window = job_spans.SpanPool.window
if which == "plain":  # the oracle keeps no shared planners across walks either
    job_spans.SpanPool.window = lambda self, at, duration: ({}, {})
else:  # count the walks that found planners kept by earlier ones
    def counted_window(self, at, duration):
        kept = window(self, at, duration)
        reused[0] += bool(kept[0])
        return kept

    job_spans.SpanPool.window = counted_window
if which == "fast":  # count the recipes that fitted (the walk looks the name up per call)
    apply = update_walk.apply_recipe

    def counted(*args):
        done = apply(*args)
        applied[0] += done
        return done

    update_walk.apply_recipe = counted
t = cls(g, policy)
nodes = [v for v in g.walk() if v.type == "node"]
# a quarter of the nodes lose a core: their fresh subtrees are marked elsewhere (the same
# count of marked children at other positions). One each, so that every node keeps 3
# cores or more and job 1, a gang of every node, fits whatever the seed
for node in rng.sample(nodes, len(nodes) // 4):
    cores = [v for v in g.walk(node) if v.type == "core"]
    t.set_status(rng.choice(cores).path, "down")

def spec(resources, duration):
    return {"version": 1, "resources": resources,
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["x"], "slot": "task", "count": {"per_slot": 1}}]}

def gang(n, per):
    below = [{"type": "core", "count": per}]
    if kind == "sockets":
        below = [{"type": "socket", "count": 1, "with": below}]
    return [{"type": "node", "count": n, "with": [
        {"type": "slot", "count": 1, "label": "task", "with": below}]}]

def planner(p):
    if p is None or not p.span_count:
        return None
    return p.points()

def dump():
    out = []
    for v in g.walk():
        sp = v.subplan
        filt = None
        if sp is not None and sp.span_count:
            filt = {r: sp.planner(r).points() for r in sp.resource_types}
        out.append([v.path, planner(v.schedule), planner(v.x_checker), filt,
                    sorted(v.tags), sorted(v.spans), sorted(v.xspans), sorted(v.agspans),
                    sorted(v.allocations), sorted(v.reservations)])
    return out

log = []
live = []
for jobid in range(1, 61):
    roll = rng.random()
    # job 1 again after its cancel, in the same window: its walk takes the shared planners
    # job 1's left in the pool (job_spans.SpanPool), whatever the seed
    again = jobid == 2 and live == [1]
    if again:
        t.cancel(1)
        live.clear()
        log.append(["cancel", 1, dump()])
    elif live and roll < 0.2:
        gone = live.pop(rng.randrange(len(live)))
        t.cancel(gone)
        log.append(["cancel", gone, dump()])
        continue
    if live and roll < 0.3 and kind == "rv1":
        job = rng.choice(live)
        ranks = rng.sample(range(24), 3)
        try:
            if t.partial_cancel(job, ranks):
                live.remove(job)
            log.append(["partial", job, ranks, dump()])
        except Exception as exc:  # a rank the job holds nothing on
            log.append(["partial", job, ranks, type(exc).__name__])
        continue
    duration = rng.choice([60, 3600])
    pick = rng.random()
    if again:
        res, duration = first
    elif jobid == 1:  # every node: recipes fit from its third fresh node on, whatever the seed
        res = gang(len(nodes), rng.randint(1, 3))
        first = (res, duration)
    elif pick < 0.5:
        res = gang(rng.randint(6, len(nodes)), rng.randint(1, 3))
    elif pick < 0.7:
        res = [{"type": "node", "count": 1, "exclusive": True, "with": [
            {"type": "slot", "count": 1, "label": "task",
             "with": [{"type": "core", "count": 1}]}]}]
    else:
        res = [{"type": "slot", "count": 1, "label": "task",
                "with": [{"type": "core", "count": rng.randint(1, 3)}]}]
    try:
        r = t.match(spec(res, duration), op="allocate_orelse_reserve", jobid=jobid)
    except NoMatch:
        log.append(["nomatch", jobid])
        continue
    live.append(jobid)
    log.append(["match", jobid, r.at,
                [[e.vertex.path, e.needs, e.exclusive, e.level] for e in r.selection],
                dump()])
print(json.dumps({"compiled": update_recipes.COMPILED, "applied": applied[0],
                  "reused": reused[0], "log": log}))
"""


def _run(seed: int, kind: str, policy: str, which: str, grug: str, pure: bool) -> dict:
    env = dict(os.environ)
    env.pop("FLUXNODE_PURE_PYTHON", None)
    if pure:
        env["FLUXNODE_PURE_PYTHON"] = "1"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(seed), kind, policy, which, grug],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["rv1", "sockets"])
@pytest.mark.parametrize("policy", ["first", "low", "firstnodex"])
def test_gangs_by_recipe_leave_what_the_plain_walk_leaves(kind, policy, tiny_grug):
    seed = seeds.choose("test_gangs_by_recipe_leave_what_the_plain_walk_leaves")
    text = tiny_grug.read_text()
    rack = '<edge id="e2" source="rack" target="node"><data key="id_scope">1</data>' \
        '<data key="multi_scale">'
    assert text.count(rack + "2<") == 1
    tiny_grug.write_text(text.replace(rack + "2<", rack + "12<"))  # 12 nodes of sockets
    plain = _run(seed, kind, policy, "plain", str(tiny_grug), pure=False)
    fast = _run(seed, kind, policy, "fast", str(tiny_grug), pure=False)
    pure = _run(seed, kind, policy, "fast", str(tiny_grug), pure=True)
    assert not pure["compiled"]
    assert fast["applied"] > 0 and pure["applied"] > 0, seed  # recipes did fit
    assert fast["reused"] > 0 and pure["reused"] > 0, seed  # walks took pooled planners
    matched = [e for e in plain["log"] if e[0] == "match"]
    assert len(matched) >= 5, seed  # the stream did place gangs
    for i, (want, got) in enumerate(zip(plain["log"], fast["log"], strict=True)):
        assert got == want, (seed, i, want[:2])
    for i, (want, got) in enumerate(zip(plain["log"], pure["log"], strict=True)):
        assert got == want, (seed, i, want[:2])


@pytest.mark.skipif(not __import__("fluxnode.scheduler.traversers.update_recipes",
                                   fromlist=["COMPILED"]).COMPILED,
                    reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")
def test_the_compiled_apply_refuses_malformed_recipes_and_changes_nothing():
    """apply_recipe in C: wrong argument counts and types, an entry that is not an
    11-tuple, a path that is not a tuple raise TypeError; a recipe that does not fit
    (the vertex is not fresh) answers False and leaves everything as it was."""
    from fluxnode.scheduler.graph.resource_graph import Vertex
    from fluxnode.scheduler.traversers import update_recipes
    from fluxnode.scheduler.traversers.dfu_impl import Emit

    apply = update_recipes._c_apply
    root = Vertex(0, "node", "node", "node0", 0)
    root.children = [Vertex(1, "core", "core", "core0", 0, parent=root)]
    state = (None,) * 3 + (frozenset(),) * 6
    entry = ((0,), 1, True, 1, state, None, "core", 1, None, 0, ())
    ok = [[entry], root, 2, Emit, [], {}, {}, {}, {}, {}, False, None, {}, {}]
    with pytest.raises(TypeError):
        apply(*ok[:13])
    for i, bad in [(0, (entry,)), (4, ()), (6, []), (9, [])]:
        with pytest.raises(TypeError):
            apply(*ok[:i], bad, *ok[i + 1:])
    for bad_entry in [entry[:10], ([0], *entry[1:])]:
        with pytest.raises(TypeError):
            apply([bad_entry], *ok[1:])
    root.children[0].tags = frozenset({7})  # not fresh: no fit, nothing changed
    out, job_vertices = [], {}
    assert apply([entry], root, 2, Emit, out, job_vertices, *ok[6:]) is False
    assert out == [] and job_vertices == {} and root.children[0].tags == frozenset({7})
    root.children[0].tags = frozenset()
    assert apply([entry], root, 2, Emit, out, job_vertices, *ok[6:]) is True
    assert [(e.vertex.name, e.needs, e.exclusive, e.level) for e in out] == \
        [("core0", 1, True, 3)]
    assert job_vertices == {1: root.children[0]}


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_a_recipe_naming_a_child_the_vertex_lacks_does_not_fit(impl):
    """Nodes alike in type, size and totals may differ in shape (issue 35: two sockets of
    two cores, or one empty socket and one of four): a recipe whose path runs past a
    vertex's children answers False and changes nothing, in Python and in C alike."""
    from fluxnode.scheduler.graph.resource_graph import Vertex
    from fluxnode.scheduler.traversers import update_recipes
    from fluxnode.scheduler.traversers.dfu_impl import Emit

    apply = update_recipes._apply_recipe_py if impl == "python" else update_recipes._c_apply
    if apply is None:
        pytest.skip("the C extension is not built (or FLUXNODE_PURE_PYTHON)")
    root = Vertex(0, "node", "node", "node0", 0)
    socket = Vertex(1, "socket", "socket", "socket0", 0, parent=root)
    root.children = [socket]  # socket0 has no core: the recipe's (0, 0) is not there
    state = (None,) * 3 + (frozenset(),) * 6
    entry = ((0, 0), 1, True, 2, state, None, "core", 1, None, 0, ())
    out, job_vertices = [], {}
    assert apply([entry], root, 2, Emit, out, job_vertices, {}, {}, {}, {}, False, None,
                 {}, {}) is False
    assert out == [] and job_vertices == {}
