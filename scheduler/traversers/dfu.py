"""Depth-first-and-up (DFU) matching of jobspecs against a resource graph.

This is the scheduler library's public entry point (``fluxnode resource-query`` and the
scheduler service's live graph use it through its subclass ``dfu_fast.FastTraverser``;
the binder reaches it only through the service)::

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

As Fluxion splits ``dfu`` from ``dfu_impl``, this module holds the public calls
and the order of a match's steps; the walks are in ``dfu_select`` (test, prune,
score, choose), ``dfu_update`` (spans, emit), ``dfu_cancel`` (cancel, partial
cancel) and ``dfu_reservation`` (feasibility, satisfiability, start times), mixins over
``dfu_impl.DfuImpl``; how a match fails is ``match_errors``'.
"""

from __future__ import annotations

import errno as _errno
import gc
import time
from dataclasses import dataclass, field
from itertools import filterfalse
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
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.jobspec.request import MatchRequest, Request, from_jobspec
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.traversers.aux_walk import AuxWalk
from fluxnode.scheduler.traversers.dfu_cancel import DfuCancel
from fluxnode.scheduler.traversers.dfu_impl import (
    INF,
    UNSET_WEIGHT,
    Emit,
    Job,
    JobMeta,
    SubtreeCache,
    free_during,
)
from fluxnode.scheduler.traversers.dfu_reservation import DfuReservation
from fluxnode.scheduler.traversers.dfu_select import DfuSelect
from fluxnode.scheduler.traversers.find import find
from fluxnode.scheduler.traversers.job_spans import SpanPool
from fluxnode.scheduler.traversers.match_errors import (
    FluxionAbort,
    NoMatch,
    TraverserErrno,
    TraverserError,
    Unsatisfiable,
)

__all__ = [
    "DEFAULT_PRUNE_FILTERS",
    "FluxionAbort",
    "MatchResult",
    "NoMatch",
    "Traverser",
    "TraverserErrno",
    "TraverserError",
    "Unsatisfiable",
]

_children_of, _type_of = attrgetter("children"), attrgetter("type")

# Fluxion's default subtree filters (sched-fluxion-resource's and resource-query's):
# free cores and free (exclusively held) nodes below every vertex. The last type is
# also what orders children for the first-match policies (see _edge_weight).
DEFAULT_PRUNE_FILTERS = "ALL:core,ALL:node"

# the match ops that plan nothing (Fluxion's AT_NO_ALLOC), and the op each searches as
NO_ALLOC_OPS = {"without_allocating": "allocate",
                "without_allocating_future": "allocate_orelse_reserve"}


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


class Traverser(DfuSelect, AuxWalk, DfuCancel, DfuReservation):
    """The public traverser: match, replay, cancel, find, status and graph growth.

    The walks it runs are its bases' (see ``dfu_impl``); this class owns the
    state's construction and the order of a match's steps."""

    _subtree_cacheable = True  # subclasses whose walk differs opt out

    def __init__(
        self,
        graph: ResourceGraph,
        policy: str | Policy = "first",
        prune_filters: str = DEFAULT_PRUNE_FILTERS,
        subsystems: list[str] | None = None,
        loaded: ResourceGraph | None = None,
    ) -> None:
        self.g = graph
        # the graph as loaded, when ``graph`` is its projection on another subsystem
        # (ResourceGraph.project, -S PA): Fluxion's slot_match reads the out-edges a
        # vertex has there, in every subsystem (see DfuSelect._slot_sits_at); set only
        # then, as _aux below: the hot walks read this instance's attributes, whose
        # table gains nothing for a selection without them (the class holds the defaults)
        if loaded is not None:
            self.loaded = loaded
        self.policy = policy if isinstance(policy, Policy) else Policy.parse(policy)
        self.subsystems = subsystems or [CONTAINMENT]
        self.prune_types = self._parse_prune(prune_filters)
        self.jobs: dict[int, Job] = {}
        self.next_jobid = 1
        self._last_request: tuple[Jobspec, MatchRequest] | None = None  # see _request
        self.preorder = 0
        self.postorder = 0
        self.total_preorder = 0
        self.total_postorder = 0
        self._marks: dict[tuple[int, int], tuple[int, bool]] = {}
        self._visited: set[int] = set()
        # Fluxion's errno as the walks leave it (see TraverserErrno); report_errno turns
        # a failure with an errno other than EBUSY/ENODEV into TraverserErrno
        self.errno = 0
        self.report_errno = False
        # the end of the graph's time (Fluxion's graph_duration.graph_end): a job ends by
        # it, one without a duration lasts until it, a longer one is refused (EINVAL);
        # resource-query's is Fluxion's SYSTEM_MAX_DURATION, the service's the horizon
        self.graph_end = INF
        # levels Fluxion's writers' indentation gained for good (dfu_update._update)
        self.level_leak = 0
        # types a request asked for exclusively and that stay so for every later match:
        # Fluxion's prime_jobspec adds them to the matcher's set before jobmeta_t::build,
        # and dfu_traverser_t::run returns on a build error (a duration past the graph's
        # end) without putting the set back; reproduced only with report_errno
        # (resource-query), never in the service's placements
        self.leaked_xtypes: set[str] = set()
        self.err_msg = []
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

    def reinit(self) -> None:
        """(Re)compute subtree totals after the graph changed shape."""
        with gc_paused():
            self._reinit()
        if len(self.g.vertices) >= FREEZE_MIN_VERTICES:
            freeze_for_gc(self.g)

    def renumbered(self, mapping: dict[int, int]) -> None:
        """The graph's vertices got new ``uniq_id``s (old -> new; no job holds any): carry
        the edge weights over to the new ids. Call reinit() next."""
        self._weights = {mapping[uid]: w for uid, w in self._weights.items() if uid in mapping}
        self._weights_via = {(mapping[a], mapping[b]): w for (a, b), w in
                             self._weights_via.items() if a in mapping and b in mapping}

    def _reinit(self) -> None:
        self._totals: dict[int, dict[str, int]] = {}
        # child uniq_id -> weight of the edge into it (stop-on-first exploration order);
        # kept across reinit for vertices that stay, as Fluxion keeps its edges' weights
        old_weights = getattr(self, "_weights", {})
        self._weights: dict[int, int] = {}
        # (parent uniq_id, child uniq_id) -> weight, for an edge into a child from other
        # than its containment parent (ASSOCIATE_IN); absent: never weighed (UINT64_MAX)
        self._weights_via: dict[tuple[int, int], int] = getattr(self, "_weights_via", {})
        self._order: dict[int, list[tuple[int, int, int]]] = {}
        self._leaf_order: dict[int, list[Vertex]] = {}
        self._last_type: dict[
            str, str | None
        ] = {}  # vertex type -> last filter type (_edge_weight)
        self._nodes_up: int | None = None
        self._tracked: dict[str, set[str]] = {}
        self._child_types: dict[int, set[str]] = {}
        # Exhaustive policies score every vertex on every match; a subtree nothing
        # changed in scores the same for the same request level and job window, so its
        # outcome (candidate groups, avail, score) is kept per vertex until a span,
        # status, property (variation scores by one) or the graph changes below it.
        # Only a match's own window is kept.
        self._subtree_cache = SubtreeCache()
        self._cache_window: tuple | None = None  # see DfuSelect._select
        # the shared planners update walks hand out, kept for the next walks with the
        # same window (dfu_update.SpanPool)
        self._span_pool = SpanPool()
        # the auxiliary subsystems the select walk explores too (aux_walk), when the
        # dominant one is containment (another dominant one walks a projected graph)
        dominant, *aux = self.subsystems
        aux = [s for s in aux if s in self.g.subsystems] if dominant == CONTAINMENT else []
        if aux or self._aux:
            self._aux = tuple(aux)
        # the subtree cache and the fast walk's shortcuts know no auxiliary walk
        self._cacheable = (not self.policy.stop_on_1 and type(self)._subtree_cacheable
                           and not self._aux)
        root = self.g.roots.get(CONTAINMENT)
        if root is None:
            raise TraverserError("graph has no containment root")
        # A 16,384-node graph has 1.2M vertices, nearly all leaves: the passes below go
        # over every vertex in C (filter, map) where they can.
        # breadth first: a parent before its children
        order = [root]
        for v in filter(_children_of, order):
            order += v.children
        inner = list(filter(_children_of, order))
        # Like Fluxion, leaf types that no filter names are tracked at the cluster
        # vertex; aggregates are kept for every leaf type (the first policy's weights)
        leaf_types = set(map(_type_of, filterfalse(_children_of, order)))
        if len(self.g.roots) > 1:
            # a leaf is a vertex without out-edges in any subsystem (prime_pruning_filter's
            # out_degree): a pdu that supplies power is not one, and gets a filter
            leaf_types = {v.type for v in filterfalse(_children_of, order)
                          if not v.aux_children}
        self._leaf_types = leaf_types
        named = {t for lst in self.prune_anchored.values() for t in lst}
        self.auto_anchored = sorted(leaf_types - named)
        # Fluxion's prime_pruning_filter makes a leaf's type a pruning type when its
        # depth-first walk first reaches a leaf of it (set_pruning_type); a vertex of that
        # type it entered before (one with children, e.g. a core above its PUs, or a core
        # of the graph before an `attach` brought leaf cores) is not counted in that pass
        # (accum_if), and is from the next initialize on (the type stays a pruning type)
        uncounted = self._uncounted(root, leaf_types - self.prune_types)
        self.prune_types |= leaf_types
        prune = self.prune_types
        totals = self._totals
        # equal totals are one dict (read-only): the update walk tells vertices whose
        # subtree filters it may share by it (see dfu_update._JobSpans.inner_kit)
        same: dict[tuple, dict[str, int]] = {}
        # children before their parent: their totals are known when it is summed
        for v in reversed(inner):
            tot: dict[str, int] = {}
            for c in v.children:
                t = c.type
                if t in prune and c.uniq_id not in uncounted:
                    tot[t] = tot.get(t, 0) + c.size
                if c.children:
                    for t, n in totals[c.uniq_id].items():
                        tot[t] = tot.get(t, 0) + n
            totals[v.uniq_id] = same.setdefault(tuple(tot.items()), tot)
        for v in [v for v in order if v.subplan is not None]:
            # the subtree changed shape: new totals, spans kept
            if v.agspans:
                v.subplan = v.subplan.owned()
                v.subplan.update(totals.get(v.uniq_id, {}))
            else:
                v.subplan = None
        weights = self._weights
        for v in inner:
            weights[v.uniq_id] = old_weights.get(v.uniq_id, UNSET_WEIGHT)
        if len(self.g.roots) > 1:
            # a containment leaf with edges in another subsystem (a pdu) is no leaf to
            # Fluxion: its edge weighs UINT64_MAX until an update passes through it, and
            # its parent orders it so among children that have their weights
            for v in order:
                if not v.children and v.aux_children:
                    weights[v.uniq_id] = old_weights.get(v.uniq_id, UNSET_WEIGHT)

    def _uncounted(self, root: Vertex, new_types: set[str]) -> set[int]:
        """The uniq_ids of the vertices of ``new_types`` (leaf types not yet pruning types)
        that Fluxion's depth-first prime walk enters before its first leaf of that type:
        it does not count them this time (see _reinit)."""
        if not new_types:
            return set()
        inner_types = {v.type for v in self.g.vertices if v.children}
        if not new_types & inner_types:
            return set()
        out: set[int] = set()
        seen_leaf: set[str] = set()
        multi = len(self.g.roots) > 1
        stack = [root]
        while stack:
            v = stack.pop()
            t = v.type
            if t in new_types and t not in seen_leaf:
                if not v.children and not (multi and v.aux_children):
                    seen_leaf.add(t)
                else:
                    out.add(v.uniq_id)
            stack.extend(reversed(v.children))
        return out

    def _why_unsatisfiable(self, req: MatchRequest) -> str:
        """Why `req` can never fit this graph, in the request's terms (Fluxion only says
        "unsatisfiable request"): a type the graph lacks, a count of 0, more of a type than
        the graph holds, or else a shape no part of the graph has."""
        have: dict[str, int] = {}
        for rtype, vs in self.g.by_type.items():
            total = sum(max(v.size, 1) for v in vs if v.uniq_id >= 0)
            if total:
                have[rtype] = total
        need: dict[str, int] = {}
        stack = [(r, 1, f"resources[{i}]") for i, r in enumerate(req.resources)]
        while stack:
            r, mult, path = stack.pop()
            if r.type != "slot" and r.type not in have:
                return (f"{path}: no resource of type {r.type!r} in this instance (it has "
                        f"{', '.join(sorted(have))})")
            if r.count.min < 1:
                return f"{path}.count: asks for 0 of type {r.type!r}; a count must be at least 1"
            n = mult * r.count.min
            if r.type != "slot":
                need[r.type] = need.get(r.type, 0) + n
            stack.extend((c, n, f"{path}.with[{i}]") for i, c in enumerate(r.with_))
        for rtype, n in sorted(need.items()):
            if n > have[rtype]:
                return f"asks for {n} of type {rtype!r} in all; this instance has {have[rtype]}"
        if req.constraint is not None and req.constraint.op:
            return ("no set of resources that meets the constraints can hold it "
                    f"(constraints: {req.constraint.to_dict()})")
        return ("no part of this instance can ever hold it: the instance has enough of each "
                "type in all, but not grouped as the request asks (e.g. per node or per slot)")

    def _request(self, jobspec) -> MatchRequest:
        """The request tree of ``jobspec``, the last one kept for the same `Jobspec` (the
        walks change no request), as resource-query's jobspec cache hands it back."""
        if isinstance(jobspec, MatchRequest):
            return jobspec
        last = self._last_request
        if last is not None and last[0] is jobspec:
            return last[1]
        req = from_jobspec(jobspec)
        if isinstance(jobspec, Jobspec):
            self._last_request = (jobspec, req)
        return req

    def match(self, jobspec, op: str = "allocate", jobid: int | None = None,
              at: int | None = None) -> MatchResult:
        """Match ``jobspec`` (dict, YAML text via Jobspec, or MatchRequest).

        The whole match runs with the cyclic GC paused, and what it left in the young
        generation is frozen once that reaches GC_GEN0_THRESHOLD (freeze_job_state).
        A walk makes no reference cycles (tests/scheduler/graph/test_graph.py checks
        every policy), and the outcomes it keeps (subtree caches, a fast-mode root
        index: ~150 objects per single-core match) were otherwise scanned by a young
        collection every ~130 matches and again by the older ones: a quarter of a
        single-core ``low`` match on 5,000 nodes. (gc_paused's steps in line, without
        its generator's set-up on every match.)"""
        was = gc.isenabled()
        gc.disable()
        self.err_msg = []
        try:
            return self._match(jobspec, op, jobid, at)
        finally:
            freeze_job_state()
            if was:
                gc.enable()

    def _match(self, jobspec, op: str, jobid: int | None, at: int | None) -> MatchResult:
        t0 = time.perf_counter()
        if jobid is None:
            jobid = self.next_jobid
        self.next_jobid = max(self.next_jobid, jobid + 1)
        if jobid in self.jobs:
            raise TraverserError(f"job {jobid} already exists")
        req = self._request(jobspec)
        if not req.resources:
            raise TraverserError("jobspec requests no resources")
        now = 0 if at is None else at
        self._req_xtypes = set(self.leaked_xtypes)
        self._collect_xtypes(req.resources)
        try:
            duration = self._job_duration(req, now)
        except (TraverserError, NoMatch):
            if self.report_errno:  # resource-query's answers; the service keeps none
                self.leaked_xtypes |= self._req_xtypes
            raise
        constraint = req.constraint if req.constraint is not None and req.constraint.op else None
        m = JobMeta(now, duration, jobid, constraint)
        root = self.g.root
        excl = any(r.type == root.type and r.exclusive is True for r in req.resources)
        # total_preorder/postorder (resource-query -e) change as Fluxion's m_total_* do in
        # dfu_traverser_t::schedule: set by a walk that matched, added to by the
        # satisfiability and reservation walks after a failed one, and left as the last
        # match left them when a request fails before or at its first walk
        if op == "satisfiability":
            self._read_root_filter()
            ok = self._sat_check(req, m, excl)
            self.total_preorder, self.total_postorder = self.preorder, self.postorder
            if not ok:
                self._raise_failed(req, False)
            return MatchResult(jobid, "SATISFIABLE", now, duration, time.perf_counter() - t0)
        # Fluxion's without_allocating (_future) searches as allocate (orelse_reserve)
        # does, then writes what it found without planning it (AT_NO_ALLOC)
        no_alloc = m.no_alloc = op in NO_ALLOC_OPS
        op = NO_ALLOC_OPS.get(op, op)
        if op not in ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability"):
            raise TraverserError(f"unknown match op {op!r}")
        try:
            self._feasible(req, m, op)
        except Unsatisfiable:
            self.errno = _errno.ENODEV
            raise
        except NoMatch:
            self.errno = _errno.EBUSY
            raise
        rc, needs, x = self._select(req, m, excl)
        if rc == 0:
            self.total_preorder, self.total_postorder = self.preorder, self.postorder
        else:
            if op != "allocate":
                self._read_root_filter()
            if op == "allocate_with_satisfiability":
                self.errno = _errno.EBUSY
                sat = self._sat_check(req, m, excl)
                self.total_preorder += self.preorder
                self.total_postorder += self.postorder
                self._raise_failed(req, sat)
            if op == "allocate":
                self.errno = _errno.EBUSY
                raise NoMatch(True)
            m.alloc = "reserve"
            times = self._candidate_times(req, m)
            for t in times:
                m.at = t
                rc, needs, x = self._select(req, m, excl)
                self.total_preorder += self.preorder
                self.total_postorder += self.postorder
                if rc == 0:
                    next(times, None)  # schedule()'s loop step after the fitting walk
                    break
            if rc != 0:
                # the planner has no start time left (ENOENT): schedule() sets EBUSY and
                # asks whether the request could ever fit
                m.alloc = "reserve"
                self.errno = _errno.EBUSY
                self._raise_failed(req, self._sat_check(req, m, excl))
        if m.at >= self.graph_end:
            # dfu_traverser_t::run: a start at the graph's end is no start (EBUSY),
            # one past it an error
            self.errno = _errno.EBUSY if m.at == self.graph_end else _errno.EINVAL
            if self.errno == _errno.EBUSY or not self.report_errno:
                raise NoMatch(True, "no start time before the graph's end")
            raise TraverserErrno(self.errno)
        status = "ALLOCATED" if m.alloc == "alloc" else "RESERVED"
        if m.at + m.duration > self.graph_end or m.at + m.duration < 0:
            m.duration = self.graph_end - m.at
        self.jobs[jobid] = Job(jobid, m.at, m.duration, status)
        # the edge weights before an update that is taken back (see _unplan)
        weighed = self._weights.copy() if no_alloc and self.policy.stop_on_1 else None
        sel = self._update(m, needs, x)  # the GC is paused (see match)
        if no_alloc and sel:
            self._unplan(jobid, sel, weighed)
            self.next_jobid = jobid  # no job id is used up
            return MatchResult(jobid, "MATCHED", m.at, m.duration, time.perf_counter() - t0,
                               sel)
        if not sel:
            # Like Fluxion: a request with nothing exclusive (no slot) allocates nothing.
            # Fluxion's update fails without setting errno: the caller sees the errno
            # the steps before it left (EBUSY, ENODEV, or an older one).
            self.jobs.pop(jobid, None)
            if self.report_errno and self.errno == _errno.ENODEV:
                raise Unsatisfiable(self._why_unsatisfiable(req))
            if self.report_errno and self.errno != _errno.EBUSY:
                raise TraverserErrno(self.errno)
            raise NoMatch(False, "request selects nothing exclusively (no slot?)")
        return MatchResult(jobid, status, m.at, m.duration, time.perf_counter() - t0, sel)

    def _read_root_filter(self) -> None:
        """Fluxion's satisfiability walk and reservation search start from the root's
        subtree filter (``subplans.at (dom)`` in dfu_traverser_t::is_satisfiable and
        ::schedule, once a first walk failed): a root the prune filters give none (under
        ``-S PA -p rack:node`` the power panel) throws std::out_of_range from
        subsystem_selector_t::at, which nothing catches, and resource-query aborts.
        resource-query (``report_errno``) ends so too; the service walks on."""
        if self.report_errno and not self.subplan_types(self.g.root, shown=True):
            raise FluxionAbort("std::out_of_range", "no element available")

    def _sat_check(self, req: MatchRequest, m: JobMeta, excl: bool) -> bool:
        """Fluxion's satisfiability walk far in the future; a failure with EBUSY (or
        ERANGE) becomes ENODEV, any other errno is kept."""
        ok = self._satisfiable(req, m, excl)
        if not ok and self.errno in (_errno.EBUSY, _errno.ERANGE):
            self.errno = _errno.ENODEV
        return ok

    def _raise_failed(self, req: MatchRequest, satisfiable: bool):
        """Raise for a match that failed after its satisfiability walk, by errno when
        ``report_errno`` is set (resource-query), else by the walk's answer."""
        if self.report_errno:
            if self.errno == _errno.ENODEV:
                raise Unsatisfiable(self._why_unsatisfiable(req))
            if self.errno != _errno.EBUSY:
                raise TraverserErrno(self.errno)
            raise NoMatch(True)
        if not satisfiable:
            raise Unsatisfiable(self._why_unsatisfiable(req))
        raise NoMatch(True)

    def replay(self, picks: list[tuple[Vertex, int, bool]], jobid: int, at: int, duration: int,
               reserve: bool = False, x_checked: bool = True) -> MatchResult:
        """Fluxion's ``update``: give ``jobid`` exactly the vertices an earlier match chose
        (``(vertex, units, exclusive)`` each, e.g. read back from that match's JGF), as
        that match would have: same spans, tags and subtree counts, same output.

        All or nothing: an exclusive pick must have nothing of another job at or below
        it during the window and its units free; a shared pick must not be held
        exclusively by another job. Raises TraverserError naming what is wrong.
        ``x_checked`` false: the x_checkers are not consulted (the rv1exec reader checks
        only the schedule planners, and its update walk adds to the x_checkers what they
        hold)."""
        t0 = time.perf_counter()
        if jobid in self.jobs:
            raise TraverserError(f"job {jobid} already exists")
        if at < 0 or duration < 1:
            raise TraverserError(f"bad window: start {at}, duration {duration}")
        root = self.g.root
        chosen = {v.uniq_id: (v, needs, x) for v, needs, x in picks}
        if root.uniq_id not in chosen:
            raise TraverserError(f"the allocation does not include the root {root.name}")
        m = JobMeta(at, min(duration, INF - at), jobid, None)
        m.alloc = "reserve" if reserve else "alloc"
        for v, needs, x in chosen.values():
            if v.parent is not None and v.parent.uniq_id not in chosen:
                raise TraverserError(f"{v.name}'s parent {v.parent.name} is not in the allocation")
            if needs < 0 or needs > v.size:
                raise TraverserError(f"{v.name}: {needs} units of {v.size}")
            busy = v.schedule is not None and free_during(v.schedule, m.at, m.duration) < (
                needs if x else v.size)
            if busy or (x and x_checked and self._x_busy(v, m)):
                raise TraverserError(f"{v.name} is not free for job {jobid}")
        self.next_jobid = max(self.next_jobid, jobid + 1)
        self._marks = {}
        self._mark_edges = []
        # the picks name every vertex, so no request type needs to take whole subtrees;
        # a type a failed request left exclusive still does (modify_traversal)
        self._req_xtypes = set(self.leaked_xtypes)
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

    def _feasible(self, req: MatchRequest, m: JobMeta, op: str) -> None:
        """Fluxion's request_feasible: raise early when too few nodes could ever serve.

        The node count comes from prime_jobspec, whose accum_if adds only the types the
        prune filters track: with no filter on ``node`` (``-p ALL:core``) it is 0 and the
        check passes, leaving the walk to judge."""
        if "node" not in self.prune_types:
            return
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
        t = m.at if op == "allocate" else self.graph_end - 1
        feasible = 0
        for v in self.g.by_type.get("node", []):
            if m.constraint is not None and not m.constraint.match(v.name, v.rank, v.properties):
                continue
            if not sat_op and v.status != "up":
                continue
            if v.schedule is not None and free_during(v.schedule, t, m.duration) <= 0:
                continue
            feasible += 1
            if feasible >= want:
                return
        if sat_op:
            raise Unsatisfiable("constraints leave too few nodes")
        raise NoMatch(True, "constraints leave too few nodes")

    def remove_subgraph(self, v: Vertex) -> None:
        """Drop ``v``'s subtree from the graph, as Fluxion's ``dfu_impl_t::remove_subgraph``:
        the vertices go, and nothing else changes. A job that held some of them keeps
        what it holds elsewhere, its spans on the ancestors included, until it is
        cancelled; the ancestors' subtree filters get their new totals (``reinit``:
        Fluxion's ``update_total``, which clamps free counts at 0)."""
        sub = list(self.g.walk(v))
        for j in {j for u in sub for j in u.tags}:
            job = self.jobs.get(j)
            if job is not None:
                for u in sub:
                    job.vertices.pop(u.uniq_id, None)
        self.g.remove_vertex(v)
        self.reinit()

    def find(self, expr: str) -> list[Emit]:
        """Vertices matching a find expression (``status=down``, ``sched-now=allocated``...),
        with their ancestors, in post order (feed to a writer)."""
        return find(self, expr)

    def holdable(self, v: Vertex, at: int, duration: int) -> bool:
        """Could a replay pick ``v`` exclusively and whole during the window (nothing of
        another job at or below it)? How a caller choosing among interchangeable vertices
        (memory granules) finds the ones `replay` will accept."""
        m = JobMeta(at, min(duration, INF - at), -1, None)
        busy = v.schedule is not None and free_during(v.schedule, m.at, m.duration) < v.size
        return not busy and not self._x_busy(v, m)

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
        if self.node_stats is not None and v.status != status:
            # Fluxion's mark: by path, every node vertex of the subtree counts (its own
            # status or not); by rank, each rank whose subtree root changed counts one
            n = 1 if isinstance(target, int) else sum(
                u.size for u in self.g.walk(v) if u.type == "node")
            self.node_stats += n if status == "up" else -n
        v.status = status
        self._nodes_up = None
        self._invalidate(v)

    def start_node_stats(self) -> None:
        """Count the nodes that are up as resource-query's Fluxion does from now on
        (``resource_graph_metadata_t::nodes_up``): +1 for each node up and -1 for each
        node down at load, then changed only by ``set_status`` (``mark``), never by an
        attach or a remove: a node attached later is not counted, a removed one stays
        counted, and a node below a vertex marked down counts as down."""
        self.node_stats = sum(1 if v.status == "up" else -1
                              for v in self.g.by_type.get("node", ()) if v.uniq_id >= 0)

    def set_property(self, v: Vertex, key: str, value: str) -> None:
        """Set a property of vertex ``v`` (resource-query's ``set-property``). The
        ``variation`` policy scores a vertex by its ``perf_class``, so the outcomes kept
        for ``v`` and its ancestors go."""
        v.set_property(key, value)
        self._invalidate(v)

    def add_resources(self, R: dict) -> None:
        """Grow the graph from another R (vertices whose path exists are kept)."""
        # the R reader (and its JGF reader) only for this: the leader's service grows its
        # graph from nodes (flat_graph) and never loads them (docs/benchmarks.md)
        from fluxnode.scheduler.readers.rv1 import extend_rv1

        extend_rv1(self.g, R)
        self.reinit()
