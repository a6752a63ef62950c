"""skip_pruned: the compiled skip over remembered prunes against its Python reference.

Both meet the same random child orders (positions into the children, any permutation),
children visited or not, remembered with this request's key object, with an equal but
other object, or not at all, with errnos set or unset, and must return the same
(stopped at, skipped, last errno). The walk's own check that skipping changes nothing
but the time is tests/scheduler/traversers/test_first_pruned.py.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.traversers import pruned_skip
from hypothesis import given, settings
from hypothesis import strategies as st

compiled = pytest.mark.skipif(not pruned_skip.COMPILED,
                              reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")

UNSET = -1
HERE = ("first", ("core", 1), True, False, 0, 3600, "alloc", False)
child = st.tuples(
    st.sampled_from(["pruned"] * 6 + ["other-key", "absent", "visited"]),
    st.sampled_from([UNSET, 16, 22, 2]),  # unset, EBUSY, EINVAL, ENOENT
)


def _setup(specs: list[tuple[str, int]], perm: list[int]):
    kids = [Vertex(100 + n, "node", "node", f"node{n}", n) for n in range(len(specs))]
    pruned, visited = {}, set()
    other = tuple(HERE)  # equal, not the same object
    for v, (state, err) in zip(kids, specs, strict=True):
        if state == "pruned":
            pruned[v.uniq_id] = (HERE, err)
        elif state == "other-key":
            pruned[v.uniq_id] = (tuple(list(other)), err)
        elif state == "visited":
            visited.add(v.uniq_id)
            pruned[v.uniq_id] = (HERE, err)
    order = [(-1, -kids[i].uniq_id, i) for i in perm]
    return kids, order, pruned, visited


@compiled
@settings(max_examples=400, deadline=None)
@given(data=st.data(), specs=st.lists(child, max_size=30), start=st.integers(0, 32))
def test_the_compiled_skip_returns_what_the_python_skip_returns(data, specs, start):
    perm = data.draw(st.permutations(range(len(specs))))
    kids, order, pruned, visited = _setup(specs, perm)
    args = (kids, order, start, pruned, HERE, visited, UNSET)
    assert pruned_skip._c_skip(*args) == pruned_skip._skip_pruned_py(*args)


def test_a_run_stops_at_the_first_child_not_remembered_for_this_key():
    """The contract with the answer written out: in order, two remembered children
    (errnos EBUSY, then unset) are skipped; the third was remembered for an equal key
    that is another object, so the run stops there."""
    specs = [("pruned", 16), ("pruned", UNSET), ("other-key", 22), ("pruned", 2)]
    kids, order, pruned, visited = _setup(specs, [1, 0, 2, 3])
    impls = {pruned_skip._skip_pruned_py, pruned_skip.skip_pruned}
    for impl in impls:
        # order: kids[1] (unset), kids[0] (EBUSY), kids[2] (other key): stops at 2
        assert impl(kids, order, 0, pruned, HERE, visited, UNSET) == (2, 2, 16)
        assert impl(kids, order, 3, pruned, HERE, visited, UNSET) == (4, 1, 2)
        assert impl(kids, order, 9, pruned, HERE, visited, UNSET) == (9, 0, UNSET)


@compiled
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        pruned_skip._c_skip([], [], -1, {}, HERE, set(), UNSET)
    with pytest.raises(TypeError):
        pruned_skip._c_skip([], [], 0, [], HERE, set(), UNSET)
    with pytest.raises(TypeError):
        pruned_skip._c_skip([], [], 0, {})
    kids, order, pruned, visited = _setup([("pruned", 16)], [0])
    with pytest.raises(IndexError):
        pruned_skip._c_skip(kids, [(0, 0, 5)], 0, pruned, HERE, visited, UNSET)
