"""The update walk (Fluxion's dfu_impl_update.cpp): record a selection, emit it, undo it.

``_update`` walks the edges the selection walk marked (and whole subtrees below
an exclusive vertex), adds the job's spans to each vertex's schedule planner,
x_checker and subtree-filter planner, tags the vertex, and emits it in post
order (the selection writers print). For the first-match policies it also
re-weighs the edge into each updated vertex (``_edge_weight``), which orders
the next match's children. ``_release`` takes one job's spans out of one
vertex; cancels, partial cancels and graph removal use it, and
``_rebuild_job`` recomputes a job's subtree counts after part of it went.
"""

from __future__ import annotations

import bisect

from fluxnode.scheduler.graph.resource_graph import InnerHold, LeafHold, Vertex
from fluxnode.scheduler.planner.planner import Planner
from fluxnode.scheduler.planner.planner_multi import PlannerMulti
from fluxnode.scheduler.traversers.dfu_impl import (
    INF,
    X_CHECKER_NJOBS,
    DfuImpl,
    Emit,
    Job,
    JobMeta,
    free_during,
    note_move,
)
from fluxnode.scheduler.traversers.update_recipes import Recipe, apply_recipe
from fluxnode.scheduler.traversers.whole_leaves import take_fresh_leaves

# flux-sched's resource/schema/data_std.cpp interns these at start-up, in this order
TYPES_INTERNED_FIRST = ["cluster", "core", "socket", "gpu", "node", "rack", "slot", "xor_slot",
                        "ssd", "storage_node"]


_UNWEIGHED = object()  # an _InnerKit whose edge weight is not known yet
# the marked edges from which an update walk shares kits among its inner vertices
# (see _update): a 1,000-node gang marks 3,000; a single-core match 3 to 4, and kits
# made for one node and one socket cost it 9% more instructions (first 0.779 ->
# 0.851 M)
KIT_MIN_MARKS = 16
# the recipes kept for one key (see _update): a gang over two kinds of node keeps two
RECIPES_PER_KEY = 4
_NO_TOTALS: dict[str, int] = {}  # read-only: the totals of a vertex with none


def reported(u: Vertex, agg: dict[str, int], x: bool, needs: int,
             prune_types: set[str]) -> dict[str, int]:
    """What the update walk reports to a taken vertex's parent: the units of each
    tracked type below it (``agg``), plus, when its own type is tracked, its size
    when taken exclusively (``x``), else its size less ``needs``."""
    up = dict(agg)
    if u.type in prune_types:
        up[u.type] = up.get(u.type, 0) + (u.size if x else u.size - needs)
    return up


class _InnerKit:
    """What every fresh inner vertex the update walk takes the same way gets (see
    _JobSpans.inner_kit): its planners and containers, all shared, what it reports to
    its parent (``up``, read-only) and, once worked out, its edge weight."""

    __slots__ = ("schedule", "x_checker", "subplan", "held", "up", "weight")

    def __init__(self, schedule: Planner | None, x_checker: Planner,
                 subplan: PlannerMulti | None, held: InnerHold, up: dict[str, int]) -> None:
        self.schedule = schedule
        self.x_checker = x_checker
        self.subplan = subplan
        self.held = held
        self.up = up
        self.weight = _UNWEIGHED


class SpanPool:
    """The shared planners and subtree filters of update walks, kept for later walks.

    What _JobSpans hands out as shared is read-only and holds one span, the walk's
    window, and nothing of its job (the job's span ids and holds are on the vertices):
    two jobs with the same window and needs would make equal ones. Kept here per window,
    the next job takes them as they are instead of making them again: a single-core
    ``firstnodex`` match takes a whole fresh node (its sockets, cores, GPUs and memory),
    and made its shared planners and filters anew each time (15% of its time). A
    window no longer used costs only memory: past WINDOWS windows, or ENTRIES kept
    planners or filters in one, that part starts over."""

    WINDOWS = 64
    ENTRIES = 4096

    __slots__ = ("_windows",)

    def __init__(self) -> None:
        self._windows: dict[tuple[int, int], tuple[dict, dict]] = {}

    def window(self, at: int, duration: int) -> tuple[dict, dict]:
        """(schedule planners and x_checker by (needs, size, type), subtree filters by
        (totals, counts)) kept for walks of the window [at, at + duration)."""
        kept = self._windows.get((at, duration))
        if kept is None:
            if len(self._windows) >= self.WINDOWS:
                self._windows.clear()
            kept = self._windows[(at, duration)] = ({}, {})
        for part in kept:
            if len(part) >= self.ENTRIES:
                part.clear()
        return kept


# the key of the walk's x_checker among its schedule planners: it is the schedule
# planner _JobSpans._fresh makes for a vertex of size X_CHECKER_NJOBS taking 1 unit
_X_KEY = (1, X_CHECKER_NJOBS, "x_checker")


class _JobSpans:
    """How one update walk plans its job's spans on the vertices it takes.

    A vertex with no planner yet (fresh) that no other job can come to while this one
    holds it (taken whole, or a leaf) gets a shared planner (Planner.share) holding
    just this job's span, span id 1: one schedule planner per (needs, size, type) and
    one x_checker for the whole walk, where a private planner each would be made (a
    whole node: 2 for its 64 cores instead of 128), and kept in the traverser's
    SpanPool for the next walks with the same window. A fresh leaf of a subtree taken
    whole also gets the job's shared containers (LeafHold). A vertex that already has
    a planner gets its own copy of a shared one before the span is added
    (Planner.owned), and a cancel drops a shared one (Planner.without_span)."""

    __slots__ = ("jobid", "at", "duration", "allocating", "kits", "inner_kits", "_by_needs",
                 "_held", "_subplans", "_inner_held")

    def __init__(self, jobid: int, at: int, duration: int, allocating: bool,
                 pool: SpanPool) -> None:
        self.jobid = jobid
        self.at = at
        self.duration = duration
        self.allocating = allocating
        by_needs, subplans = pool.window(at, duration)
        self._by_needs: dict[tuple[int, int, str], Planner] = by_needs
        self._held: LeafHold | None = None
        self.kits: dict[tuple[int, int, str], tuple[Planner, Planner, LeafHold]] = {}
        self._subplans: dict[tuple, PlannerMulti] = subplans
        self.inner_kits: dict[tuple, _InnerKit] = {}
        self._inner_held: dict[tuple[bool, bool], InnerHold] = {}

    def _fresh(self, v: Vertex, needs: int) -> Planner:
        """A new schedule planner for ``v`` holding the job's ``needs`` units."""
        return Planner.holding(0, INF, v.size, v.type, self.at, self.duration, needs)

    def _fresh_x(self) -> Planner:
        """A new x_checker holding the job."""
        return Planner.holding(0, INF, X_CHECKER_NJOBS, "x_checker", self.at, self.duration, 1)

    def _shared(self, v: Vertex, needs: int) -> Planner:
        key = (needs, v.size, v.type)
        p = self._by_needs.get(key)
        if p is None:
            p = self._by_needs[key] = self._fresh(v, needs).share()
        return p

    def _shared_x(self) -> Planner:
        p = self._by_needs.get(_X_KEY)
        if p is None:
            p = self._by_needs[_X_KEY] = self._fresh_x().share()
        return p

    def units(self, v: Vertex, needs: int) -> None:
        """The job takes ``needs`` of ``v``'s own units during the window (its schedule).
        A fresh vertex it takes whole shares the planner: no other job can take units
        of it before this one ends, so it is dropped, not copied. One it takes part of
        gets its own (the next job there would copy a shared one at once)."""
        p = v.schedule
        if p is None:
            v.schedule = self._shared(v, needs) if needs == v.size else self._fresh(v, needs)
            v.hold_units(self.jobid, 1, self.allocating)
        else:
            p = v.schedule = p.owned()
            v.hold_units(self.jobid, p.add_span(self.at, self.duration, needs),
                         self.allocating)

    def x(self, v: Vertex, whole: bool = False) -> None:
        """The job holds something at or below ``v`` during the window (its x_checker).
        A fresh leaf shares the job's, and so does a fresh vertex the job takes whole
        (``whole``: in a subtree taken whole, the sockets of an exclusive node, or held
        exclusively with all its units, a gang's socket): no other job comes to it while
        this one holds it. Another vertex with children gets its own, since other jobs
        come to it while this one holds a part (a node of single-core jobs)."""
        p = v.x_checker
        if p is None:
            v.x_checker = self._fresh_x() if v.children and not whole else self._shared_x()
            v.hold(self.jobid, 1)
        else:
            p = v.x_checker = p.owned()
            v.hold(self.jobid, p.add_span(self.at, self.duration, 1))

    def subplan(self, totals: dict[str, int], counts: dict[str, int]) -> PlannerMulti:
        """A subtree filter with ``totals`` holding the job's ``counts`` (span id 0) for
        a vertex that has none yet, shared by every such vertex of this walk (and of
        later walks with its window, SpanPool) with the same totals and counts
        (PlannerMulti.share): a gang's 1,000 nodes hold one, not
        one each (making one is a tenth of a 1,000-node first-match gang). Unlike a
        schedule planner, other jobs do come to a vertex whose subtree this one holds
        part of; the first to change its filter copies it (PlannerMulti.owned), which
        costs what making it here would have, and only for the vertices it reaches."""
        key = (tuple(totals.items()), tuple(counts.items()))
        sp = self._subplans.get(key)
        if sp is None:
            sp = self._subplans[key] = PlannerMulti.holding(
                0, INF, totals, self.at, self.duration, counts)[0].share()
        return sp

    def inner_kit(self, u: Vertex, needs: int, x: bool, agg: dict[str, int],
                  totals: dict[str, int], prune_types: set[str]) -> _InnerKit:
        """What a fresh inner vertex gets when the job takes it as ``u``: ``needs`` of
        its own units when ``x``, and ``agg`` units below it. The update walk keeps
        kits in ``inner_kits`` by what decides them (type, size, x, needs, whether
        taken whole, the totals dict, agg) and looks there first: a 1,000-node gang
        makes two, where each node and socket made two planners, a multi-planner and
        five containers of its own. Only a walk that marked KIT_MIN_MARKS edges or more
        uses kits (see _update): a single-core match takes a node and a socket or two,
        and kits made for them cost it more than they saved.
        Everything is shared as the leaves' kits are: the first job to change a planner
        or container of one of these vertices copies it (Planner.owned,
        PlannerMulti.owned, Vertex.hold...), a cancel drops it. The x_checker is the
        job's one shared x_checker even where other jobs will come (a node of a gang):
        the first of them copies it, as it would have added a span to a private one."""
        schedule = self._shared(u, needs) if x else None
        subplan = self.subplan(totals, agg) if agg else None
        hkey = (x, bool(agg))
        held = self._inner_held.get(hkey)
        if held is None:
            held = self._inner_held[hkey] = InnerHold(self.jobid, self.allocating, x,
                                                      bool(agg))
        return _InnerKit(schedule, self._shared_x(), subplan, held,
                         reported(u, agg, x, needs, prune_types))

    def leaf_kit(self, c: Vertex, needs: int) -> tuple[Planner, Planner, LeafHold]:
        """What a fresh leaf of a subtree the job takes whole gets, ``needs`` of its
        units: (schedule planner, x_checker, containers), all shared. The update walk
        keeps them in ``kits`` by (needs, size, type) and looks there first."""
        held = self._held
        if held is None:
            held = self._held = LeafHold(self.jobid, self.allocating)
        kit = self.kits[(needs, c.size, c.type)] = (self._shared(c, needs), self._shared_x(),
                                                     held)
        return kit


class DfuUpdate(DfuImpl):
    """Apply, emit and release what a job holds in the planners."""

    def _ag_put(self, u: Vertex, jobid: int, at: int, end: int, counts: dict[str, int],
                spans: _JobSpans | None = None) -> None:
        """Plan ``counts`` units below ``u`` for ``jobid`` (replacing its previous span).
        A vertex with no subtree filter yet gets the one ``spans`` shares among the
        job's vertices with the same totals and counts (see _JobSpans.subplan), but the
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
        out: list[Emit] = []
        marks = self._marks
        job = self.jobs[m.jobid]
        end = m.at + m.duration
        xtypes = self.policy.exclusive_types | self._req_xtypes
        pxtypes = self.policy.exclusive_types
        stop_on_1 = self.policy.stop_on_1
        jobid, at, duration = m.jobid, m.at, m.duration
        allocating = m.alloc == "alloc"
        job_vertices = job.vertices
        subtree_cache = self._subtree_cache
        prune_types = self.prune_types
        seen: set[int] = set()
        marked: dict[int, list[Vertex]] = {}
        spans = _JobSpans(jobid, at, duration, allocating, self._span_pool)
        leaf_kit, kits, inner_kits = spans.leaf_kit, spans.kits, spans.inner_kits
        # no vertex can be met twice (see the walk below)
        tree = self.g.shared_children == 0
        # a cache whose pops are tracked (dfu_fast's, for its root indexes) hears of every
        # vertex changed; an untracked one only needs the vertices it holds popped
        tracked = bool(getattr(subtree_cache, "sinks", None))
        # a walk that takes many fresh inner vertices of a kind shares what they and
        # their subtree filters get, kind by kind (_JobSpans.inner_kit, subplan): a big
        # walk (a gang), or one that takes a vertex with children whole (the sockets of
        # an exclusive node); a single-core match takes a node and a socket one by one
        big = len(self._mark_edges) >= KIT_MIN_MARKS
        sharing = big or not xtypes <= self._leaf_types
        kit_spans = spans if sharing else None
        for e_parent, e_child in self._mark_edges:
            marked.setdefault(e_parent.uniq_id, []).append(e_child)
        # such a walk also keeps what it did below a vertex it took as a recipe, for
        # the next one entered the same way (see update_recipes): a key's first vertex
        # is walked, its second walked and kept, the others take a recipe that fits
        # (0: none can be kept for that key). Only a big walk (a gang) keeps recipes: a
        # single-core whole-node match would keep its second socket's for nothing
        # (recording it doubled the match's instructions)
        recipes: dict[tuple, int | list[Recipe]] | None = {} if tree and big else None
        totals_of = self._totals
        weights = self._weights if stop_on_1 else None
        orders = self._order

        def upd(u: Vertex, needs: int, x: bool, level: int, inherited: bool = False,
                via: Vertex | None = None) -> tuple[int, dict[str, int]]:
            n = 0
            agg: dict[str, int] = {}
            if not tree:  # in a tree no vertex is met twice
                seen.add(u.uniq_id)
            if u.type in pxtypes:
                x = True
            shadow = x and (inherited or u.type in xtypes)
            if shadow:
                kids = u.children
            else:
                kids = marked.get(u.uniq_id, ())
                if len(kids) > 1:
                    pos = {id(c): i for i, c in enumerate(u.children)} if len(kids) > 8 else None
                    kids = sorted(kids, key=(lambda c: pos[id(c)]) if pos else u.children.index)
            uid = u.uniq_id
            # in a subtree taken whole (shadow) a child the walk did not mark is taken
            # with all it has free; in a tree no vertex is met twice, so the seen set
            # is left alone, and the marks are read only when the walk marked a child
            whole = shadow and tree
            some_marked = whole and uid in marked
            # in a tree, runs of fresh leaves taken whole go to take_fresh_leaves
            # (compiled): the same as the leaf branch below, ~70 leaves per
            # node-exclusive match, a core per node of a gang
            leaf_marks = marks if some_marked or not shadow else None
            nk = len(kids)
            i = 0
            while i < nk:
                if tree:
                    i, k = take_fresh_leaves(kids, i, kits, Emit, level + 1, job_vertices, out,
                                             prune_types, agg, leaf_marks, uid, shadow)
                    n += k
                    if i == nk:
                        break
                c = kids[i]
                i += 1
                cid = c.uniq_id
                if whole:
                    mk = marks.get((uid, cid)) if some_marked else None
                elif cid in seen:
                    continue
                else:
                    mk = marks.get((uid, cid))
                if mk is None:
                    # Fluxion's upd_dfv follows every edge below an exclusive type
                    # (modify_traversal), down vertices included: they are taken too
                    if not shadow:
                        continue
                    p = c.schedule
                    cneeds = free_during(p, at, duration) or c.size if p is not None else c.size
                    cx = True
                else:
                    cneeds, cx = mk[0], mk[1] or shadow
                if c.children or not (shadow or (cx and cneeds == c.size)):
                    record = None
                    if recipes is not None and c.children:
                        # recipes by what the walk is entered with and the vertex's kind
                        # (Recipe.fits checks the rest): a node of a gang
                        rkey = (cneeds, cx, shadow, level, c.type, c.size,
                                id(totals_of.get(cid)))
                        got = recipes.get(rkey)
                        if got is None:
                            recipes[rkey] = 1  # the first: walked, nothing kept
                        elif got == 1:
                            record = rkey  # the second: walked, kept as a recipe
                        elif got != 0:
                            for rec in got:
                                if apply_recipe(rec.entries, c, level + 1, Emit, out,
                                                job_vertices, marks, marked, totals_of,
                                                subtree_cache, tracked, weights, orders,
                                                moves):
                                    break
                            else:
                                rec = None
                                if len(got) < RECIPES_PER_KEY:
                                    record = rkey
                            if rec is not None:
                                n += rec.n
                                for t, k in rec.up.items():
                                    agg[t] = agg.get(t, 0) + k
                                continue
                    start = len(out)
                    sub, cagg = upd(c, cneeds, cx, level + 1, shadow, u)
                    if record is not None:
                        rec = Recipe.record(
                            c, out[start:], level + 1, sub, cagg, marks, marked, totals_of,
                            self._edge_weight if stop_on_1 else None) if sub > 0 else None
                        if rec is None:
                            recipes[record] = 0  # none can be kept for this key
                        elif type(recipes[record]) is list:
                            recipes[record].append(rec)
                        else:
                            recipes[record] = [rec]
                    if sub > 0:
                        n += sub
                        for t, k in cagg.items():
                            agg[t] = agg.get(t, 0) + k
                    continue
                # a leaf taken whole: of a subtree taken whole (a core of an exclusive
                # node), or marked with all its units, exclusively (a gang's core): what
                # upd(c, ...) does for it, in line; the node-exclusive policies take ~70
                # of these per single-core match. A leaf is never in the subtree cache
                # (DfuSelect._dom_dfv keeps vertices with children)
                if not whole:
                    seen.add(cid)
                if c.schedule is None and c.x_checker is None and not c.tags:
                    # a fresh leaf: the job's shared planners and containers (see _JobSpans)
                    kit = kits.get((cneeds, c.size, c.type)) or leaf_kit(c, cneeds)
                    c.schedule, c.x_checker, held = kit
                    c.hold_whole(held)
                else:
                    spans.units(c, cneeds)
                    spans.x(c)
                job_vertices[cid] = c
                out.append(Emit(c, cneeds, True, level + 1))
                n += 1
                if c.type in prune_types:
                    agg[c.type] = agg.get(c.type, 0) + c.size
            if x:
                n += 1
            if n > 0:
                if tracked or uid in subtree_cache:
                    subtree_cache.pop(uid, None)
                whole_u = shadow or (x and needs == u.size)
                kit = None
                if (sharing and tree and u.schedule is None and u.x_checker is None
                        and u.subplan is None
                        and not u.tags and u.children and u.parent is not None):
                    # a fresh inner vertex (a node or socket of a gang): the kit of the
                    # walk's vertices taken the same way (see _JobSpans.inner_kit)
                    totals = self._totals.get(uid, _NO_TOTALS)
                    kkey = (u.type, u.size, x, needs, whole_u, id(totals), tuple(agg.items()))
                    kit = inner_kits.get(kkey)
                    if kit is None:
                        kit = inner_kits[kkey] = spans.inner_kit(u, needs, x, agg, totals,
                                                                 prune_types)
                    u.schedule, u.x_checker, u.subplan = kit.schedule, kit.x_checker, \
                        kit.subplan
                    u.hold_inner(kit.held)
                    up = kit.up
                else:
                    if x:
                        spans.units(u, needs)
                    spans.x(u, whole_u)
                    if agg:
                        self._ag_put(u, jobid, at, end, agg, kit_spans)  # keeps no ref to agg
                    up = reported(u, agg, x, needs, prune_types)
                job_vertices[uid] = u
                out.append(Emit(u, needs, x, level))
                if stop_on_1 and u.children and via is not None:
                    if kit is None:
                        w = self._edge_weight(u)
                    else:  # equal for the kit's vertices: worked out once
                        w = kit.weight
                        if w is _UNWEIGHED:
                            w = kit.weight = self._edge_weight(u)
                    if w is not None:
                        self._set_weight(via, u, w, moves)
                return n, up
            return 0, {}

        moves: dict[int, dict[int, tuple[int, int]]] = {}
        try:
            upd(self.g.root, needs, excl, 1)
        finally:
            self._move_weighed(moves)
            # a recursive closure is a reference cycle (function <-> cell) holding all of
            # the above; break it so refcounting frees it (see freeze_job_state)
            upd = None  # noqa: F841
        return out

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

