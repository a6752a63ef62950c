"""Depth-first-and-up (DFU) matching of jobspecs against a resource graph.

This is the scheduler library's public entry point (the binder uses it)::

    from fluxnode.scheduler.readers.rv1 import read_rv1
    from fluxnode.scheduler.traversers.dfu import Traverser, NoMatch, Unsatisfiable
    from fluxnode.scheduler import writers

    t = Traverser(read_rv1(R), policy="first")        # or low/high/lonode/hinodex/...
    res = t.match(jobspec_dict, op="allocate")         # -> MatchResult
    R_alloc = writers.rv1_nosched(res)                 # RFC 20 R of the allocation
    t.cancel(res.jobid); t.partial_cancel(jobid, [3, 4])
    t.set_status(7, "down")  # or a path "/cluster0/node7"; allocations are kept
    t.add_resources(R_new)   # graph growth from a new R (existing vertices reused)

``match`` raises :class:`NoMatch` (``busy`` True when resources exist but are in
use) or :class:`Unsatisfiable` (can never fit this graph). Constraints (RFC 31
``attributes.system.constraints``: properties, hostlist, ranks, and/or/not)
restrict which nodes match.

The walk follows Fluxion's dfu_impl: each vertex is tested against the
current jobspec level (pristine skip of unnamed levels, slot matching),
pruned by status / constraints / availability / exclusivity / subtree
aggregates, its children explored, candidates scored by the policy and the
best ``k`` chosen; a second walk applies the chosen edges, records spans in the
time-based schedule and emits the selection in post order.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from operator import attrgetter

from fluxnode.scheduler.graph.resource_graph import (
    CONTAINMENT,
    FREEZE_MIN_VERTICES,
    ResourceGraph,
    Vertex,
    freeze_for_gc,
    freeze_job_state,
    gc_paused,
)
from fluxnode.scheduler.jobspec.request import (
    MatchRequest,
    Request,
    RequestError,
    calc_count,
    effective_max,
    from_jobspec,
)
from fluxnode.scheduler.planner.planner import Planner
from fluxnode.scheduler.planner.planner_multi import PlannerMulti
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.policies.scoring import MATCH_MET, MATCH_UNMET, Edge, EGroup, Scoring

INF = 2**63 - 1
# Fluxion's edge weight before the first update through that edge (UINT64_MAX): an
# untouched child is explored before every child a job has already gone through.
UNSET_WEIGHT = 2**64 - 1
# Fluxion's default subtree filters (sched-fluxion-resource's and resource-query's):
# free cores and free (exclusively held) nodes below every vertex. The last type is
# also what orders children for the first-match policies (see _edge_weight).
DEFAULT_PRUNE_FILTERS = "ALL:core,ALL:node"
X_CHECKER_NJOBS = 0x40000000


class NoMatch(Exception):
    """No resources now (``busy``) or never for this request on this graph."""

    def __init__(self, busy: bool, reason: str = "") -> None:
        super().__init__(reason or ("resources busy" if busy else "no match"))
        self.busy = busy
        self.reason = reason


class Unsatisfiable(NoMatch):
    def __init__(self, reason: str = "unsatisfiable request") -> None:
        super().__init__(False, reason)


class TraverserError(ValueError):
    """Bad input to the traverser (unknown job, path, status...)."""


_children_of = attrgetter("children")


@dataclass(slots=True)
class Emit:
    """One vertex of a selection: ``needs`` units, exclusively or shared, at ``level``."""

    vertex: Vertex
    needs: int
    exclusive: bool
    level: int
    agfilter: dict | None = None


@dataclass
class MatchResult:
    jobid: int
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    duration: int
    overhead: float
    selection: list[Emit] = field(default_factory=list)

    @property
    def nodes(self) -> list[Vertex]:
        return [e.vertex for e in self.selection if e.vertex.type == "node"]


@dataclass
class Job:
    jobid: int
    at: int
    duration: int
    status: str
    vertices: dict[int, Vertex] = field(default_factory=dict)


class _Meta:
    __slots__ = ("at", "duration", "alloc", "jobid", "constraint", "sat")

    def __init__(self, at: int, duration: int, jobid: int, constraint) -> None:
        self.at = at
        self.duration = duration
        self.alloc = "alloc"  # alloc | reserve | sat
        self.jobid = jobid
        self.constraint = constraint
        self.sat = False


def _free_during(p: Planner, at: int, duration: int) -> int:
    """Units of ``p`` free during the window, cut at the horizon's end (a job of
    unlimited duration reserved later still ends at INF)."""
    if p.avail_lower_bound() == p.total:  # nothing planned: O(1)
        return p.total
    if at + duration > INF:
        duration = INF - at
    return p.avail_resources_during(at, duration)


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


_uniq_id = attrgetter("uniq_id")


@dataclass(slots=True)
class _Level:
    """One request level as the walk asks about it (see Traverser._level)."""

    resources: list[Request]  # held, so its id is not reused by another list in the match
    named: frozenset[str] | None  # the vertex types it can match; None when a slot is among them
    xtypes: frozenset[str]  # the types it asks for exclusively
    per_share: list[tuple[str, int]]  # (type, units per share), one per type (the last wins)
    sig: tuple | None = None  # its structure (see Traverser._sig), once asked for


class Traverser:
    _subtree_cacheable = True  # subclasses whose walk differs opt out
    def __init__(self, graph: ResourceGraph, policy: str | Policy = "first",
                 prune_filters: str = DEFAULT_PRUNE_FILTERS, subsystems: list[str] | None = None) -> None:
        self.g = graph
        self.policy = policy if isinstance(policy, Policy) else Policy.parse(policy)
        self.subsystems = subsystems or [CONTAINMENT]
        self.prune_types = self._parse_prune(prune_filters)
        self.jobs: dict[int, Job] = {}
        self.next_jobid = 1
        self.preorder = 0
        self.postorder = 0
        self.total_preorder = 0
        self.total_postorder = 0
        self._marks: dict[tuple[int, int], tuple[int, bool]] = {}
        self._visited: set[int] = set()
        self.reinit()

    def _parse_prune(self, spec: str) -> set[str]:
        """``ANCHOR:TYPE,...``: track free TYPE units below every ANCHOR vertex (ALL = any)."""
        out = set()
        self.prune_anchored: dict[str, list[str]] = {}
        for pair in (spec or "").split(","):
            if not pair.strip():
                continue
            anchor, sep, t = pair.partition(":")
            anchor, t = anchor.strip(), t.strip()
            if not sep or not anchor or not t:
                raise TraverserError(f"invalid prune filter {pair!r}: want ANCHOR:TYPE")
            lst = self.prune_anchored.setdefault(anchor, [])
            if t not in lst:
                lst.append(t)
            out.add(t)
        return out

    def subplan_types(self, u: Vertex, shown: bool = False) -> list[str]:
        """The resource types a vertex's subtree filter tracks, in Fluxion's order.

        ``shown``: as ``find agfilter=t`` reports them, where leaf types no filter
        names appear at the cluster vertex; they never prune a match (Fluxion's
        or-slot cases show those are not checked)."""
        if not u.children:
            return []
        own = [t for t in sorted(self.prune_anchored.get(u.type, [])) if t != u.type]
        if shown and u.type == "cluster":
            own += [t for t in getattr(self, "auto_anchored", []) if t not in own]
        if u.type == "ALL":
            return own
        every = [t for t in sorted(self.prune_anchored.get("ALL", [])) if t != u.type]
        return own + [t for t in every if t not in own]

    def agfilter(self, u: Vertex, jobid: int | None = None) -> dict[str, str] | None:
        """``{type: "used:N, total:M"}`` of the vertex's subtree filter (None if it has none)."""
        types = self.subplan_types(u, shown=True)
        if not types:
            return None
        tot = self._totals.get(u.uniq_id, {})
        sp = u.subplan
        planned = {}
        if sp is not None and jobid is not None and jobid in u.agspans:
            planned = sp.span_planned(u.agspans[jobid])
        out = {}
        for t in types:
            total = tot.get(t, 0)
            if jobid is not None:
                used = planned.get(t, 0)
            elif sp is not None and t in tot:
                used = total - sp.planner(t).avail_resources_at(0)
            else:
                used = 0
            out[t] = f"used:{used}, total:{total}"
        return dict(sorted(out.items()))

    def reinit(self) -> None:
        """(Re)compute subtree totals after the graph changed shape."""
        with gc_paused():
            self._reinit()
        if len(self.g.vertices) >= FREEZE_MIN_VERTICES:
            freeze_for_gc()

    def _reinit(self) -> None:
        self._totals: dict[int, dict[str, int]] = {}
        # child uniq_id -> weight of the edge into it (stop-on-first exploration order);
        # kept across reinit for vertices that stay, as Fluxion keeps its edges' weights
        old_weights = getattr(self, "_weights", {})
        self._weights: dict[int, int] = {}
        self._order: dict[int, list[tuple[int, int, int]]] = {}
        self._leaf_order: dict[int, list[Vertex]] = {}
        self._last_type: dict[str, str | None] = {}  # vertex type -> last filter type (_edge_weight)
        self._nodes_up: int | None = None
        self._tracked: dict[str, set[str]] = {}
        self._child_types: dict[int, set[str]] = {}
        # Exhaustive policies score every vertex on every match; a subtree nothing
        # changed in scores the same for the same request level and job window, so its
        # outcome (candidate groups, avail, score) is kept per vertex until a span,
        # status or the graph changes below it. Only a match's own window is kept.
        self._subtree_cache: dict[int, tuple] = {}
        self._cache_window: tuple | None = None
        self._cacheable = not self.policy.stop_on_1 and not self.policy.variation \
            and type(self)._subtree_cacheable
        root = self.g.roots.get(CONTAINMENT)
        if root is None:
            raise TraverserError("graph has no containment root")
        order = list(self.g.walk(root))
        # Like Fluxion, leaf types that no filter names are tracked at the cluster
        # vertex; aggregates are kept for every leaf type (the first policy's weights)
        leaf_types = {v.type for v in order if not v.children}
        named = {t for lst in self.prune_anchored.values() for t in lst}
        self.auto_anchored = sorted(leaf_types - named)
        self.prune_types |= leaf_types
        prune = self.prune_types
        totals = self._totals
        # post order: children's totals are known before their parent's
        for v in reversed(order):
            if not v.children:
                continue
            tot: dict[str, int] = {}
            for c in v.children:
                if c.type in prune:
                    tot[c.type] = tot.get(c.type, 0) + c.size
                sub = totals.get(c.uniq_id)
                if sub:
                    for t, n in sub.items():
                        tot[t] = tot.get(t, 0) + n
            totals[v.uniq_id] = tot
        for v in order:
            if v.subplan is not None:  # the subtree changed shape: new totals, spans kept
                if v.agspans:
                    v.subplan.update(totals.get(v.uniq_id, {}))
                else:
                    v.subplan = None
            if v.children:
                self._weights[v.uniq_id] = old_weights.get(v.uniq_id, UNSET_WEIGHT)

    # ------------------------------------------------------------------ time
    def _avail(self, u: Vertex, m: _Meta) -> int:
        p = u.schedule
        if p is None:
            return u.size
        return _free_during(p, m.at, m.duration)

    def _x_busy(self, u: Vertex, m: _Meta) -> bool:
        """Does any job hold something at or below ``u`` during the window (x_checker)?"""
        p = u.x_checker
        return p is not None and _free_during(p, m.at, m.duration) < X_CHECKER_NJOBS

    def _ag_enough(self, u: Vertex, t: str, m: _Meta, need: int) -> bool:
        """Does ``u``'s subtree have ``need`` free ``t`` units during the job's window?"""
        total = self._totals.get(u.uniq_id, {}).get(t, 0)
        if total < need:
            return False
        sp = u.subplan
        if sp is None or need <= 0:
            return True
        p = sp.planner(t)
        # every span counted at once (O(1)) is usually enough to say yes
        return p.avail_lower_bound() >= need or _free_during(p, m.at, m.duration) >= need

    def _ag_put(self, u: Vertex, jobid: int, at: int, end: int, counts: dict[str, int]) -> None:
        """Plan ``counts`` units below ``u`` for ``jobid`` (replacing its previous span)."""
        self._ag_drop(u, jobid)
        sp = u.subplan
        if sp is None:
            sp = u.subplan = PlannerMulti(0, INF, self._totals.get(u.uniq_id, {}))
        u.set_agspan(jobid, sp.add_span(at, end - at, counts))

    def _ag_drop(self, u: Vertex, jobid: int) -> None:
        sid = u.agspans.pop(jobid, None) if u.agspans else None
        if sid is not None:
            u.subplan.rem_span(sid)

    # ----------------------------------------------------------------- prune
    def _prune(self, m: _Meta, x_in: bool, u: Vertex, resources: list[Request]) -> bool:
        if not m.sat and u.status != "up":
            return True
        if m.constraint is not None and u.type in ("node", "storage_node") \
                and not m.constraint.match(u.name, u.rank, u.properties):
            return True
        if self._avail(u, m) == 0:
            return True
        return self._prune_resources(m, x_in, u, resources)

    def _excl_busy(self, m: _Meta, x_in: bool, u: Vertex, r: Request) -> bool:
        if x_in and r.exclusive is False:
            return True
        if x_in or r.exclusive is True:
            if m.alloc == "alloc" and u.allocations:
                return True
            if self._x_busy(u, m):
                return True
        return False

    def _short(self, m: _Meta, u: Vertex, r: Request) -> bool:
        """Too few free units below ``u`` for one ``r`` (the --prune-filters types only)."""
        ud = self._user_data(r)
        if not ud or not u.children:
            return False
        tracked = self._tracked.get(u.type)
        if tracked is None:
            tracked = self._tracked[u.type] = set(self.subplan_types(u))
        for t, n in ud.items():
            if t in tracked and not self._ag_enough(u, t, m, n):
                return True
        return False

    def _prune_resources(self, m: _Meta, x_in: bool, u: Vertex, resources: list[Request]) -> bool:
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
                if matched:
                    return resources, "none", 0, "", pristine
                match_r = r
                for c in r.with_:
                    if c.type == "slot":
                        slot_r = c
                        nslots = effective_max(c)
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, "none", 0, "", pristine
                slot_r = r
                nslots = effective_max(r)
                matched = True
        if slot_r is not None:
            child_types = self._child_types.get(u.uniq_id)
            if child_types is None:
                child_types = self._child_types[u.uniq_id] = {c.type for c in u.children}
            if all(c.type in child_types for c in slot_r.with_):
                return slot_r.with_, "slot", nslots, slot_r.label, False
        if match_r is not None:
            return match_r.with_, "resource", nslots, "", False
        return resources, ("pristine" if pristine else "none"), nslots, "", pristine

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
            weights = self._weights
            order = sorted(((-weights.get(c.uniq_id, 0), -c.uniq_id, i) for i, c in
                            enumerate(u.children)))
            self._order[u.uniq_id] = order
        kids = u.children
        return (kids[i] for _w, _u, i in order)

    def _set_weight(self, v: Vertex, w: int) -> None:
        old = self._weights.get(v.uniq_id, 0)
        self._weights[v.uniq_id] = w
        if old == w or v.parent is None:
            return
        order = self._order.get(v.parent.uniq_id)
        if order is None:
            return
        pos = bisect.bisect_left(order, (-old, -v.uniq_id))
        if pos < len(order) and order[pos][0] == -old and order[pos][1] == -v.uniq_id:
            item = order.pop(pos)
            bisect.insort(order, (-w, item[1], item[2]))
        else:  # not where expected (graph changed): rebuild lazily
            self._order.pop(v.parent.uniq_id, None)

    def _explore(self, m: _Meta, u: Vertex, resources: list[Request], pristine: bool,
                 excl: bool, dfu: Scoring, multiplier: int = 1) -> int:
        rc2 = -1
        dynamic = self.policy.stop_on_1
        level = self._level(resources)
        if dynamic:
            # Fluxion's dynamic stop: per type, count whole shares as children qualify
            # and stop once every type has ``multiplier`` of them
            per_share = level.per_share
            ntypes = len(per_share)
            prev = [0] * ntypes
            shares = [0] * ntypes
            acc = [0] * ntypes
            sat_types: set[str] = set()
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
                continue
            ok, x_out = self._dom_dfv(m, c, resources, pristine, excl, dfu)
            if ok:
                count = dfu.avail
                dfu.add(c.type, EGroup(dfu.overall, count, x_out,
                                       edges=[Edge(c, count, count, x_out, u)]))
                rc2 = 0
                if dynamic:
                    done = 0
                    for i, (t, share) in enumerate(per_share):
                        total = dfu.total_count(t)
                        if total > prev[i]:
                            # units accumulate until they make a share; what a share
                            # leaves over is dropped, as Fluxion does
                            acc[i] += total - prev[i]
                            prev[i] = total
                            if share and acc[i] >= share:
                                shares[i] += 1
                                acc[i] = 0
                        if shares[i] >= multiplier:
                            sat_types.add(t)
                            done += 1
                    if done == ntypes:
                        break
        return rc2

    def _dom_slot(self, m: _Meta, u: Vertex, shape: list[Request], nslots: int, pristine: bool,
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
        groups = []
        for _ in range(qual):
            group = take_slot(dfu_slot, shape, label)
            if group is None:
                return -1
            groups.append(group)
        for g in groups:
            dfu.add("slot", g)
        return 0 if qual else -1

    def _dom_dfv(self, m: _Meta, u: Vertex, resources: list[Request], pristine: bool,
                 excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        """Score ``u``'s subtree for ``resources``; the exhaustive policies reuse the
        outcome of an unchanged subtree for the same request level (see _subtree_cache)."""
        cache = self._cache
        if cache is None or not u.children or u.parent is None:
            return self._dom_dfv_walk(m, u, resources, pristine, excl, to_parent)
        policy = self.policy
        key = (self._sig(resources), pristine, excl, policy.ml_scores)
        hit = cache.get(u.uniq_id)
        if hit is not None and hit[0] == key:
            _key, ok, x, probe, dml, last = hit
            policy.ml_scores += dml
            if last is not None:
                policy.last_factor = last
            if ok:
                to_parent.merge(probe)
                to_parent.avail = probe.avail
                to_parent.overall = probe.overall
            return ok, x
        probe = Scoring()
        enforced = self._enforced
        ml, last = policy.ml_scores, policy.last_factor
        ok, x = self._dom_dfv_walk(m, u, resources, pristine, excl, probe)
        if ok:
            to_parent.merge(probe)
            to_parent.avail = probe.avail
            to_parent.overall = probe.overall
        if self._enforced == enforced:  # no marks were set below u: the outcome is all there is
            last = policy.last_factor if policy.last_factor != last else None
            cache[u.uniq_id] = (key, ok, x, probe, policy.ml_scores - ml, last)
        return ok, x

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

    def _sig(self, resources: list[Request]) -> tuple:
        """A request level's structure, equal for equal requests of different matches."""
        level = self._level(resources)
        if level.sig is None:
            level.sig = tuple(
                (r.type, r.count.min, r.count.max, r.count.operator, r.count.operand,
                 r.exclusive, r.label, self._sig(r.with_)) for r in resources)
        return level.sig

    def _invalidate(self, u: Vertex | None) -> None:
        """``u``'s state changed: forget the cached outcomes of it and its ancestors."""
        cache = self._subtree_cache
        while u is not None:
            cache.pop(u.uniq_id, None)
            u = u.parent

    def _dom_dfv_walk(self, m: _Meta, u: Vertex, resources: list[Request], pristine: bool,
                      excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        x_in = excl or u.type in self.policy.exclusive_types \
            or u.type in self._level(resources).xtypes
        nxt, kind, nslots, label, pres = self._test(u, resources, pristine)
        self.preorder += 1
        if kind == "none":
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
        avail = self._avail(u, m)
        if avail == 0:
            return False, x_in
        if not self.policy.finish_vtx(u, resources, dfu):
            return False, x_in
        if self._resolve(dfu, to_parent) != 0:
            return False, x_in
        to_parent.avail = avail
        to_parent.overall = dfu.overall
        self.postorder += 1
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

    def _select(self, req: MatchRequest, m: _Meta, excl: bool) -> tuple[int, int, bool]:
        root = self.g.root
        self._marks = {}
        self._mark_edges: list[tuple[Vertex, Vertex]] = []
        self._visited = set()
        self.preorder = self.postorder = 0
        self.policy.ml_scores = 0
        self._levels: dict[int, _Level] = {}  # request list id -> _Level (see _level)
        self._enforced = 0
        self._cache = self._subtree_cache if self._cacheable and m.constraint is None else None
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
            return -2, 0, False
        needs = 1
        for r in req.resources:
            if r.type == root.type:
                count = calc_count(r, dfu.avail)
                if count == 0:
                    return -2, 0, False
                needs = count
        for ev in dfu.types.values():
            if ev.qual == 0:
                return -2, 0, False
        self._enforce(dfu, True)
        return 0, needs, x_in

    # ---------------------------------------------------------------- update
    def _update(self, m: _Meta, needs: int, excl: bool) -> list[Emit]:
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
        for e_parent, e_child in self._mark_edges:
            marked.setdefault(e_parent.uniq_id, []).append(e_child)

        def upd(u: Vertex, needs: int, x: bool, level: int,
                inherited: bool = False) -> tuple[int, dict[str, int]]:
            n = 0
            agg: dict[str, int] = {}
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
            for c in kids:
                if c.uniq_id in seen:
                    continue
                mk = marks.get((u.uniq_id, c.uniq_id))
                if mk is None:
                    if not shadow or c.status != "up":
                        continue
                    mk = (self._avail(c, m) or c.size, True)
                if shadow and not mk[1]:
                    mk = (mk[0], True)
                sub, cagg = upd(c, mk[0], mk[1], level + 1, shadow)
                if sub > 0:
                    n += sub
                    for t, k in cagg.items():
                        agg[t] = agg.get(t, 0) + k
            if x:
                n += 1
                if u.schedule is None:
                    u.schedule = Planner(0, INF, u.size, u.type)
                u.hold_units(jobid, u.schedule.add_span(at, duration, needs), allocating)
            if n > 0:
                uid = u.uniq_id
                subtree_cache.pop(uid, None)
                if u.x_checker is None:
                    u.x_checker = Planner(0, INF, X_CHECKER_NJOBS, "x_checker")
                u.hold(jobid, u.x_checker.add_span(at, duration, 1))
                if agg:
                    self._ag_put(u, jobid, at, end, agg)  # reads agg, keeps no reference
                job_vertices[uid] = u
                out.append(Emit(u, needs, x, level))
                up: dict[str, int] = dict(agg)
                if u.type in prune_types:
                    up[u.type] = up.get(u.type, 0) + (u.size if x else u.size - needs)
                if stop_on_1 and u.children:
                    w = self._edge_weight(u)
                    if w is not None:
                        self._set_weight(u, w)
                return n, up
            return 0, {}

        try:
            upd(self.g.root, needs, excl, 1)
        finally:
            # a recursive closure is a reference cycle (function <-> cell) holding all of
            # the above; break it so refcounting frees it (see freeze_job_state)
            upd = None  # noqa: F841
        return out

    # ------------------------------------------------------------------ API
    def _request(self, jobspec) -> MatchRequest:
        if isinstance(jobspec, MatchRequest):
            return jobspec
        return from_jobspec(jobspec)

    def match(self, jobspec, op: str = "allocate", jobid: int | None = None,
              at: int | None = None) -> MatchResult:
        """Match ``jobspec`` (dict, YAML text via Jobspec, or MatchRequest)."""
        t0 = time.perf_counter()
        if jobid is None:
            jobid = self.next_jobid
        self.next_jobid = max(self.next_jobid, jobid + 1)
        if jobid in self.jobs:
            raise TraverserError(f"job {jobid} already exists")
        try:
            req = self._request(jobspec)
        except RequestError:
            raise
        if not req.resources:
            raise TraverserError("jobspec requests no resources")
        now = 0 if at is None else at
        duration = req.duration if req.duration > 0 else INF - now
        constraint = req.constraint if req.constraint is not None and req.constraint.op else None
        m = _Meta(now, duration, jobid, constraint)
        root = self.g.root
        excl = any(r.type == root.type and r.exclusive is True for r in req.resources)
        self._req_xtypes = set()
        self._collect_xtypes(req.resources)
        self.total_preorder = self.total_postorder = 0
        if op == "satisfiability":
            ok = self._satisfiable(req, m, excl)
            self.total_preorder, self.total_postorder = self.preorder, self.postorder
            if not ok:
                raise Unsatisfiable()
            return MatchResult(jobid, "SATISFIABLE", now, duration, time.perf_counter() - t0)
        if op not in ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability"):
            raise TraverserError(f"unknown match op {op!r}")
        self._feasible(req, m, op)
        rc, needs, x = self._select(req, m, excl)
        self.total_preorder, self.total_postorder = self.preorder, self.postorder
        if rc != 0:
            if op == "allocate_with_satisfiability":
                if not self._satisfiable(req, m, excl):
                    raise Unsatisfiable()
                raise NoMatch(True)
            if op == "allocate":
                raise NoMatch(True)
            m.alloc = "reserve"
            for t in self._candidate_times(req, m):
                m.at = t
                rc, needs, x = self._select(req, m, excl)
                self.total_preorder += self.preorder
                self.total_postorder += self.postorder
                if rc == 0:
                    break
            if rc != 0:
                m.alloc = "reserve"
                if not self._satisfiable(req, m, excl):
                    raise Unsatisfiable()
                raise NoMatch(True)
        status = "ALLOCATED" if m.alloc == "alloc" else "RESERVED"
        if m.at + m.duration > INF or m.at + m.duration < 0:
            m.duration = INF - m.at
        self.jobs[jobid] = Job(jobid, m.at, m.duration, status)
        with gc_paused():  # many small planner lists, no cycles: skip gc passes
            sel = self._update(m, needs, x)
            freeze_job_state()
        if not sel:
            # Like Fluxion: a request with nothing exclusive (no slot) allocates nothing.
            self.jobs.pop(jobid, None)
            raise NoMatch(False, "request selects nothing exclusively (no slot?)")
        return MatchResult(jobid, status, m.at, m.duration, time.perf_counter() - t0, sel)

    def replay(self, picks: list[tuple[Vertex, int, bool]], jobid: int, at: int, duration: int,
               reserve: bool = False) -> MatchResult:
        """Fluxion's ``update``: give ``jobid`` exactly the vertices an earlier match chose
        (``(vertex, units, exclusive)`` each, e.g. read back from that match's JGF), as
        that match would have: same spans, tags and subtree counts, same output.

        All or nothing: an exclusive pick must have nothing of another job at or below
        it during the window and its units free; a shared pick must not be held
        exclusively by another job. Raises TraverserError naming what is wrong."""
        t0 = time.perf_counter()
        if jobid in self.jobs:
            raise TraverserError(f"job {jobid} already exists")
        if at < 0 or duration < 1:
            raise TraverserError(f"bad window: start {at}, duration {duration}")
        root = self.g.root
        chosen = {v.uniq_id: (v, needs, x) for v, needs, x in picks}
        if root.uniq_id not in chosen:
            raise TraverserError(f"the allocation does not include the root {root.name}")
        m = _Meta(at, min(duration, INF - at), jobid, None)
        m.alloc = "reserve" if reserve else "alloc"
        for v, needs, x in chosen.values():
            if v.parent is not None and v.parent.uniq_id not in chosen:
                raise TraverserError(f"{v.name}'s parent {v.parent.name} is not in the allocation")
            if needs < 0 or needs > v.size:
                raise TraverserError(f"{v.name}: {needs} units of {v.size}")
            busy = v.schedule is not None and _free_during(v.schedule, m.at, m.duration) < (
                needs if x else v.size)
            if busy or (x and self._x_busy(v, m)):
                raise TraverserError(f"{v.name} is not free for job {jobid}")
        self.next_jobid = max(self.next_jobid, jobid + 1)
        self._marks = {}
        self._mark_edges = []
        # the picks name every vertex, so no request type needs to take whole subtrees
        self._req_xtypes = set()
        for v, needs, x in chosen.values():
            if v.parent is not None:
                self._marks[(v.parent.uniq_id, v.uniq_id)] = (needs, x)
                self._mark_edges.append((v.parent, v))
        _v, needs, x = chosen[root.uniq_id]
        self.jobs[jobid] = Job(jobid, m.at, m.duration, "RESERVED" if reserve else "ALLOCATED")
        with gc_paused():
            sel = self._update(m, needs, x)
            freeze_job_state()
        if not sel:
            self.jobs.pop(jobid, None)
            raise TraverserError("the allocation selects nothing exclusively")
        return MatchResult(jobid, self.jobs[jobid].status, m.at, m.duration,
                           time.perf_counter() - t0, sel)

    def _collect_xtypes(self, resources: list[Request]) -> None:
        for r in resources:
            if r.exclusive is True:
                self._req_xtypes.add(r.type)
            self._collect_xtypes(r.with_)

    def _satisfiable(self, req: MatchRequest, m: _Meta, excl: bool) -> bool:
        sm = _Meta(INF - m.duration - 1, m.duration, m.jobid, m.constraint)
        sm.alloc = "sat"
        sm.sat = True
        rc, _n, _x = self._select(req, sm, excl)
        return rc == 0

    def nodes_up(self) -> int:
        """Nodes that are up with every ancestor up (a down vertex hides its subtree)."""
        if self._nodes_up is None:
            self._nodes_up = self._count_nodes_up()
        return self._nodes_up

    def _count_nodes_up(self) -> int:
        # from the node index up, not the root down: a 5,000-node graph has 71
        # vertices per node and only the node's ancestors decide
        root = self.g.root
        n = 0
        for v in self.g.by_type.get("node", ()):
            u = v
            while u is not None and u is not root and u.status == "up":
                u = u.parent
            if u is root and root.status == "up":
                n += 1
        return n

    def _feasible(self, req: MatchRequest, m: _Meta, op: str) -> None:
        """Fluxion's request_feasible: raise early when too few nodes could ever serve."""
        want = self._wanted(req.resources, "node")
        if not want:
            return
        sat_op = op == "allocate_with_satisfiability"
        up = self.nodes_up()
        if m.constraint is None and want <= up:
            return
        if want > up:
            if sat_op:
                raise Unsatisfiable("not enough nodes up")
            raise NoMatch(True, "not enough nodes up")
        t = m.at if op == "allocate" else INF - 1
        feasible = 0
        for v in self.g.by_type.get("node", []):
            if m.constraint is not None and not m.constraint.match(v.name, v.rank, v.properties):
                continue
            if not sat_op and v.status != "up":
                continue
            if v.schedule is not None and _free_during(v.schedule, t, m.duration) <= 0:
                continue
            feasible += 1
            if feasible >= want:
                return
        if sat_op:
            raise Unsatisfiable("constraints leave too few nodes")
        raise NoMatch(True, "constraints leave too few nodes")

    def _wanted(self, resources: list[Request], t: str) -> int:
        """How many ``t`` vertices the request needs at least (Fluxion's primed dfv)."""
        return sum(self._count_type(r, t, 1) for r in resources)

    def _count_type(self, r: Request, t: str, mult: int) -> int:
        n = 0
        if r.type == t:
            return mult * r.count.min
        for c in r.with_:
            n += self._count_type(c, t, mult * r.count.min)
        return n

    def _candidate_times(self, req: MatchRequest, m: _Meta):
        """Start times to try a reservation at, as Fluxion's schedule() asks them: the
        root's subtree planner's avail_time_first/next from ``now + 1`` for the request's
        aggregate counts (scheduled points only, with that planner's stale-count rules,
        which decide what a graph grown by ``attach`` offers)."""
        sp = self.g.root.subplan
        if sp is None:  # nothing planned below the root: everything is free now
            return
        counts = dict.fromkeys(sp.totals, 0)
        for r in req.resources:
            if r.type in counts:
                counts[r.type] += r.count.min
            for t, n in self._user_data(r).items():
                if t in counts:
                    counts[t] += r.count.min * n
        t = sp.avail_time_first(m.at + 1, m.duration, counts)
        while t is not None:
            yield t
            t = sp.avail_time_next()

    def cancel(self, jobid: int) -> tuple[int, int]:
        """Release every resource of ``jobid``; returns (preorder, postorder) visit counts."""
        job = self.jobs.pop(jobid, None)
        if job is None:
            raise TraverserError(f"nonexistent job {jobid}")
        # Fluxion walks down from the root through tagged vertices, visiting every
        # child of each; count those visits without walking untagged siblings.
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
        for v in list(job.vertices.values()):
            self._release(v, jobid)
        if jobid in root.tags:
            self._release(root, jobid)
        self.total_preorder, self.total_postorder = pre, post
        return pre, post

    def _release(self, u: Vertex, jobid: int) -> None:
        self._invalidate(u)
        # an unwritten container is the shared read-only empty: nothing to take out
        if u.tags:
            u.tags.discard(jobid)
            sid = u.xspans.pop(jobid, None)
            if sid is not None:
                u.x_checker.rem_span(sid)
        self._ag_drop(u, jobid)
        sid = u.spans.pop(jobid, None) if u.spans else None
        if sid is not None:
            u.schedule.rem_span(sid)
        if u.allocations:
            u.allocations.discard(jobid)
        if u.reservations:
            u.reservations.discard(jobid)

    def _edge_weight(self, u: Vertex) -> int | None:
        """Fluxion's upd_by_outedges: the new weight of the edge into ``u`` after an
        update through it, the free units (now) of the LAST type its subtree filter
        tracks (the scarcest, by Fluxion's heuristic); None leaves the weight as it is.
        Cancels never change weights (Fluxion's cancel does not touch by_outedges)."""
        t = self._last_type.get(u.type, "")
        if t == "":
            types = self.subplan_types(u)
            t = self._last_type[u.type] = types[-1] if types else None
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

    def partial_cancel(self, jobid: int, ranks: list[int]) -> bool:
        """Release the part of ``jobid`` on ``ranks``; True when nothing of the job is left."""
        job = self.jobs.get(jobid)
        if job is None:
            raise TraverserError(f"nonexistent job {jobid}")
        rankset = set(ranks)
        pre = post = 0
        for r in rankset:
            for v in self.g.by_rank.get(r, []):
                pre += 1
                if jobid in v.tags:
                    post += 1
                    self._release(v, jobid)
                    job.vertices.pop(v.uniq_id, None)
        self._rebuild_job(jobid, job)
        # Fluxion reports no traversal for a partial cancel (it releases by rank index)
        self.total_preorder = self.total_postorder = 0
        if jobid not in self.g.root.tags:
            self.jobs.pop(jobid, None)
            return True
        return False

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

    def remove_subgraph(self, v: Vertex) -> list[int]:
        """Drop ``v``'s subtree from the graph, releasing what jobs held there.

        Returns the jobs that no longer hold anything (fully released)."""
        sub = list(self.g.walk(v))
        affected = {j for u in sub for j in u.tags}
        for u in sub:
            for j in list(u.tags):
                self._release(u, j)
        self.g.remove_vertex(v)
        gone = []
        for j in sorted(affected):
            job = self.jobs.get(j)
            if job is None:
                continue
            for u in sub:
                job.vertices.pop(u.uniq_id, None)
            self._rebuild_job(j, job)
            if j not in self.g.root.tags:
                self.jobs.pop(j, None)
                gone.append(j)
        self.reinit()
        return gone

    def find(self, expr: str) -> list[Emit]:
        """Vertices matching a find expression (``status=down``, ``sched-now=allocated``...),
        with their ancestors, in post order (feed to a writer)."""
        from fluxnode.scheduler.traversers.find import find

        return find(self, expr)

    def info(self, jobid: int) -> Job:
        job = self.jobs.get(jobid)
        if job is None:
            raise TraverserError(f"nonexistent job {jobid}")
        return job

    def set_status(self, target: int | str, status: str) -> None:
        """Mark a vertex (by path) or a rank's subtree root up/down; allocations are kept."""
        if status not in ("up", "down"):
            raise TraverserError(f"unrecognized status {status!r}")
        if isinstance(target, int):
            vs = self.g.by_rank.get(target, [])
            if not vs:
                raise TraverserError(f"no vertex with rank {target}")
            v = min(vs, key=lambda x: len(x.path))
        else:
            vs = self.g.lookup(target)
            if not vs:
                raise TraverserError(f"could not find path {target} in resource graph")
            v = vs[0]
        v.status = status
        self._nodes_up = None
        self._invalidate(v)

    def add_resources(self, R: dict) -> None:
        """Grow the graph from another R (vertices whose path exists are kept)."""
        from fluxnode.scheduler.readers.rv1 import extend_rv1
        extend_rv1(self.g, R)
        self.reinit()
