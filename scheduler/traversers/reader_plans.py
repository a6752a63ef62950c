"""Vertices a JGF update plans outside the walk, as Fluxion's JGF reader plans them.

Fluxion's ``update`` reads the JGF of an earlier match, and its reader
(``resource_reader_jgf_t::update_vtx_plan``) adds a span of each exclusive vertex's whole
size to that vertex's own planner itself, "so vertices that the traverser won't walk still
get their plans updated"; the traverser's update walk then writes and aggregates only
what it reaches down the dominant subsystem. A JGF written under another dominant
subsystem (``-S CA``'s, replayed by a ``-S PA`` session: flux-sched t3023) reaches
nothing there, yet the vertices both subsystems share (the nodes) are planned, so later
power matches avoid them; its ``cancel`` fails (nothing of the job in the walked tree)
after releasing those spans, and the job stays.

:func:`plan_outside_walk` and :func:`release_outside_walk` do the same to a fluxnode
traverser's vertices: the vertex's own units (``schedule``), and x_checker spans on it
and its ancestors, as a walk's update leaves them (they mark the subtree touched for the
fast walk; Fluxion's reader leaves the ancestors' alone, which differs only for a later
request asking an ancestor exclusively), no subtree filter, every change heard by the
traverser's caches (``_invalidate``).
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.traversers.dfu import Traverser
from fluxnode.scheduler.traversers.job_spans import JobSpans


def plan_outside_walk(t: Traverser, vertices: list[Vertex], jobid: int, at: int,
                      duration: int, reserve: bool) -> list[Vertex]:
    """``jobid`` holds each of ``vertices`` whole during [at, at + duration); returns
    every vertex it changed (for :func:`release_outside_walk`)."""
    spans = JobSpans(jobid, at, duration, not reserve, t._span_pool)
    held: dict[int, Vertex] = {}
    for v in vertices:
        spans.units(v, v.size)
        # x_checker spans on it and its ancestors: the fast walk's templates replay only
        # subtrees whose x_checker holds none (shape_templates.py), and these are not
        # untouched
        u: Vertex | None = v
        while u is not None and u.uniq_id not in held:
            spans.x(u, whole=u is v)
            held[u.uniq_id] = u
            u = u.parent
        t._invalidate(v)
    return list(held.values())


def release_outside_walk(t: Traverser, vertices: list[Vertex], jobid: int) -> None:
    """Undo :func:`plan_outside_walk` for ``jobid`` (``vertices``: what it returned)."""
    for v in vertices:
        t._release(v, jobid)
