"""take_fresh_leaves: the compiled loop against its Python reference, and the matches
that run through it, with the extension and without.

The reference (``_take_fresh_leaves_py``) is what the update walk did in line before
the loop was compiled, and what the conformance corpora check against Fluxion's own
outputs with the extension in use; here the two implementations meet the same runs of
children (fresh leaves, leaves holding something, marked leaves, leaves with children,
kits missing or malformed, classes the C loop cannot reach by slot offset) and must
leave the same state, the same emits and the same errors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

import pytest
import yaml
from fluxnode.scheduler.graph.resource_graph import LeafHold, Vertex
from fluxnode.scheduler.traversers import whole_leaves
from fluxnode.scheduler.traversers.dfu_impl import Emit
from hypothesis import given, settings
from hypothesis import strategies as st
from support.rq_run import rq
from support.sched_graphs import cores, jobspec

compiled = pytest.mark.skipif(not whole_leaves.COMPILED,
                              reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")

FIELDS = ("children", "schedule", "x_checker", "tags", "size", "type", "uniq_id", "xspans",
          "spans", "allocations", "reservations")


class PropertyVertex(Vertex):
    """A vertex class whose ``tags`` is a property: the C loop must not write its slot
    behind the property's back (it takes the generic attribute calls)."""

    __slots__ = ()

    @property
    def tags(self):
        return Vertex.tags.__get__(self)

    @tags.setter
    def tags(self, value):
        Vertex.tags.__set__(self, value)


POST_INITS: list[int] = []


@dataclass(slots=True)
class CountingEmit:
    """An emit class with a __post_init__: the C loop must call it, not build it in place."""

    vertex: Vertex
    needs: int
    exclusive: bool
    level: int
    agfilter: dict | None = None

    def __post_init__(self) -> None:
        POST_INITS.append(self.vertex.uniq_id)


# shared by both worlds, so that "the same object" can be checked with `is`
HELD = {True: LeafHold(7, True), False: LeafHold(7, False)}
PLANNERS = {name: object() for name in ("sched1", "sched2", "x", "own_sched", "own_x")}
TAGGED = frozenset((3,))
KIDS_OF_A_PARENT = [Vertex(900, "core", "core", "core900", 0)]

kid_kinds = st.sampled_from(["fresh", "fresh", "fresh", "fresh", "scheduled", "x_checked",
                             "tagged", "parent", "unset"])
# the selection walk's mark on the edge to the kid: none, all its units exclusively, all
# of them shared, part of them
kid_marks = st.sampled_from([None, None, "all-x", "all", "part-x"])
kid_specs = st.lists(st.tuples(kid_kinds, st.sampled_from(["core", "gpu", "memory"]),
                               st.sampled_from([1, 2, 16]), kid_marks), max_size=24)
MARKS = {"all-x": lambda size: (size, True), "all": lambda size: (size, False),
         "part-x": lambda size: (size - 1, True)}


def _world(spec, vertex_cls):
    kids = []
    for n, (kind, type_, size, _mark) in enumerate(spec):
        v = vertex_cls(100 + n, type_, type_, f"{type_}{n}", n, size=size)
        if kind == "scheduled":
            v.schedule = PLANNERS["own_sched"]
        elif kind == "x_checked":
            v.x_checker = PLANNERS["own_x"]
        elif kind == "tagged":
            v.tags = TAGGED
        elif kind == "parent":
            v.children = KIDS_OF_A_PARENT
        elif kind == "unset":
            del v.schedule  # an unset slot: reading it raises AttributeError
        kids.append(v)
    return kids


def _run(impl, spec, start, kit_keys, allocated, tracked, agg0, vertex_cls, emit_cls,
         bad_kit, whole):
    kids = _world(spec, vertex_cls)
    kits = {key: (PLANNERS["sched1" if key[0] == 1 else "sched2"], PLANNERS["x"],
                  HELD[allocated]) for key in kit_keys}
    if bad_kit and kits:
        kits[next(iter(kits))] = ("not", "a kit")
    marks = {(5, v.uniq_id): MARKS[mark](size)
             for (_k, _t, size, mark), v in zip(spec, kids, strict=True) if mark} or None
    job_vertices, out, agg = {}, [], dict(agg0)
    POST_INITS.clear()
    try:
        got = impl(kids, start, kits, emit_cls, 4, job_vertices, out, tracked, agg, marks, 5,
                   whole)
    except Exception as exc:  # noqa: BLE001 - the errors are compared
        got = (type(exc), str(exc).split(":")[0])
    state = []
    for v in kids:
        row = []
        for f in FIELDS:
            try:
                row.append(getattr(v, f))
            except AttributeError:
                row.append(AttributeError)
        state.append(row)
    emits = [(type(e), e.vertex.uniq_id, e.needs, e.exclusive, e.level, e.agfilter)
             for e in out]
    return got, state, emits, sorted(job_vertices), agg, list(POST_INITS)


def _same(a, b) -> bool:
    """Equal results; a vertex's fields equal where they are numbers or names, and the
    very same objects elsewhere (kits, containers and empties are shared by both runs)."""
    if a[0] != b[0] or a[2:] != b[2:]:
        return False
    for row_a, row_b in zip(a[1], b[1], strict=True):
        for x, y in zip(row_a, row_b, strict=True):
            if x is not y and not (isinstance(x, (int, str)) and x == y):
                return False
    return True


@compiled
@settings(max_examples=400, deadline=None)
@given(spec=kid_specs, start=st.integers(0, 6),
       kit_keys=st.sets(st.sampled_from([(1, 1, "core"), (2, 2, "core"), (16, 16, "memory"),
                                         (1, 1, "gpu"), (2, 2, "gpu"), (16, 16, "core")])),
       allocated=st.booleans(),
       tracked=st.sets(st.sampled_from(["core", "gpu", "memory"])),
       agg0=st.dictionaries(st.sampled_from(["core", "gpu"]), st.integers(0, 9), max_size=2),
       vertex_cls=st.sampled_from([Vertex, Vertex, PropertyVertex]),
       emit_cls=st.sampled_from([Emit, Emit, CountingEmit]),
       bad_kit=st.booleans(), whole=st.booleans())
def test_the_compiled_loop_leaves_what_the_python_loop_leaves(
        spec, start, kit_keys, allocated, tracked, agg0, vertex_cls, emit_cls, bad_kit, whole):
    args = (spec, start, kit_keys, allocated, tracked, agg0, vertex_cls, emit_cls, bad_kit,
            whole)
    py = _run(whole_leaves._take_fresh_leaves_py, *args)
    c = _run(whole_leaves._c_take, *args)
    assert _same(py, c), (py, c)


def test_a_run_of_fresh_leaves_is_taken_and_stops_where_the_caller_must_go_on():
    """The contract, with the expected state written out: fresh leaves get the kit and
    the job's shared containers, an emit each and their units in agg; the loop stops
    at a leaf holding something, at one whose kit is not made yet, and at one whose
    mark does not take it whole."""
    held = LeafHold(9, False)
    kits = {(2, 2, "core"): ("S", "X", held)}
    kids = [Vertex(i, "core", "core", f"core{i}", i, size=2) for i in range(4)]
    kids.append(Vertex(4, "gpu", "gpu", "gpu0", 0))
    kids[2].schedule = "mine"
    for impl in {whole_leaves._take_fresh_leaves_py, whole_leaves.take_fresh_leaves}:
        for v in kids[:2] + kids[3:]:
            v.schedule = v.x_checker = None
            v.tags = v.spans = v.xspans = v.reservations = frozenset()
        jv, out, agg = {}, [], {"core": 1}
        assert impl(kids, 0, kits, Emit, 3, jv, out, {"core"}, agg, None, 1, True) == (2, 2)
        assert [(e.vertex.uniq_id, e.needs, e.exclusive, e.level) for e in out] == [
            (0, 2, True, 3), (1, 2, True, 3)]
        assert all(kids[i].schedule == "S" and kids[i].x_checker == "X" for i in (0, 1))
        assert kids[0].tags is held.tags and kids[0].spans is held.spans
        assert kids[0].xspans is held.spans and kids[0].reservations is held.tags
        assert agg == {"core": 5} and sorted(jv) == [0, 1]
        assert impl(kids, 3, kits, Emit, 3, jv, out, {"core"}, agg, None, 1, True) == (4, 1)
        assert kids[4].schedule is None  # no (1, 1, "gpu") kit: left to the caller
        # marked: taken only with all its units (and, when the parent is not taken
        # whole, exclusively); part of them is left to the caller
        for marks, whole, taken in [({(1, 3): (1, True)}, True, 0), ({(1, 3): (2, False)}, True, 1),
                                    ({(1, 3): (2, True)}, False, 1),
                                    ({(1, 3): (2, False)}, False, 0), (None, False, 0)]:
            kids[3].schedule = kids[3].x_checker = None
            kids[3].tags = frozenset()
            assert impl(kids, 3, kits, Emit, 3, jv, out, {"core"}, agg, marks, 1,
                        whole) == (3 + taken, taken), (marks, whole)


def test_bad_arguments_raise_in_both():
    for impl in {whole_leaves._take_fresh_leaves_py, whole_leaves.take_fresh_leaves}:
        with pytest.raises(ValueError):
            impl([], -1, {}, Emit, 3, {}, [], (), {}, None, 1, True)


def _have_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


@pytest.mark.skipif(os.environ.get(whole_leaves.ENV_PURE_PYTHON, "") not in ("", "0"),
                    reason="FLUXNODE_PURE_PYTHON is set")
def test_the_extensions_are_built_where_a_compiler_is():
    """pip install builds the loops where there is a C compiler; an optional extension
    that failed to build would otherwise go unnoticed (the Python loop runs instead)."""
    if not _have_compiler():
        pytest.skip("no C compiler: the optional extension is not built here")
    from fluxnode.scheduler.policies import stdsort
    from fluxnode.scheduler.traversers import leaf_scores, leaf_shapes, pruned_skip, update_recipes

    assert whole_leaves.COMPILED and leaf_shapes.COMPILED and update_recipes.COMPILED
    assert leaf_scores.COMPILED and stdsort.COMPILED and pruned_skip.COMPILED
    probe = subprocess.run(
        [sys.executable, "-c", "from fluxnode.scheduler.traversers import whole_leaves as w,"
         " leaf_shapes as s, leaf_scores as c, update_recipes as r, pruned_skip as p;"
         " from fluxnode.scheduler.policies import stdsort as o;"
         " print(w.COMPILED, s.COMPILED, c.COMPILED, r.COMPILED, p.COMPILED, o.COMPILED)"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, whole_leaves.ENV_PURE_PYTHON: "1"})
    # and the switch selects the Python loops
    assert probe.stdout.strip() == "False False False False False False"


@compiled
@pytest.mark.parametrize("policy", ["firstnodex", "lonodex", "hinodex", "low"])
def test_resource_query_prints_the_same_with_the_extension_and_without(
        tmp_path, tiny_grug, policy, monkeypatch):
    """A stream that takes nodes whole (node-exclusive policies, an exclusive node, a
    reservation behind them, cancels that free them for the next) through
    resource-query, once with the compiled loop and once with FLUXNODE_PURE_PYTHON=1:
    the same output, line for line, and it did take leaves of whole nodes."""
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(cores(1)))
    node = tmp_path / "node.yaml"
    node.write_text(yaml.safe_dump(jobspec([{"type": "node", "count": 1, "exclusive": True,
                                             "with": [{"type": "slot", "count": 1, "label": "s",
                                                       "with": [{"type": "core",
                                                                 "count": 2}]}]}])))
    cmds = "".join([f"match allocate_orelse_reserve {one}\n" * 3,
                    f"match allocate_orelse_reserve {node}\n" * 2, "cancel 2\n",
                    f"match allocate_orelse_reserve {one}\n", "cancel 1\n",
                    f"match allocate_orelse_reserve {node}\n", "quit\n"])
    monkeypatch.delenv(whole_leaves.ENV_PURE_PYTHON, raising=False)
    with_c = rq(tmp_path, tiny_grug, cmds, "-P", policy)
    monkeypatch.setenv(whole_leaves.ENV_PURE_PYTHON, "1")
    without = rq(tmp_path, tiny_grug, cmds, "-P", policy)
    assert with_c[1:] == ("", 0) and without[1:] == ("", 0)
    assert with_c[0] == without[0]
    assert "memory" in with_c[0] and "RESERVED" in with_c[0]
