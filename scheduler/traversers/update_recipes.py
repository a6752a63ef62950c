"""Update recipes: what the update walk did to one fresh subtree, done again to another.

A gang's update walk takes a thousand nodes the same way: each is fresh, the selection
marked the same edges in it, and the walk gives each of its vertices the same shared
planners and containers (the kits of ``job_spans.JobSpans``), an emit and an edge
weight. The walk of one such node is kept as a :class:`Recipe`: each vertex it emitted,
by its child positions below the node, with its emit's needs, exclusivity and level,
the state it was left in and its new edge weight; each vertex's marked children, by
position, with their marks. The update walk files recipes by what it enters a node
with and the node's type, size and totals, and :func:`apply_recipe` does one to another
node when it fits: every vertex the recipe names is there with the same type, size,
totals dict and child count, fresh (no planner, filter or tag), and has exactly the
recorded children marked, marked alike. Nothing else of a vertex is read by the walk
below it (not its id, nor its status: down vertices below are taken too), so the walk
would do there what it did below the first, which apply_recipe does without the walk.

A recipe is kept only when everything it hands out is shared (planners marked shared,
read-only containers): a vertex's own set or planner is never given to a second one.
``tests/scheduler/traversers/test_update_recipes.py`` holds a walk with recipes to one
without them, state by state. ``_update_recipes.c`` is the compiled apply_recipe, which
must equal ``_apply_recipe_py`` (one C file per Python reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluxnode.scheduler.compiled import compiled
from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.traversers.dfu_impl import note_move

# what the update walk writes on a vertex it takes (schedule, x_checker and subtree
# filter; tags, span maps and allocation sets)
STATE = ("schedule", "x_checker", "subplan", "tags", "xspans", "spans", "agspans",
         "allocations", "reservations")
_PRIVATE = (set, dict)  # a vertex's own containers: never handed to another


def _at(root: Vertex, path: tuple[int, ...]) -> Vertex | None:
    """The vertex at child positions ``path`` below ``root``; None when a vertex on the
    way has too few children (nodes alike in totals but not in shape: a recipe does
    not fit there)."""
    v = root
    for i in path:
        kids = v.children
        if i >= len(kids):
            return None
        v = kids[i]
    return v


def _shared(state: tuple) -> bool:
    for obj in state[:3]:
        if obj is not None and not obj.shared:
            return False
    return not any(type(obj) in _PRIVATE for obj in state[3:])


class Recipe:
    """One fresh subtree's update, kept to be done again (see the module's docstring)."""

    __slots__ = ("entries", "n", "up")

    def __init__(self, entries: list[tuple], n: int, up: dict[str, int]) -> None:
        # per vertex emitted, in emit order: (path, needs, exclusive, level below the
        # subtree's root, state, new edge weight or None; what apply_recipe checks: type,
        # size, totals dict, child count, ((position, mark) of each marked child, ...))
        self.entries = entries
        self.n = n  # what the walk of the subtree counted
        self.up = up  # what it reported to its parent (read-only)

    @classmethod
    def record(cls, root: Vertex, emits: list[Any], level: int, n: int, up: dict[str, int],
               marks: dict[tuple[int, int], tuple[int, bool]],
               marked: dict[int, list[Vertex]], totals: dict[int, dict[str, int]],
               weight: Callable[[Vertex], int | None] | None) -> Recipe | None:
        """The recipe of the walk that just took ``root`` (entered at ``level``) and left
        ``emits``; None when it cannot be done again safely: a vertex left with state of
        its own, or a marked child the walk did not emit. ``totals``: the traverser's
        subtree totals (equal ones are one dict); ``weight``: the update's edge weight
        of a vertex (first-match policies), else None."""
        paths: dict[int, tuple[int, ...]] = {root.uniq_id: ()}
        for e in emits:
            if _path(root, e.vertex, paths) is None:
                return None
        entries = []
        for e in emits:
            v = e.vertex
            uid = v.uniq_id
            state = tuple(getattr(v, name) for name in STATE)
            if not _shared(state):
                return None
            got = []
            for k in marked.get(uid, ()):
                if k.uniq_id not in paths:  # marked, not emitted: its subtree is unknown
                    return None
                got.append((paths[k.uniq_id][-1], marks.get((uid, k.uniq_id))))
            w = weight(v) if weight is not None and v.children else None
            entries.append((paths[uid], e.needs, e.exclusive, e.level - level, state, w,
                            v.type, v.size, totals.get(uid), len(v.children), tuple(got)))
        return cls(entries, n, up)



def _apply_recipe_py(entries: list[tuple], root: Vertex, level: int, emit: type, out: list,
                     job_vertices: dict, marks: dict[tuple[int, int], tuple[int, bool]],
                     marked: dict[int, list[Vertex]], totals: dict[int, dict[str, int]],
                     cache: dict, tracked: bool, weights: dict[int, int] | None,
                     order: dict, moves: dict[int, dict[int, tuple[int, int]]]) -> bool:
    """Do a recipe's ``entries`` to ``root`` (entered at ``level``) when they fit; False,
    with nothing changed, when not. Fits: every vertex the recipe names is there with
    the recorded type, size, totals dict and child count, fresh (no planner, filter or
    tag), and its marked children are the recorded ones, marked alike. Done: each
    vertex's state, its filing in ``job_vertices``, its emit appended to ``out``, its
    entry in the subtree ``cache`` dropped (through ``cache.pop`` when pops are
    ``tracked``), and its new edge weight set as DfuUpdate._set_weight sets one for a
    containment parent (``weights``; the move waits in ``moves`` when the parent has a
    sorted child order). The compiled apply_recipe does the same."""
    for path, _n, _x, _l, _s, _w, vtype, size, tot, nkids, got in entries:
        v = _at(root, path)
        if v is None:
            return False
        if (v.schedule is not None or v.x_checker is not None or v.subplan is not None
                or v.tags or v.type != vtype or v.size != size):
            return False
        kids = v.children
        uid = v.uniq_id
        if (len(kids) != nkids or totals.get(uid) is not tot
                or len(marked.get(uid, ())) != len(got)):
            return False
        for pos, mark in got:
            if marks.get((uid, kids[pos].uniq_id)) != mark:
                return False
    for path, needs, x, dlevel, state, w, *_checked in entries:
        v = _at(root, path)
        (v.schedule, v.x_checker, v.subplan, v.tags, v.xspans, v.spans, v.agspans,
         v.allocations, v.reservations) = state
        uid = v.uniq_id
        job_vertices[uid] = v
        out.append(emit(v, needs, x, level + dlevel))
        if not v.children:
            continue
        if tracked:
            cache.pop(uid, None)
        elif uid in cache:
            del cache[uid]
        if w is not None and weights is not None:
            old = weights.get(uid, 0)
            weights[uid] = w
            note_move(order, moves, v.parent.uniq_id, uid, old, w)
    return True


_c_apply = compiled("fluxnode.scheduler.traversers._update_recipes", "apply_recipe")
COMPILED = _c_apply is not None
apply_recipe: Callable[..., bool] = _c_apply or _apply_recipe_py


def _path(root: Vertex, v: Vertex, paths: dict[int, tuple[int, ...]]) -> tuple[int, ...] | None:
    """``v``'s child positions below ``root`` (filed in ``paths``); None when not below."""
    got = paths.get(v.uniq_id)
    if got is not None:
        return got
    p = v.parent
    if p is None:
        return None
    above = _path(root, p, paths)
    if above is None:
        return None
    got = paths[v.uniq_id] = (*above, p.children.index(v))
    return got
