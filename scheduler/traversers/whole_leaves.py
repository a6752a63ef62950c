"""Fresh leaves a job takes whole: the update walk's hottest loop.

A node-exclusive match takes every core of its node: 64-70 leaves per single-core
``firstnodex``/``lonodex``/``hinodex`` match, 68,000 for a 1,000-node exclusive gang;
a gang of nodes takes one core of each, marked with all its units, exclusively. A
fresh leaf (no planner, no tag yet) taken so gets the same things every time: the
job's shared planners and containers (its "kit", see ``job_spans.JobSpans``), a
place in the job's vertices, an :class:`~.dfu_impl.Emit`, and its units in the
parent's subtree counts. :func:`take_fresh_leaves` does that for a run of such
children in one call.

There are two implementations of the one function, with one contract:

* ``_whole_leaves.c``, compiled by ``pip install`` when a C compiler and the Python
  headers are there (setuptools ``ext-modules`` in pyproject.toml, ``optional``: a
  machine without a compiler gets a working install without it), about five times
  faster per leaf: the interpreter's cost per attribute and call is what this loop
  is made of;
* :func:`_take_fresh_leaves_py` below, the reference, which the C one must equal
  (tests/scheduler/traversers/test_whole_leaves.py holds them to each other on
  random runs of children, and compares resource-query's output with each).

``FLUXNODE_PURE_PYTHON=1`` in the environment selects the Python one at import
(see ``fluxnode.scheduler.compiled``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from fluxnode.scheduler.compiled import ENV_PURE_PYTHON, compiled

__all__ = ["COMPILED", "ENV_PURE_PYTHON", "take_fresh_leaves"]


def _take_fresh_leaves_py(kids: Sequence[Any], i: int, kits: dict, emit: Callable[..., Any],
                          level: int, job_vertices: dict, out: list,
                          prune_types: Collection[str], agg: dict[str, int],
                          marks: dict | None, uid: int, whole: bool) -> tuple[int, int]:
    """Take ``kids[i:]`` of the vertex ``uid`` while each is a fresh leaf taken whole
    whose kit ``kits`` already has. Taken whole: the selection walk's mark (``marks``,
    keyed ``(uid, child's uniq_id)``; None: no child of ``uid`` is marked) asks for
    all its units, exclusively, or ``uid`` is taken whole (``whole``) and the mark asks
    for all its units or there is none.

    For each: its schedule planner, x_checker and containers from the kit (keyed
    ``(size, size, type)``: a fresh vertex is taken with all its units), a place in
    ``job_vertices``, ``emit(c, size, True, level)`` appended to ``out``, and its size
    added to ``agg[type]`` when ``prune_types`` tracks the type. Stops at the first
    child that is not such a leaf (it has children, any state, another mark, or no kit
    yet), which the caller takes its own way. Returns (the index it stopped at, how many
    it took)."""
    if i < 0:
        raise ValueError("take_fresh_leaves: i must be >= 0")
    n = len(kids)
    start = i
    while i < n:
        c = kids[i]
        if c.children or c.schedule is not None or c.x_checker is not None or c.tags:
            break
        size = c.size
        mark = marks.get((uid, c.uniq_id)) if marks is not None else None
        if mark is None:
            if not whole:
                break
        elif mark[0] != size or not (whole or mark[1]):
            break
        kit = kits.get((size, size, c.type))
        if kit is None:
            break
        c.schedule, c.x_checker, held = kit
        c.hold_whole(held)
        job_vertices[c.uniq_id] = c
        out.append(emit(c, size, True, level))
        if c.type in prune_types:
            agg[c.type] = agg.get(c.type, 0) + size
        i += 1
    return i, i - start


_c_take = compiled("fluxnode.scheduler.traversers._whole_leaves", "take_fresh_leaves")
COMPILED = _c_take is not None
take_fresh_leaves: Callable[..., tuple[int, int]] = _c_take or _take_fresh_leaves_py
