"""The selection walk (Fluxion's dfu_impl.cpp): test, prune, score and choose.

``_select`` walks the graph depth first from the root. Each vertex is tested
against the current jobspec level (``_test``: a named type, a slot sitting at
this vertex, or a pristine skip of unnamed levels), pruned by status,
constraints, availability, exclusivity and its subtree aggregates (``_prune``),
its children explored (``_explore``, in the policy's order, stopping early for
the first-match policies), the candidates scored by the policy and the best
``k`` chosen (``_resolve``/``_enforce``), which marks the chosen edges in
``self._marks`` for the update walk (``dfu_update``) to apply.

The exhaustive policies score every vertex on every match; ``_dom_dfv`` keeps a
subtree's outcome per request level and job window (``level_window.LevelWindow``) until
something below it changes (``_invalidate``). The loops here are the matcher's hot path: locals
are bound before loops and helpers are whole methods, never a call per child
that could be inlined.
"""

from __future__ import annotations

import errno as _errno
from dataclasses import dataclass
from operator import attrgetter

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import MatchRequest, Request, calc_count, effective_max
from fluxnode.scheduler.policies.scoring import MATCH_MET, MATCH_UNMET, Edge, EGroup, Scoring
from fluxnode.scheduler.traversers.dfu_impl import DfuImpl, JobMeta, free_during
from fluxnode.scheduler.traversers.leaf_scores import unit_slots
from fluxnode.scheduler.traversers.level_window import LevelWindow, WalkLevel

# the vertex types a constraint (RFC 31) tests; every other vertex passes it
NODE_TYPES = ("node", "storage_node")

_new_tuple = tuple.__new__

EBUSY = _errno.EBUSY
EINVAL = _errno.EINVAL
ENODEV = _errno.ENODEV
_NOT_SET = -1  # no vertex of a cached walk set errno

_children_of = attrgetter("children")
_uniq_id = attrgetter("uniq_id")


def take_slot(dfu_slot: Scoring, shape, label: str = "") -> EGroup | None:
    """One slot's worth of the best remaining candidates of each type, as an exclusive group.

    None when the candidates run out (Fluxion's dom_slot "not enough slots").
    """
    edges: list[Edge] = []
    score = MATCH_MET
    for elem in shape:
        ev = dfu_slot.evals(elem.type)
        count = calc_count(elem, ev.qual)
        j = 0
        while j < count:
            eg = ev.next()
            if eg is None:
                return None
            e0 = eg.edges[0]
            edges.append(Edge(e0.vertex, e0.count, e0.count, True, e0.parent))
            score += eg.score
            j += e0.count
    return EGroup(score, 1, True, label=label, edges=edges)


def take_slots(dfu_slot: Scoring, shape, label: str, n: int) -> list[EGroup] | None:
    """``n`` calls of :func:`take_slot` (the same groups), with each type's count worked
    out once: a socket's 32 single-core slots are rebuilt on every match that changed it."""
    plan = []
    for elem in shape:
        ev = dfu_slot.evals(elem.type)
        plan.append((ev, ev.egroups, calc_count(elem, ev.qual)))
    groups: list[EGroup] = []
    if len(plan) == 1 and plan[0][2] == 1:
        # one unit of one type per slot (a single-core slot): each slot is the next
        # group alone, as the loop below would take it, without its bookkeeping
        ev, egroups, _count = plan[0]
        start = ev.cursor + 1
        if start + n <= len(egroups):
            groups = unit_slots(egroups, start, n, label)  # compiled (see leaf_scores)
            ev.cursor = start + n - 1
            return groups
    for _ in range(n):
        edges: list[Edge] = []
        score = MATCH_MET
        for ev, egroups, count in plan:
            j = 0
            while j < count:
                ev.cursor += 1
                if ev.cursor >= len(egroups):
                    ev.cursor = len(egroups)
                    return None
                eg = egroups[ev.cursor]
                e0 = eg.edges[0]
                # edges are never changed once made: one that already says "all of it,
                # exclusively" is the slot's edge as it is
                if e0.exclusive is not True or e0.needs != e0.count:
                    e0 = Edge(e0.vertex, e0.count, e0.count, True, e0.parent)
                edges.append(e0)
                score += eg.score
                j += e0.count
        groups.append(EGroup(score, 1, True, False, label, edges))
    return groups


class ShareTally:
    """Fluxion's dynamic stop (share_tally_map_t): as children qualify, count per type
    the whole shares their units make (what a share leaves over is dropped, as Fluxion
    does); a type with ``multiplier`` shares goes in ``sat_types``, and the walk stops
    once every type is there."""

    __slots__ = ("per_share", "multiplier", "sat_types", "_prev", "_acc", "_shares")

    def __init__(self, per_share: list[tuple[str, int]], multiplier: int) -> None:
        self.per_share = per_share
        self.multiplier = multiplier
        self.sat_types: set[str] = set()
        self._prev = [0] * len(per_share)
        self._acc = [0] * len(per_share)
        self._shares = [0] * len(per_share)

    def count(self, dfu: Scoring) -> bool:
        """Count what ``dfu`` holds now, after a child qualified; True once every type
        has ``multiplier`` shares."""
        prev, acc, shares = self._prev, self._acc, self._shares
        done = 0
        for i, (t, share) in enumerate(self.per_share):
            total = dfu.total_count(t)
            if total > prev[i]:
                acc[i] += total - prev[i]
                prev[i] = total
                if share and acc[i] >= share:
                    shares[i] += 1
                    acc[i] = 0
            if shares[i] >= self.multiplier:
                self.sat_types.add(t)
                done += 1
        return done == len(shares)


@dataclass(slots=True)
class _Level:
    """One request level as the walk asks about it (see DfuSelect._level)."""

    resources: list[Request]  # held, so its id is not reused by another list in the match
    named: frozenset[str] | None  # the vertex types it can match; None when a slot is among them
    xtypes: frozenset[str]  # the types it asks for exclusively
    per_share: list[tuple[str, int]]  # (type, units per share), one per type (the last wins)
    sig: tuple | None = None  # its structure (see DfuSelect._sig), once asked for


class DfuSelect(DfuImpl):
    """Choose the vertices of one request (marks the chosen edges; changes no planner)."""

    _levels: dict[int, _Level]  # request list id -> _Level (see _level)
    _walk_levels: dict[tuple[int, bool, bool], WalkLevel]  # this walk's keys, by level id
    # the policy's key in every LevelWindow: FastTraverser sets it (the service changes
    # policy between matches); a plain Traverser keeps its policy
    _cache_policy: tuple | None = None
    _levels_of: list[Request] | None = None  # the request list _levels was made for
    _prune_auto_types = True  # see _short
    # Fluxion's m_err_msg: what the walks of one match write of their refusals (by_excl's
    # exclusivity conflicts, dom_slot's slots run out), in walk order; Traverser.match
    # starts it empty, as dfu_traverser_t::run clears it (resource-query prints it)
    err_msg: list[str]

    def _by_excl_conflict(self, u: Vertex, r: Request) -> None:
        """by_excl: a request asked non-exclusive under an exclusive one, at ``u``
        (EINVAL, and its line without a newline of its own)."""
        self.errno = EINVAL
        self.err_msg.append(f"by_excl: exclusivity conflicts at jobspec={r.label} : "
                            f"vertex={u.name}")

    def _ag_enough(self, u: Vertex, t: str, m: JobMeta, need: int) -> bool:
        """Does ``u``'s subtree have ``need`` free ``t`` units during the job's window?"""
        total = self._totals.get(u.uniq_id, {}).get(t, 0)
        if total < need:
            return False
        sp = u.subplan
        if sp is None or need <= 0:
            return True
        if not sp.has_type(t):
            return True
        p = sp.planner(t)
        # every span counted at once (O(1)) is usually enough to say yes
        return p.avail_lower_bound() >= need or free_during(p, m.at, m.duration) >= need


    # ----------------------------------------------------------------- prune
    def _prune(self, m: JobMeta, x_in: bool, u: Vertex, resources: list[Request]) -> bool:
        # every prune sets Fluxion's errno to EBUSY, but an exclusivity conflict (EINVAL,
        # see _excl_busy): what a later failure with no errno of its own reports
        before, self.errno = self.errno, EBUSY
        if not m.sat and u.status != "up":
            return True
        if m.constraint is not None and u.type in NODE_TYPES \
                and not m.constraint.match(u.name, u.rank, u.properties):
            return True
        if self._avail(u, m) == 0:
            return True
        if self._prune_resources(m, x_in, u, resources):
            return True
        self.errno = before
        return False

    def _excl_busy(self, m: JobMeta, x_in: bool, u: Vertex, r: Request) -> bool:
        if x_in and r.exclusive is False:
            # by_excl: a non-exclusive request under an exclusive one is invalid
            self._by_excl_conflict(u, r)
            return True
        if x_in or r.exclusive is True:
            if m.alloc == "alloc" and u.allocations:
                return True
            if self._x_busy(u, m):
                return True
        return False

    def _short(self, m: JobMeta, u: Vertex, r: Request) -> bool:
        """Too few free units below ``u`` for one ``r`` (the --prune-filters types only)."""
        ud = self._user_data(r)
        if not ud or not (u.children or u.aux_children):  # a leaf in every subsystem
            return False
        tracked = self._tracked.get(u.type)
        if tracked is None:
            # a cluster's filter also tracks the leaf types no filter names (Fluxion's
            # prime_pruning_filter anchors them at cluster_rt), and prunes by them
            tracked = self._tracked[u.type] = set(
                self.subplan_types(u, shown=self._prune_auto_types))
        for t, n in ud.items():
            if t in tracked and not self._ag_enough(u, t, m, n):
                return True
        return False

    def _prune_resources(self, m: JobMeta, x_in: bool, u: Vertex, resources: list[Request]) -> bool:
        for r in resources:
            if r.type != u.type and r.type != "slot":
                continue
            if r.type != "slot" and self._excl_busy(m, x_in, u, r):
                return True
            if self._short(m, u, r):
                return True
        return False

    # ------------------------------------------------------------------ test
    def _test(self, u: Vertex, resources: list[Request], pristine: bool):
        slot_r = match_r = None
        nslots = 0
        matched = False
        for r in resources:
            if u.type == r.type:
                if matched:  # match (): two requests of one level name u's type
                    return resources, "siblings", 0, "", pristine
                match_r = r
                for c in r.with_:
                    if c.type == "slot":
                        slot_r = c
                        nslots = effective_max(c)
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, "siblings", 0, "", pristine
                slot_r = r
                nslots = effective_max(r)
                matched = True
        if slot_r is not None and self._slot_sits_at(u, slot_r.with_):
            return slot_r.with_, "slot", nslots, slot_r.label, False
        if match_r is not None:
            return match_r.with_, "resource", nslots, "", False
        return resources, ("pristine" if pristine else "none"), nslots, "", pristine

    def _slot_sits_at(self, u: Vertex, shape: list[Request]) -> bool:
        """Is ``u`` the vertex a slot of ``shape`` is matched at: is every type the
        slot holds among the types of ``u``'s children (one level down, as Fluxion's
        dom_dfv decides it)? Both traversers' ``_test`` ask this one question. Fluxion's
        slot_match reads every out-edge, of every subsystem: a pdu that supplies nodes
        and power holds a slot of both."""
        child_types = self._child_types.get(u.uniq_id)
        if child_types is None:
            child_types = self._child_types[u.uniq_id] = self._out_types(u)
        return all(c.type in child_types for c in shape)

    def _out_types(self, u: Vertex) -> set[str]:
        """The types at the far end of ``u``'s out-edges, in every subsystem of the graph
        as it was loaded (a projected graph's vertex has its dominant ones alone)."""
        if self.loaded is not None:
            if self._loaded_ids is None:
                self._loaded_ids = {v.uniq_id: v for v in self.loaded.vertices}
            u = self._loaded_ids.get(u.uniq_id, u)
        types = {c.type for c in u.children}
        for kids in (u.aux_children or {}).values():
            types.update(c.type for c in kids)
        return types

    # ------------------------------------------------------------------ walk
    def _user_data(self, r: Request) -> dict[str, int]:
        """Aggregate counts one instance of ``r`` needs below it (for pruning)."""
        return r.user_data

    def _children(self, u: Vertex):
        if not self.policy.stop_on_1:
            return u.children
        # Fluxion's by_outedges: children by (weight, uniq_id), heaviest first; kept
        # sorted incrementally (see _set_weight) instead of re-sorted per match.
        order = self._order.get(u.uniq_id)
        if order is None:
            leaves = self._leaf_order.get(u.uniq_id)
            if leaves is not None:
                return leaves
            kids = u.children
            if not any(map(_children_of, kids)):
                # leaves never get an edge weight (only vertices with children do), so
                # their order is by uniq_id alone, computed once
                leaves = self._leaf_order[u.uniq_id] = sorted(kids, key=_uniq_id, reverse=True)
                return leaves
            weight = self.edge_weight_of
            order = sorted(((-weight(u, c), -c.uniq_id, i) for i, c in enumerate(u.children)))
            self._order[u.uniq_id] = order
        kids = u.children
        return (kids[i] for _w, _u, i in order)

    def _explore(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                 excl: bool, dfu: Scoring, multiplier: int = 1) -> int:
        rc2 = -1
        dynamic = self.policy.stop_on_1
        level = self._level(resources)
        if dynamic:
            # Fluxion's dynamic stop: per type, count whole shares as children qualify
            # and stop once every type has ``multiplier`` of them
            tally = ShareTally(level.per_share, multiplier)
            sat_types = tally.sat_types
        # a child no request of this level names is seen (counted) and left, as
        # _dom_dfv_walk's test would do, without the calls (half a gang's visits are GPUs)
        named = None if pristine else level.named
        direct = self._cache is None
        visited = self._visited
        for c in self._children(u):
            if c.uniq_id in visited:
                continue
            if dynamic and c.type in sat_types:
                continue
            if named is not None and c.type not in named and (direct or not c.children):
                self.preorder += 1
                self.errno = EBUSY  # dom_dfv's test: no request of this level names it
                continue
            ok, x_out = self._dom_dfv(m, c, resources, pristine, excl, dfu)
            if ok:
                count = dfu.avail
                dfu.add(c.type, EGroup(dfu.overall, count, x_out,
                                       edges=[Edge(c, count, count, x_out, u)]))
                rc2 = 0
                if dynamic and tally.count(dfu):
                    break
        return rc2

    def _dom_slot(self, m: JobMeta, u: Vertex, shape: list[Request], nslots: int, pristine: bool,
                  label: str, dfu: Scoring) -> int:
        dfu_slot = Scoring()
        if self._explore(m, u, shape, pristine, True, dfu_slot, nslots) != 0:
            return -1
        self.policy.finish_slot(dfu_slot)
        qual = None
        for elem in shape:
            ev = dfu_slot.evals(elem.type)
            count = calc_count(elem, ev.qual)
            shares = 0
            if count:
                acc = 0
                for eg in ev.egroups:
                    acc += eg.edges[0].count
                    if acc >= count:
                        shares += 1
                        acc = 0
            fit = shares if count else 0
            qual = fit if qual is None else min(qual, fit)
            ev.reset()
        qual = qual or 0
        groups = take_slots(dfu_slot, shape, label, qual)
        if groups is None:
            self.err_msg.append("dom_slot: not enough slots.\n")
            return -1
        ev = dfu.evals("slot")  # Evals.add of each group, in line
        for g in groups:
            if g.score > MATCH_UNMET:
                ev.qual += 1
        ev.total += len(groups)  # every slot group counts one
        ev.egroups.extend(groups)
        return 0 if qual else -1

    def _dom_dfv(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                 excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        """Score ``u``'s subtree for ``resources``; the exhaustive policies reuse the
        outcome of an unchanged subtree for the same request level (see _subtree_cache)."""
        cache = self._cache
        if cache is None or not u.children or u.parent is None:
            return self._dom_dfv_walk(m, u, resources, pristine, excl, to_parent)
        policy = self.policy
        wl = self._walk_levels.get((id(resources), pristine, excl))  # _walk_level in line
        if wl is None:
            wl = self._walk_level(m, resources, pristine, excl)
        key = wl.key
        hit = cache.get(u.uniq_id)
        if hit is not None and hit[1] == policy.ml_scores and hit[0] == key:
            _key, _ml, ok, x, probe, dml, last, err, pre, post = hit
            # the walk's visits, as resource-query -e prints them (t3029)
            self.preorder += pre
            self.postorder += post
            if err != _NOT_SET:
                self.errno = err
            policy.ml_scores += dml
            if last is not None:
                policy.last_factor = last
            if ok:
                to_parent.merge(probe)
                to_parent.avail = probe.avail
                to_parent.overall = probe.overall
            return ok, x
        enforced = self._enforced
        ml, last = policy.ml_scores, policy.last_factor
        pre, post = self.preorder, self.postorder
        said = len(self.err_msg)
        ok, x, probe, err = self._probe_walk(m, u, resources, pristine, excl, to_parent)
        # no marks were set below u and no refusal written: the outcome is all there is
        if self._enforced == enforced and len(self.err_msg) == said:
            last = policy.last_factor if policy.last_factor != last else None
            cache[u.uniq_id] = (key, ml, ok, x, probe, policy.ml_scores - ml, last, err,
                                self.preorder - pre, self.postorder - post)
        return ok, x

    def _probe_walk(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                    excl: bool, to_parent: Scoring) -> tuple[bool, bool, Scoring, int]:
        """Walk ``u`` into a Scoring of its own (what a cache keeps of the walk) and merge
        it into ``to_parent``: (ok, x, that Scoring, the errno the walk set or _NOT_SET).
        The walk's errno stays when it set one, else the one before it."""
        probe = Scoring()
        err0 = self.errno
        self.errno = _NOT_SET
        ok, x = self._dom_dfv_walk(m, u, resources, pristine, excl, probe)
        err = self.errno
        if err == _NOT_SET:
            self.errno = err0
        if ok:
            to_parent.merge(probe)
            to_parent.avail = probe.avail
            to_parent.overall = probe.overall
        return ok, x, probe, err

    def _level(self, resources: list[Request]) -> _Level:
        """What the walk asks of a request level, worked out once per match."""
        level = self._levels.get(id(resources))
        if level is None:
            types = frozenset(r.type for r in resources)
            level = self._levels[id(resources)] = _Level(
                resources, None if "slot" in types else types,
                frozenset(r.type for r in resources if r.exclusive is True),
                list({r.type: effective_max(r) for r in resources}.items()))
        return level

    def _walk_level(self, m: JobMeta, resources: list[Request], pristine: bool,
                    excl: bool) -> WalkLevel:
        """This walk's key for the request level ``resources`` entered so. Within one
        walk the match (its type and window) is one: the level's identity finds it."""
        here = (id(resources), pristine, excl)
        got = self._walk_levels.get(here)
        if got is None:
            level = (self._cache_policy, self._sig(resources), pristine, excl, m.alloc, m.sat)
            # LevelWindow(level, m.at, m.duration) without its Python-level __new__
            key = _new_tuple(LevelWindow, (level, m.at, m.duration))
            got = self._walk_levels[here] = WalkLevel(key)
        return got

    def _sig(self, resources: list[Request]) -> tuple:
        """A request level's structure, equal for equal requests of different matches."""
        level = self._level(resources)
        if level.sig is None:
            level.sig = tuple(
                (r.type, r.count.min, r.count.max, r.count.operator, r.count.operand,
                 r.exclusive, r.label, self._sig(r.with_)) for r in resources)
        return level.sig

    def _dom_dfv_walk(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                      excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        # dom_dfv's x_in: inherited, or this level asks for u's type exclusively. The
        # policy's exclusive types (node for the *nodex policies) play no part in the
        # selection walk; only the update walk takes their whole subtrees.
        x_in = excl or u.type in self._level(resources).xtypes
        nxt, kind, nslots, label, pres = self._test(u, resources, pristine)
        self.preorder += 1
        if kind == "none" or kind == "siblings":
            if kind == "siblings":
                self.err_msg.append("test: siblings in jobspec request same resource type "
                                    f": {u.type}.\n")
            self.errno = EBUSY
            return False, excl
        if self._prune(m, x_in, u, resources):
            return False, excl
        self.policy.discover(u)
        self._visited.add(u.uniq_id)
        dfu = Scoring()
        if kind == "slot":
            self._dom_slot(m, u, nxt, nslots, pres, label, dfu)
        else:
            self._explore(m, u, nxt, pres, x_in, dfu)
            if u.aux_children and self._aux:  # dom_exp's auxiliary subsystems (aux_walk)
                self._aux_exp(m, u, nxt, x_in, dfu)
        avail = self._avail(u, m)
        if avail == 0:
            self.errno = EBUSY
            return False, x_in
        if not self.policy.finish_vtx(u, resources, dfu):
            self.errno = EBUSY
            return False, x_in
        if self._resolve(dfu, to_parent) != 0:
            return False, x_in
        to_parent.avail = avail
        to_parent.overall = dfu.overall
        self.postorder += 1
        if self._labeling:
            self._put_label(u, resources)
        return True, x_in

    def _resolve(self, dfu: Scoring, to_parent: Scoring) -> int:
        if dfu.overall > MATCH_UNMET:
            if dfu.hier:
                self._enforce(dfu, False)
            else:
                to_parent.merge(dfu)
        return 0

    def _enforce(self, dfu: Scoring, unconstrained: bool) -> None:
        self._enforced += 1
        marks = self._marks
        for t in dfu.sorted_types():
            ev = dfu.types[t]
            if not ev.best_k:
                continue
            for i in range(ev.best_i):
                eg = ev.egroups[i]
                if eg.root:
                    continue
                for e in eg.edges:
                    par = e.parent
                    pid = par.uniq_id if par is not None else -1
                    key0 = (pid, e.vertex.uniq_id)
                    if key0 not in marks and par is not None:
                        self._mark_edges.append((par, e.vertex))
                    marks[key0] = (e.needs, bool(e.exclusive))
                    if unconstrained:
                        p = par
                        while p is not None and p.parent is not None:
                            key = (p.parent.uniq_id, p.uniq_id)
                            if key in marks:
                                break
                            tgt = p
                            p = p.parent
                            ev2 = dfu.types.get(tgt.type)
                            if ev2 is not None and not ev2.best_k:
                                if key not in marks:
                                    self._mark_edges.append((p, tgt))
                                marks[key] = (tgt.size, False)

    def _select(self, req: MatchRequest, m: JobMeta, excl: bool) -> tuple[int, int, bool]:
        root = self.g.root
        self._marks = {}
        self._mark_edges: list[tuple[Vertex, Vertex]] = []
        self._visited = set()
        self.preorder = self.postorder = 0
        self.policy.ml_scores = 0
        if self._levels_of is not req.resources:
            # what a level asks depends on the request alone: kept while the walks are of
            # the same request (resource-query hands back the same one for a file it read
            # before); the _Levels hold their lists, so no id is reused meanwhile
            self._levels: dict[int, _Level] = {}  # request list id -> _Level (see _level)
            self._levels_of = req.resources
        self._enforced = 0
        self._labeling = self._labels_of(req.resources)
        self._cache = self._subtree_cache if (self._cacheable and m.constraint is None
                                              and not self._labeling) else None
        self._walk_levels: dict[tuple[int, bool, bool], WalkLevel] = {}  # only this walk's
        # Emptied when the window changes, though its keys name the window: an outcome
        # kept from an earlier match in the same window would be found again when a match
        # comes back to it (a reservation's or satisfiability's walks in between); a hit
        # adds the visits its walk made (resource-query -e prints them: total_preorder),
        # and the plain walk and the fast one's templates count alike when both start
        # each window empty (test_templates' exact-mode test).
        if self._cache is not None and self._cache_window != (m.at, m.duration, m.alloc, m.sat):
            self._cache.clear()
            self._cache_window = (m.at, m.duration, m.alloc, m.sat)
        dfu = Scoring()
        ok, x_in = self._dom_dfv(m, root, req.resources, True, excl, dfu)
        if not ok:
            return -1, 0, False
        dfu.add(root.type, EGroup(dfu.overall, dfu.avail, excl, root=True,
                                  edges=[Edge(root, dfu.avail, dfu.avail, excl)]))
        if not self.policy.finish_graph(req.resources, dfu):
            self.errno = ENODEV  # select: resolve_graph's failure is "unsatisfiable"
            return -2, 0, False
        needs = 1
        for r in req.resources:
            if r.type == root.type:
                count = calc_count(r, dfu.avail)
                if count == 0:
                    self.errno = ENODEV
                    return -2, 0, False
                needs = count
        for ev in dfu.types.values():
            if ev.qual == 0:
                self.errno = ENODEV
                return -2, 0, False
        self._enforce(dfu, True)
        return 0, needs, x_in

