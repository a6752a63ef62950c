"""The update walk (Fluxion's dfu_impl_update.cpp): record a selection and emit it.

``_update`` applies what the select walk marked: ``update_walk.UpdateWalk`` walks the
marked edges (and whole subtrees below an exclusive vertex), adds the job's spans to
each vertex's schedule planner, x_checker and subtree-filter planner (what it hands
them is ``job_spans``'s), tags the vertex, and emits it in post order (the selection
writers print). For the first-match policies it also re-weighs the edge into each
updated vertex (``_edge_weight``), which orders the next match's children; the
re-weighed children are moved in their parents' orders at the end
(``_move_weighed``). Releasing a job is ``dfu_cancel``'s; both report each vertex they
change through ``_invalidate`` or the subtree cache's ``pop``.
"""

from __future__ import annotations

import bisect

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.planner.planner_multi import PlannerMulti
from fluxnode.scheduler.traversers.dfu_impl import (
    INF,
    DfuImpl,
    Emit,
    JobMeta,
    Selection,
    note_move,
)
from fluxnode.scheduler.traversers.job_spans import JobSpans
from fluxnode.scheduler.traversers.update_walk import UpdateWalk

# flux-sched's resource/schema/data_std.cpp interns these at start-up, in this order
TYPES_INTERNED_FIRST = ["cluster", "core", "socket", "gpu", "node", "rack", "slot", "xor_slot",
                        "ssd", "storage_node"]


class DfuUpdate(DfuImpl):
    """Apply, emit and release what a job holds in the planners."""

    def _ag_put(self, u: Vertex, jobid: int, at: int, end: int, counts: dict[str, int],
                spans: JobSpans | None = None) -> None:
        """Plan ``counts`` units below ``u`` for ``jobid`` (replacing its previous span).
        A vertex with no subtree filter yet gets the one ``spans`` shares among the
        job's vertices with the same totals and counts (see JobSpans.subplan), but the
        root: the reservation search iterates the root's filter, which a shared one
        refuses (PlannerMulti.avail_time_first)."""
        self._ag_drop(u, jobid)
        sp = u.subplan
        if sp is None:
            totals = self._totals.get(u.uniq_id, {})
            if spans is not None and u.parent is not None:
                u.subplan = spans.subplan(totals, counts)
                u.set_agspan(jobid, 0)
                return
            u.subplan, sid = PlannerMulti.holding(0, INF, totals, at, end - at, counts)
            u.set_agspan(jobid, sid)
            return
        sp = u.subplan = sp.owned()
        u.set_agspan(jobid, sp.add_span(at, end - at, counts))

    def _ag_drop(self, u: Vertex, jobid: int) -> None:
        sid = u.drop_agspan(jobid) if u.agspans else None
        if sid is not None:
            u.subplan = u.subplan.without_span(sid)

    def _invalidate(self, u: Vertex | None) -> None:
        """``u``'s state changed: forget the cached outcomes of it and its ancestors."""
        cache = self._subtree_cache
        while u is not None:
            cache.pop(u.uniq_id, None)
            u = u.parent

    def _set_weight(self, via: Vertex, v: Vertex, w: int,
                    moves: dict[int, dict[int, tuple[int, int]]]) -> None:
        """Weigh the edge ``via`` -> ``v``; ``v``'s move in ``via``'s child order waits in
        ``moves`` for ``_move_weighed`` at the end of the update. Weights are Fluxion's,
        per edge: a vertex with a second parent (ASSOCIATE_IN) has its own weight under
        each (``_weights_via``), its containment parent's in ``_weights``."""
        if v.parent is via:  # (edge_weight_of in line: once per vertex an update takes)
            old = self._weights.get(v.uniq_id, 0)
            self._weights[v.uniq_id] = w
        else:
            old = self.edge_weight_of(via, v)
            self._weights_via[(via.uniq_id, v.uniq_id)] = w
        note_move(self._order, moves, via.uniq_id, v.uniq_id, old, w)

    def _move_weighed(self, moves: dict[int, dict[int, tuple[int, int]]]) -> None:
        """Move the children an update re-weighed in their parents' sorted child orders:
        a few by bisection, many (a gang's 1,000 nodes under the cluster) in one pass and
        one sort of the kept order and the moved entries, not one list insertion each
        (each moved ~5,000 entries on 5,000 nodes: a tenth of a first-match gang)."""
        for via_uid, changed in moves.items():
            order = self._order.get(via_uid)
            if order is None:
                continue
            if len(changed) <= 8:
                for vid, (old, w) in changed.items():
                    pos = bisect.bisect_left(order, (-old, -vid))
                    if pos < len(order) and order[pos][0] == -old and order[pos][1] == -vid:
                        item = order.pop(pos)
                        bisect.insort(order, (-w, item[1], item[2]))
                    else:  # not where expected (graph changed): rebuild lazily
                        self._order.pop(via_uid, None)
                        break
                continue
            kept, at = [], {}
            for item in order:
                if -item[1] in changed:
                    at[-item[1]] = item[2]
                else:
                    kept.append(item)
            if len(at) != len(changed):  # one is missing (graph changed): rebuild lazily
                self._order.pop(via_uid, None)
                continue
            kept.extend((-changed[vid][1], -vid, i) for vid, i in at.items())
            kept.sort()
            self._order[via_uid] = kept

    def _update(self, m: JobMeta, needs: int, excl: bool) -> list[Emit]:
        """Apply the selection the select walk marked (see update_walk.UpdateWalk)."""
        walk = UpdateWalk(self, m)
        try:
            walk.walk(self.g.root, needs, excl, 1 + self.level_leak)
        finally:
            self._move_weighed(walk.moves)
        # Fluxion's traversal level (m_trav_level) is not stepped back for a vertex whose
        # subtree filter refused the job: what is emitted after it, in this walk and in
        # every later one, is one level deeper
        for pos, _ghost in walk.unplanned:
            for e in walk.out[pos:]:
                e.level += 1
        self.level_leak += len(walk.unplanned)
        if walk.unplanned:
            return _with_ghosts(walk.out, walk.unplanned)
        return walk.out

    def _edge_weight(self, u: Vertex) -> int | None:
        """Fluxion's upd_by_outedges: the new weight of the edge into ``u`` after an
        update through it, the free units (now) of the LAST type its subtree filter
        tracks (the scarcest, by Fluxion's heuristic); None leaves the weight as it is.
        Cancels never change weights (Fluxion's cancel does not touch by_outedges).

        "Last" is in the order of Fluxion's multi-planner, a std::map keyed by interned
        resource types, which order by when each was first interned: the types
        flux-sched names in its sources (``TYPES_INTERNED_FIRST``), then the graph's in
        the order the reader met them, then the rest (named only by a filter)."""
        t = self._last_type.get(u.type, "")
        if t == "":
            types = self.subplan_types(u)
            seen = list(self.g.by_type)
            order = {x: i for i, x in enumerate(
                TYPES_INTERNED_FIRST + [x for x in seen if x not in TYPES_INTERNED_FIRST])}
            t = self._last_type[u.type] = max(
                types, key=lambda x: (order.get(x, len(order)), x)) if types else None
        if t is None:
            return None
        total = self._totals.get(u.uniq_id, {}).get(t, 0)
        sp = u.subplan
        nspans = sp.span_count if sp is not None else 0
        if sp is None or not sp.has_type(t):
            avail = total
        else:
            avail = sp.planner(t).avail_resources_at(0)
        if avail == 0 and nspans == 0:
            return None
        return avail


def _with_ghosts(out: list[Emit], unplanned: list[tuple[int, Emit]]) -> Selection:
    """The selection and the vertices the walk tagged but did not emit (Selection's
    ``ghosts``). Fluxion's parent loop still writes the edges into and out of such a
    vertex (upd_dfv emits an edge for every child that took something), so the JGF
    writer needs them. A ghost's level is its children's, as they stand after the
    shifts above (an earlier ghost's shift moved them too, when its subtree came first)."""
    ghosts = []
    for k, (pos, g) in enumerate(unplanned):
        ghosts.append((pos, Emit(g.vertex, g.needs, g.exclusive, g.level + 1 + k)))
    sel = Selection(out)
    sel.ghosts = ghosts
    return sel
