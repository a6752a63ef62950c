"""The release walk (Fluxion's dfu_impl remove): cancel and partial cancel of a job.

Design: a cancel takes every span of one job out of the vertices it holds
(``_release``: its schedule planner, x_checker and subtree filter spans, and its tag)
and reports the visits Fluxion's cancel walk makes (``_cancel_visits``). A partial
cancel releases the job's vertices on some ranks, then either recomputes what the
job's ancestors hold (``_rebuild_job``) or, as Fluxion's rank-based remove, takes the
released units out of each ancestor's subtree-filter span (``_ancestor_counts``,
``_partial_cancel_vertex``), in the order Fluxion's hash maps give (``hash_order``).
A without_allocating match is planned, then taken back (``_unplan``). Every release goes
through ``_invalidate``, so the subtree cache and everything that
watches it hear of each vertex changed (``dfu_impl.SubtreeCache``). A mixin of
``dfu.Traverser``, over ``DfuUpdate``'s span helpers.
"""

from __future__ import annotations

import os

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.planner.planner import PlannerError
from fluxnode.scheduler.traversers.dfu_impl import UNSET_WEIGHT, Emit, Job
from fluxnode.scheduler.traversers.dfu_update import DfuUpdate
from fluxnode.scheduler.traversers.hash_order import UnorderedKeys
from fluxnode.scheduler.traversers.match_errors import TraverserError


class RemoveError(TraverserError):
    """A rank-based partial cancel failed in Fluxion's remove; the message is its
    ``err_message`` (resource-query's partial-cancel prints it to stdout)."""


class _CancelVertexError(TraverserError):
    """dfu_impl_t::cancel_vertex failed on a vertex in a partial cancel: its message
    (the failing step's words, ending in a newline) and the vertex's name."""

    def __init__(self, vertex: str, message: str) -> None:
        super().__init__(message)
        self.vertex = vertex


class DfuCancel(DfuUpdate):
    """Cancel and partial cancel (see the module)."""

    def cancel(self, jobid: int) -> tuple[int, int]:
        """Release every resource of ``jobid``; returns (preorder, postorder) visit counts."""
        job = self.jobs.pop(jobid, None)
        if job is None:
            raise TraverserError(f"nonexistent job {jobid}")
        root = self.g.root
        pre, post = self._cancel_visits(jobid, job)
        held = list(job.vertices.values())
        if jobid in self._torn:
            self._torn.discard(jobid)
            held = self._reached(jobid, held)
        for v in held:
            self._release(v, jobid)
        if jobid in root.tags:
            self._release(root, jobid)
        self.total_preorder, self.total_postorder = pre, post
        return pre, post

    # Jobs a rank-based release took tags from in the middle of what they hold (see
    # _reached); a set of the instance's own once there is one
    _torn: set[int] = frozenset()  # type: ignore[assignment]

    def _tear(self, jobids) -> None:
        if type(self._torn) is not set:
            self._torn = set()
        self._torn.update(jobids)

    def _reached(self, jobid: int, held: list[Vertex]) -> list[Vertex]:
        """The vertices of ``held`` Fluxion's cancel walk (mod_dfv) gets to: it goes down
        from the root through the vertices tagged with the job and stops at one without
        the tag. After a rank-based release cleared a vertex (its tags gone) or took the
        tag from an ancestor, what the job holds below it is never reached: its spans
        stay in their planners for good, as in Fluxion."""
        reach: dict[int, bool] = {}

        def reached(v: Vertex) -> bool:
            ok = reach.get(v.uniq_id)
            if ok is None:
                ok = jobid in v.tags and (v.parent is None or reached(v.parent))
                reach[v.uniq_id] = ok
            return ok

        return [v for v in held if reached(v)]

    def partial_cancel(self, jobid: int, ranks: list[int], by_counts: bool = False) -> bool:
        """Release the part of ``jobid`` on ``ranks``; True when nothing of the job is left.

        By default the job's ancestors keep it while any of its vertices remain below them.
        ``by_counts`` follows Fluxion's rank-based partial cancel instead (resource-query's
        ``partial-cancel ... rv1exec``, see _ancestor_counts)."""
        job = self.jobs.get(jobid)
        if job is None:
            raise TraverserError(f"nonexistent job {jobid}")
        # Fluxion's remove zeroes its visit counts first and reports no traversal (it
        # releases by rank index), even when it then fails (a rank the job holds nothing on)
        self.total_preorder = self.total_postorder = 0
        rankset = set(ranks)
        counts: dict[int, dict[str, int]] = {}
        rank_root: dict[int, Vertex] = {}
        # Fluxion's remove goes through the R's ranks in its std::unordered_set's order
        # (hash_order) and stops at a rank the graph lacks, the ranks before it released
        # and the ancestors untouched (its words)
        for r in UnorderedKeys(sorted(rankset)) if by_counts else sorted(rankset):
            if by_counts and r not in self.g.by_rank:
                raise RemoveError(f"remove{r} not found in by_rank map.")
            for v in self.g.by_rank.get(r, []):
                if jobid in v.tags:
                    sid = v.spans.get(jobid) if v.spans else None
                    if sid is not None:
                        c = counts.setdefault(r, {})
                        c[v.type] = c.get(v.type, 0) + v.schedule.span(sid).planned
                    self._release(v, jobid)
                    job.vertices.pop(v.uniq_id, None)
                top = rank_root.get(r)
                if top is None or len(v.path) < len(top.path):
                    rank_root[r] = v
        if not by_counts:
            self._rebuild_job(jobid, job)
        else:
            self._tear((jobid,))
            if not rank_root:
                raise RemoveError("remove: rank_to_root is empty.")
            ups = self._ancestor_counts(counts, rank_root)
            if jobid in self.g.root.tags:
                try:
                    for v, acc in ups:
                        self._partial_cancel_vertex(v, jobid, acc)
                except _CancelVertexError as exc:  # remove's words after the vertex's
                    raise RemoveError(
                        f"{exc}remove: cancel_vertex failed\n.{exc.vertex}.") from None
        if jobid not in self.g.root.tags:
            self.jobs.pop(jobid, None)
            return True
        return False

    def remove_ranks(self, ranks: list[int]) -> tuple[set[int], str | None]:
        """Release everything held on ``ranks``, as Fluxion's rank-based remove
        (dfu_impl_t::remove(root, ranks), resource-query's ``remove RANKS false`` before it
        removes their subgraphs): each rank in turn has every vertex cleared
        (``_clear_vertex``), counting the units allocated on it per type; a rank the
        graph lacks stops it there (its words), the ranks before cleared and nothing
        else done. Then every job held on those vertices gives back, from its span in
        each ancestor's subtree filter, all the units counted on every rank below that
        ancestor, whoever's they were (_ancestor_counts), ancestor by ancestor and job
        by job in the order Fluxion's hash maps give them (hash_order), until one
        fails. Returns the jobs the root no longer holds and the error (None: none)."""
        self.total_preorder = self.total_postorder = 0
        counts: dict[int, dict[str, int]] = {}
        rank_root: dict[int, Vertex] = {}
        jobids = UnorderedKeys()
        for r in sorted(set(ranks)):
            vs = self.g.by_rank.get(r)
            if vs is None:
                return set(), f"remove: {r} not found in by_rank map."
            c = counts.setdefault(r, {})
            for v in vs:
                for j in sorted(v.tags):  # idata.tags is a std::map
                    jobids.add(j)
                c[v.type] = c.get(v.type, 0) + self._clear_vertex(v)
                top = rank_root.get(r)
                if top is None or len(v.path) < len(top.path):
                    rank_root[r] = v
        if not len(jobids):
            return set(), None
        self._tear(jobids)
        held = {j for j in jobids if j in self.jobs}
        # each ancestor's map of jobs is filled in the set's order, and gives them back
        # in its own
        per_ancestor = list(UnorderedKeys(list(jobids)))
        try:
            for v, acc in self._ancestor_counts(counts, rank_root):
                for jobid in per_ancestor:
                    self._partial_cancel_vertex(v, jobid, acc)
        except _CancelVertexError as exc:
            error = f"{exc}remove: {exc.vertex}: cancel_vertex failed."
        else:
            error = None
        gone = {j for j in held if j not in self.g.root.tags}
        for j in gone:
            self.jobs.pop(j, None)
        return gone, error

    def _clear_vertex(self, v: Vertex) -> int:
        """dfu_impl_t::clear_vertex: ``v`` holds no job any more (its schedule and subtree
        planners reset, its tags and span maps emptied); returns the units its
        allocations held. Its x_checker keeps its spans (Fluxion clears the map of them,
        not the planner), so until ``v`` goes it stays held where they lie."""
        self._invalidate(v)
        jobs = set(v.tags) | set(v.xspans) | set(v.agspans) | set(v.spans)
        held = 0
        for jobid in list(v.spans):
            sid = v.spans[jobid]
            if jobid in v.allocations:
                held += v.schedule.span(sid).planned
            v.drop_units(jobid)
        v.schedule = None  # planner_reset: made afresh on first use
        for jobid in jobs:
            v.drop_hold(jobid)
            v.drop_agspan(jobid)
            job = self.jobs.get(jobid)
            if job is not None:
                job.vertices.pop(v.uniq_id, None)
        if v.subplan is not None:
            v.subplan = None  # planner_multi_reset: made afresh from its totals
        return held

    def _ancestor_counts(self, counts: dict[int, dict[str, int]],
                         rank_root: dict[int, Vertex]) -> list[tuple[Vertex, dict[str, int]]]:
        """The ancestors' part of dfu_impl_t::remove, after the ranks' vertices were
        released: the units counted on each rank (``counts``) added up for every
        ancestor of the rank's subgraph root (``rank_root``, in the order Fluxion first
        set each rank's root), ancestors in the order of Fluxion's unordered_map of them
        (hash_order). A rank with no counts stops it (its words)."""
        order = list(UnorderedKeys(rank_root))
        for r in order:
            if r not in counts:
                # a named rank where the job planned nothing (or whose vertices carry no
                # rank): Fluxion's remove stops here with an error, the ancestors untouched
                raise RemoveError(f"remove: {r} not found in rank_to_counts.")
        keys = UnorderedKeys()
        up: dict[int, tuple[Vertex, dict[str, int]]] = {}
        for r in order:
            c = counts[r]
            p = rank_root[r].parent
            while p is not None:
                keys.add(p.uniq_id)
                _v, acc = up.setdefault(p.uniq_id, (p, {}))
                for t, n in c.items():
                    acc[t] = acc.get(t, 0) + n
                p = p.parent
        return [up[uid] for uid in keys]

    def _partial_cancel_vertex(self, v: Vertex, jobid: int, acc: dict[str, int]) -> None:
        """dfu_impl_t::cancel_vertex for a partial cancel: ``v`` gives back ``acc`` (units
        per type; its filter's other types give back 0) from ``jobid``'s span in its
        subtree filter (mod_agfilter); it drops the job's tag when that empties the
        span, and the job's x_checker span in any case. A vertex with no subtree filter,
        no span of the job or no tag of it gives back nothing. Then its own schedule
        (mod_plan): a span the job holds there allocated stays; one it holds reserved
        is forgotten, left in the planner, and the call fails (Fluxion's partial
        cancel cannot take back a reservation: _CancelVertexError)."""
        sp = v.subplan
        sid = v.agspans.get(jobid) if v.agspans else None
        if sp is not None and sid is not None and jobid in v.tags:
            self._invalidate(v)
            sp = v.subplan = sp.owned()
            try:
                removed = sp.reduce_span(sid, {t: n for t, n in acc.items() if sp.has_type(t)})
            except PlannerError as exc:
                raise _CancelVertexError(
                    v.name, "mod_agfilter: planner_multi_reduce_span returned -1.\n"
                    f"{v.name} {os.strerror(exc.errno)}.\n") from None
            if removed:
                v.drop_agspan(jobid)
                job = self.jobs.get(jobid)
                if job is not None:
                    job.vertices.pop(v.uniq_id, None)
                xsid = v.drop_hold(jobid)
            else:  # the tag stays, the x_checker span goes (a leaf never has a subplan)
                xsid = v.drop_xspan(jobid)
            if xsid is not None:
                v.x_checker = v.x_checker.without_span(xsid)
        if jobid in v.spans and jobid not in v.allocations:
            # mod_plan erases the job's reservation, not its span in the planner, and
            # fails; errno is what the command left (0 after idset_decode)
            self._invalidate(v)
            v.drop_units(jobid)
            raise _CancelVertexError(
                v.name, "mod_plan: traverser tried to remove schedule and span after "
                f"vtx_cancel during partial cancel:\n{v.name} {os.strerror(0)}.\n")

    def unplan_units_but(self, jobid: int, sel: list[Emit], keep: set[int]) -> None:
        """Take ``jobid``'s schedule spans off the vertices of ``sel`` but ``keep``
        (uniq_ids): a reader's update plans the vertices it reads itself and Fluxion's
        update walk, run after it with ``full`` false, plans none (upd_plan), so a vertex
        the walk takes beyond them (below a node a node-exclusive policy takes whole) is
        tagged and emitted with no span of the job in its schedule."""
        for e in sel:
            v = e.vertex
            if v.uniq_id not in keep and jobid in v.spans:
                self._invalidate(v)
                sid = v.drop_units(jobid)
                v.schedule = v.schedule.without_span(sid)

    def _unplan(self, jobid: int, sel: list[Emit], weighed: dict[int, int] | None) -> None:
        """Take back what the update of a without_allocating match planned: Fluxion's
        update under AT_NO_ALLOC plans nothing but still re-weighs the edges it goes
        through (first-match policies) by what is free without the job, and leaves an
        edge as it was where upd_by_outedges skips it (nothing free and no span below):
        each edge into an emitted vertex gets that weight, or back the one it had
        (``weighed``, the weights before the update)."""
        visits = self.total_preorder, self.total_postorder
        self.cancel(jobid)
        self.total_preorder, self.total_postorder = visits
        if weighed is None:
            return
        moves: dict[int, dict[int, tuple[int, int]]] = {}
        for e in sel:
            v = e.vertex
            if v.children and v.parent is not None:
                w = self._edge_weight(v)
                if w is None:
                    w = weighed.get(v.uniq_id, UNSET_WEIGHT)
                self._set_weight(v.parent, v, w, moves)
        self._move_weighed(moves)

    def _cancel_visits(self, jobid: int, job: Job) -> tuple[int, int]:
        """The (preorder, postorder) visits of Fluxion's cancel walk for ``jobid``.

        Fluxion walks down from the root through tagged vertices, visiting every
        child of each; count those visits without walking untagged siblings."""
        root = self.g.root
        pre = 1
        post = 0
        if jobid in root.tags:
            reached = [root]
            seen = {root.uniq_id}
            while reached:
                u = reached.pop()
                post += 1
                pre += len(u.children)
                for c in u.children if len(u.children) < 64 else ():
                    if jobid in c.tags and c.uniq_id not in seen:
                        seen.add(c.uniq_id)
                        reached.append(c)
                if len(u.children) >= 64:
                    for v in job.vertices.values():
                        if v.parent is u and v.uniq_id not in seen:
                            seen.add(v.uniq_id)
                            reached.append(v)
        return pre, post

    def _release(self, u: Vertex, jobid: int) -> None:
        self._invalidate(u)
        # a shared container or planner (the empties, a LeafHold, Planner.share) is
        # never changed: drop_hold/drop_units and without_span replace it
        sid = u.drop_hold(jobid)
        if sid is not None:
            u.x_checker = u.x_checker.without_span(sid)
        self._ag_drop(u, jobid)
        sid = u.drop_units(jobid)
        if sid is not None:
            u.schedule = u.schedule.without_span(sid)

    def _rebuild_job(self, jobid: int, job: Job) -> None:
        """Recompute a job's subtree aggregates after part of it was released."""

        def rec(u: Vertex) -> tuple[int, dict[str, int]]:
            n = 0
            agg: dict[str, int] = {}
            for c in u.children:
                if jobid not in c.tags:
                    continue
                sub, cagg = rec(c)
                n += sub
                for t, k in cagg.items():
                    agg[t] = agg.get(t, 0) + k
            own = u.spans.get(jobid)
            if own is not None:
                n += 1
            if n == 0:
                self._release(u, jobid)
                job.vertices.pop(u.uniq_id, None)
                return 0, {}
            if agg:
                self._ag_put(u, jobid, job.at, job.at + job.duration, agg)
            else:
                self._ag_drop(u, jobid)
            up = dict(agg)
            if u.type in self.prune_types and own is not None:
                up[u.type] = up.get(u.type, 0) + u.size
            return n, up

        if jobid in self.g.root.tags:
            try:
                rec(self.g.root)
            finally:
                rec = None  # noqa: F841  (break the closure's reference cycle)
