"""Fresh leaves scored in line: the exhaustive select walk's hottest loop.

A single-core match under an exhaustive policy (``low``, ``high``, ``locality``...)
re-walks the socket whose core the last match took, and its walk scores each of the
socket's ~34 leaves: a test, an :class:`~.scoring.EGroup` holding one
:class:`~.scoring.Edge`, its units in the type's :class:`~.scoring.Evals`. Most of
them are fresh (no planner, no x_checker: nothing ever held them), and a fresh leaf
that passes the tests scores the same way every time. :func:`score_fresh_leaves` does
that for a run of such children in one call; ``dfu_fast._explore_cached`` does every
other child (a subtree, a leaf with a planner, a leaf a prune turns down) its own way.
The socket's single-core slots are then made of those groups, one each, on every
match that changed it: :func:`unit_slots` (``dfu_select.take_slots``' shortcut).

Two implementations of one contract, as in ``whole_leaves.py``: ``_leaf_scores.c``
(compiled when a C compiler is there: it reads and writes the slots at their offsets
and builds the groups and edges in place) and :func:`_score_fresh_leaves_py`, the
reference it must equal (tests/scheduler/traversers/test_leaf_scores.py).
``FLUXNODE_PURE_PYTHON=1`` selects the reference (see ``fluxnode.scheduler.compiled``).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Collection, Sequence
from typing import Any

from fluxnode.scheduler.compiled import compiled
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import MATCH_MET, MATCH_UNMET, Edge, EGroup
from fluxnode.scheduler.traversers.dfu_impl import X_CHECKER_NJOBS, free_during

EBUSY, EINVAL = errno.EBUSY, errno.EINVAL

__all__ = ["COMPILED", "add_leaf_group", "leaf_free", "score_fresh_leaves", "unit_slots"]


def leaf_free(c: Any, r: Request, x_in: bool, checking: bool, allocating: bool,
              at: int, duration: int) -> int:
    """A leaf's test and prunes for the one request ``r`` naming it, as _dom_dfv_walk's
    _prune and _excl_busy do them: its free units, or the errno a prune sets, negated
    (``dfu_fast``'s leaves in line, and the reference below)."""
    if checking and c.status != "up":
        return -EBUSY
    p = c.schedule
    avail = c.size if p is None else free_during(p, at, duration)
    if avail == 0:
        return -EBUSY
    if x_in and r.exclusive is False:
        return -EINVAL  # _excl_busy: non-exclusive under exclusive
    if x_in or r.exclusive is True:
        if allocating and c.allocations:
            return -EBUSY
        xc = c.x_checker
        if xc is not None and free_during(xc, at, duration) < X_CHECKER_NJOBS:
            return -EBUSY
    return avail


def add_leaf_group(dfu: Any, c: Any, u: Any, ctype: str, avail: int, overall: int,
                   x_in: bool) -> None:
    """A scored leaf ``c`` in ``dfu``'s evals of its type, as ``Evals.add`` adds it: a
    group of score ``overall`` with its ``avail`` units and one edge from ``u``."""
    ev = dfu.types.get(ctype)
    if ev is None:
        ev = dfu.evals(ctype)
    ev.total += avail
    if overall > MATCH_UNMET:
        ev.qual += avail
    ev.egroups.append(EGroup(overall, avail, x_in, False, "", [Edge(c, avail, avail, x_in, u)]))


def _score_fresh_leaves_py(kids: Sequence[Any], i: int, u: Any, leaf_r: dict, visited: set,
                           dfu: Any, xtypes: Collection[str], excl: bool, checking: bool,
                           allocating: bool, centric: bool, base: int, by_id: bool
                           ) -> tuple[int, int, int, int]:
    """Score ``kids[i:]`` (children of ``u``) while each is a visited leaf (skipped, as
    the walk skips it) or a fresh leaf that passes the walk's tests: no children, a
    request of ``leaf_r`` naming its type (not a node under a node-centric policy), no
    schedule planner and no x_checker, up (when ``checking``), with units, and neither
    non-exclusive under exclusive nor held (``allocations``) where exclusivity counts.

    For each fresh one: marked visited, and a group of score ``base + id`` (``base``
    alone when not ``by_id``: the variation policy's leaves, which have no perf_class
    of their own, all score the same) with its units and one edge from ``u`` added to
    ``dfu``'s evals of its type. Stops at the
    first other child, which the caller walks. Returns (the index it stopped at, how
    many it scored, the last one's units and score; 0 and 0 when none)."""
    if i < 0:
        raise ValueError("score_fresh_leaves: i must be >= 0")
    n = len(kids)
    scored = avail = overall = 0
    while i < n:
        c = kids[i]
        if c.uniq_id in visited:
            i += 1
            continue
        if c.children:
            break
        ctype = c.type
        r = leaf_r.get(ctype)
        if r is None or (centric and ctype == "node"):
            break
        if c.schedule is not None or c.x_checker is not None:
            break
        x_in = excl or ctype in xtypes
        # fresh: no planner to read, so no job window is needed
        got = leaf_free(c, r, x_in, checking, allocating, 0, 0)
        if got < 0:
            break
        visited.add(c.uniq_id)
        avail, overall = got, (base + c.id if by_id else base)
        add_leaf_group(dfu, c, u, ctype, avail, overall, x_in)
        scored += 1
        i += 1
    return i, scored, avail, overall


def _unit_slots_py(egroups: Sequence[EGroup], start: int, n: int, label: str) -> list[EGroup]:
    """A slot of one unit for each group of ``egroups[start:start + n]`` (each holding
    one edge): score MATCH_MET plus the group's, count 1, exclusive, labelled ``label``,
    its edge the group's when that already takes all its units exclusively, else a new
    one that does (an edge is never changed once made)."""
    if start < 0 or n < 0:
        raise ValueError("unit_slots: start and n must be >= 0")
    groups = []
    for eg in egroups[start:start + n]:
        e0 = eg.edges[0]
        if e0.exclusive is not True or e0.needs != e0.count:
            e0 = Edge(e0.vertex, e0.count, e0.count, True, e0.parent)
        groups.append(EGroup(MATCH_MET + eg.score, 1, True, False, label, [e0]))
    return groups


_c_score = compiled("fluxnode.scheduler.traversers._leaf_scores", "score_fresh_leaves")
COMPILED = _c_score is not None
score_fresh_leaves: Callable[..., tuple[int, int, int, int]] = _c_score or _score_fresh_leaves_py
_c_slots = compiled("fluxnode.scheduler.traversers._leaf_scores", "unit_slots")
unit_slots: Callable[..., list[EGroup]] = _c_slots or _unit_slots_py
