"""Remembered prunes skipped in one call: the first-match walk on a full graph.

A single-core ``firstnodex`` (or ``first``) match on a full graph goes through the busy
nodes in Fluxion's child order before the one a cancel freed. ``dfu_fast`` remembers
each child its walk turned down at once (``FastTraverser._pruned``: uniq_id -> (request
level and window, errno)); :func:`skip_pruned` goes through the leading run of such
children of one vertex, so that the walk adds their visits and sets the last errno in
one step instead of a Python loop turn per node.

Two implementations of one contract, as in ``leaf_scores.py``: ``_pruned_skip.c``
(compiled when a C compiler is there) and :func:`_skip_pruned_py`, the reference it must
equal (tests/scheduler/traversers/test_pruned_skip.py). ``FLUXNODE_PURE_PYTHON=1``
selects the reference (see ``fluxnode.scheduler.compiled``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from fluxnode.scheduler.compiled import compiled

__all__ = ["COMPILED", "skip_pruned"]


def _skip_pruned_py(kids: list, order: list, pos: int, pruned: dict, here: object,
                    visited: Collection[int], unset: Any) -> tuple[int, int, Any]:
    """From ``order[pos]`` on (entries ``(weight, uniq_id, i)`` naming ``kids[i]``),
    count the children that are not in ``visited`` and are remembered in ``pruned``
    with the very object ``here`` (compared by identity); stop at the first other.
    Returns (the position it stopped at, how many it counted, the last of their
    errnos that is not ``unset``, else ``unset``). Changes nothing."""
    if pos < 0:
        raise ValueError("skip_pruned: pos must be >= 0")
    count = 0
    err = unset
    n = len(order)
    while pos < n:
        uid = kids[order[pos][2]].uniq_id
        if uid in visited:
            break
        hit = pruned.get(uid)
        if hit is None or hit[0] is not here:
            break
        if hit[1] != unset:
            err = hit[1]
        count += 1
        pos += 1
    return pos, count, err


_c_skip = compiled("fluxnode.scheduler.traversers._pruned_skip", "skip_pruned")
COMPILED = _c_skip is not None
skip_pruned: Callable[..., tuple[int, int, Any]] = _c_skip or _skip_pruned_py
