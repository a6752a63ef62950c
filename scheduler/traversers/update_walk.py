"""The update walk of one match, as an object whose state is named.

Design: ``DfuUpdate._update`` applies a selection: it walks the edges the select walk
marked (and whole subtrees below an exclusive vertex), records the job's spans on each
vertex it takes, emits it in post order and, for the first-match policies, re-weighs
the edge into it. The walk is recursive and its body is the matcher's hottest Python
after the select walk, so it was a closure over some twenty locals of ``_update``.
:class:`UpdateWalk` holds that state as named slots, set once per match
(``__init__``); :meth:`UpdateWalk.walk` is the recursion. Each call binds the slots it
reads in its loop to locals first (one attribute read per name per call, not per
child), so the loop costs what the closure's did.

What the walk hands a vertex (the job's shared planners and containers, kits) is
``job_spans``'s; runs of fresh leaves go to the compiled ``take_fresh_leaves``
(``whole_leaves.py``); a node entered as an earlier one was takes a kept recipe
(``update_recipes.py``).
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.planner.planner import PlannerError
from fluxnode.scheduler.traversers.dfu_impl import DfuImpl, Emit, JobMeta, free_during
from fluxnode.scheduler.traversers.job_spans import (
    KIT_MIN_MARKS,
    NO_TOTALS,
    RECIPES_PER_KEY,
    UNWEIGHED,
    JobSpans,
    reported,
)
from fluxnode.scheduler.traversers.update_recipes import Recipe, apply_recipe
from fluxnode.scheduler.traversers.whole_leaves import take_fresh_leaves


class UpdateWalk:
    """One match's update walk (see the module): ``walk(root, needs, excl, 1)``."""

    __slots__ = (
        "t", "out", "marks", "marked", "seen", "job_vertices", "jobid", "at", "duration",
        "end", "xtypes", "pxtypes", "stop_on_1", "subtree_cache", "tracked", "prune_types",
        "spans", "kits", "leaf_kit", "inner_kits", "tree", "sharing", "kit_spans", "recipes",
        "totals_of", "weights", "orders", "moves", "unplanned", "no_alloc",
    )

    def __init__(self, t: DfuImpl, m: JobMeta) -> None:
        # the traverser (a DfuUpdate, which imports this module: its edge weights and
        # subtree filters are its methods _edge_weight, _set_weight and _ag_put)
        self.t = t
        self.out: list[Emit] = []  # the emits, in post order
        self.marks = t._marks  # (parent, child) uniq_ids -> (needs, exclusive), as selected
        # parent uniq_id -> its marked children (marking order)
        self.marked: dict[int, list[Vertex]] = {}
        for e_parent, e_child in t._mark_edges:
            self.marked.setdefault(e_parent.uniq_id, []).append(e_child)
        self.seen: set[int] = set()  # vertices met (only where one may be met twice)
        self.job_vertices = t.jobs[m.jobid].vertices
        self.jobid, self.at, self.duration = m.jobid, m.at, m.duration
        self.end = m.at + m.duration
        self.no_alloc = m.no_alloc
        policy = t.policy
        self.xtypes = policy.exclusive_types | t._req_xtypes  # taken whole below them
        # taken exclusively: the *nodex node, and a type a failed request left in the set
        self.pxtypes = policy.exclusive_types | t.leaked_xtypes
        self.stop_on_1 = policy.stop_on_1  # first-match: re-weigh the edges taken
        self.subtree_cache = t._subtree_cache
        # a cache others watch (the fast traverser's root indexes and prune memory) must
        # hear of every vertex changed; an unwatched one only needs the ones it holds popped
        self.tracked = bool(self.subtree_cache.watchers)
        self.prune_types = t.prune_types
        spans = self.spans = JobSpans(m.jobid, m.at, m.duration, m.alloc == "alloc",
                                      t._span_pool)
        self.leaf_kit, self.kits, self.inner_kits = spans.leaf_kit, spans.kits, spans.inner_kits
        # no vertex can be met twice (see walk)
        self.tree = t.g.shared_children == 0
        # a walk that takes many fresh inner vertices of a kind shares what they and
        # their subtree filters get, kind by kind (JobSpans.inner_kit, subplan): a big
        # walk (a gang), or one that takes a vertex with children whole (the sockets of
        # an exclusive node); a single-core match takes a node and a socket one by one
        big = len(t._mark_edges) >= KIT_MIN_MARKS
        self.sharing = big or not self.xtypes <= t._leaf_types
        self.kit_spans = spans if self.sharing else None
        # such a walk also keeps what it did below a vertex it took as a recipe, for
        # the next one entered the same way (see update_recipes): a key's first vertex
        # is walked, its second walked and kept, the others take a recipe that fits
        # (0: none can be kept for that key). Only a big walk (a gang) keeps recipes: a
        # single-core whole-node match would keep its second socket's for nothing
        # (recording it doubled the match's instructions)
        self.recipes: dict[tuple, int | list[Recipe]] | None = \
            {} if self.tree and big else None
        self.totals_of = t._totals
        self.weights = t._weights if self.stop_on_1 else None
        self.orders = t._order
        # re-weighed children to move in their parents' orders (DfuUpdate._move_weighed)
        self.moves: dict[int, dict[int, tuple[int, int]]] = {}
        # where in ``out`` a vertex's subtree filter refused the job, and that vertex as
        # it would have been emitted (see walk)
        self.unplanned: list[tuple[int, Emit]] = []

    def walk(self, u: Vertex, needs: int, x: bool, level: int, inherited: bool = False,
             via: Vertex | None = None, later: bool = False) -> tuple[int, dict[str, int]]:
        """Take ``u`` (``needs`` units, exclusively when ``x``) and what was marked below
        it; return the vertices taken and the units it reports up (its subtree filter's).
        ``later``: the walk goes on after ``u``'s subtree (a sibling of ``u`` or of an
        ancestor follows), so a recipe kept in it may still be taken."""
        tree, seen, marked, marks = self.tree, self.seen, self.marked, self.marks
        kits, job_vertices, out = self.kits, self.job_vertices, self.out
        prune_types, recipes = self.prune_types, self.recipes
        n = 0
        agg: dict[str, int] = {}
        if not tree:  # in a tree no vertex is met twice
            seen.add(u.uniq_id)
        if u.type in self.pxtypes:
            x = True
        shadow = x and (inherited or u.type in self.xtypes)
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
                cneeds = (free_during(p, self.at, self.duration) or c.size
                          if p is not None else c.size)
                cx = True
            else:
                cneeds, cx = mk[0], mk[1] or shadow
            if c.children or not (shadow or (cx and cneeds == c.size)):
                record = None
                if recipes is not None and c.children:
                    # recipes by what the walk is entered with and the vertex's kind
                    # (Recipe.fits checks the rest): a node of a gang
                    rkey = (cneeds, cx, shadow, level, c.type, c.size,
                            id(self.totals_of.get(cid)))
                    got = recipes.get(rkey)
                    # a recipe is kept only for a vertex walked after this one: none
                    # follows the last (a whole node's second socket, recorded for
                    # nothing, was a third of a node-exclusive resource-query match)
                    keep = later or i < nk
                    if got is None:
                        recipes[rkey] = 1  # the first: walked, nothing kept
                    elif got == 1:
                        record = rkey if keep else None  # the second: walked, kept
                    elif got != 0:
                        for rec in got:
                            if apply_recipe(rec.entries, c, level + 1, Emit, out,
                                            job_vertices, marks, marked, self.totals_of,
                                            self.subtree_cache, self.tracked, self.weights,
                                            self.orders, self.moves):
                                break
                        else:
                            rec = None
                            if len(got) < RECIPES_PER_KEY and keep:
                                record = rkey
                        if rec is not None:
                            n += rec.n
                            for t, k in rec.up.items():
                                agg[t] = agg.get(t, 0) + k
                            continue
                start = len(out)
                sub, cagg = self.walk(c, cneeds, cx, level + 1, shadow, u, later or i < nk)
                if record is not None:
                    rec = Recipe.record(
                        c, out[start:], level + 1, sub, cagg, marks, marked, self.totals_of,
                        self.t._edge_weight if self.stop_on_1 else None) if sub > 0 else None
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
            # walk(c, ...) does for it, in line; the node-exclusive policies take ~70
            # of these per single-core match. A leaf is never in the subtree cache
            # (DfuSelect._dom_dfv keeps vertices with children)
            if not whole:
                seen.add(cid)
            if c.schedule is None and c.x_checker is None and not c.tags:
                # a fresh leaf: the job's shared planners and containers (see JobSpans)
                kit = kits.get((cneeds, c.size, c.type)) or self.leaf_kit(c, cneeds)
                c.schedule, c.x_checker, held = kit
                c.hold_whole(held)
            else:
                self.spans.units(c, cneeds)
                self.spans.x(c)
            job_vertices[cid] = c
            out.append(Emit(c, cneeds, True, level + 1))
            n += 1
            if c.type in prune_types:
                agg[c.type] = agg.get(c.type, 0) + c.size
        if x:
            n += 1
        if n > 0:  # record the job on u itself, emit it and re-weigh its edge
            t = self.t
            if self.tracked or uid in self.subtree_cache:
                self.subtree_cache.pop(uid, None)
            whole_u = shadow or (x and needs == u.size)
            kit = None
            if (self.sharing and self.tree and u.schedule is None and u.x_checker is None
                    and u.subplan is None
                    and not u.tags and u.children and u.parent is not None):
                # a fresh inner vertex (a node or socket of a gang): the kit of the
                # walk's vertices taken the same way (see JobSpans.inner_kit)
                totals = self.totals_of.get(uid, NO_TOTALS)
                kkey = (u.type, u.size, x, needs, whole_u, id(totals), tuple(agg.items()))
                kit = self.inner_kits.get(kkey)
                if kit is None:
                    kit = self.inner_kits[kkey] = self.spans.inner_kit(u, needs, x, agg, totals,
                                                                       self.prune_types)
                u.schedule, u.x_checker, u.subplan = kit.schedule, kit.x_checker, kit.subplan
                u.hold_inner(kit.held)
                up = kit.up
            else:
                if x:
                    self.spans.units(u, needs)
                self.spans.x(u, whole_u)
                if agg:  # keeps no ref to agg
                    try:
                        t._ag_put(u, self.jobid, self.at, self.end, agg, self.kit_spans)
                    except PlannerError:
                        # without_allocating: Fluxion's update plans nothing, so no
                        # subtree filter refuses; the vertex is emitted as planned
                        if not self.no_alloc:
                            agg = None
                up = reported(u, agg, x, needs, self.prune_types) if agg is not None else {}
            self.job_vertices[uid] = u
            if agg is None:
                # a stale subtree filter (a partial cancel that failed half way) has too
                # few units left: Fluxion's upd_sched swallows upd_agfilter's EBUSY, the
                # vertex keeps its tag but is neither emitted nor counted in its parent's
                # filter, and its level is never stepped back (_update)
                self.unplanned.append((len(self.out), Emit(u, needs, x, level)))
            else:
                self.out.append(Emit(u, needs, x, level))
            if self.stop_on_1 and u.children and via is not None:
                if kit is None:
                    w = t._edge_weight(u)
                else:  # equal for the kit's vertices: worked out once
                    w = kit.weight
                    if w is UNWEIGHED:
                        w = kit.weight = t._edge_weight(u)
                if w is not None:
                    t._set_weight(via, u, w, self.moves)
            return n, up
        return 0, {}
