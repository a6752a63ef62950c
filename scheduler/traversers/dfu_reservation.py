"""Whether and when a request can run (Fluxion's schedule, is_satisfiable, request_feasible).

A match first asks how many nodes the request needs at least (``_wanted``,
Fluxion's primed counts) against the nodes up (``nodes_up``). When it cannot
allocate now, a reservation is tried at the start times the root's subtree
planner offers (``_candidate_times``), and satisfiability is a selection walk
far in the future, where nothing is planned (``_satisfiable``).
"""

from __future__ import annotations

import errno

from fluxnode.scheduler.jobspec.request import MatchRequest, Request
from fluxnode.scheduler.planner.planner import PlannerError
from fluxnode.scheduler.planner.planner_multi import PlannerMulti
from fluxnode.scheduler.traversers.dfu_impl import INF, DfuImpl, JobMeta
from fluxnode.scheduler.traversers.match_errors import TraverserErrno, TraverserError


class DfuReservation(DfuImpl):
    """Feasibility counts, satisfiability and reservation start times."""

    _interned: dict[str, int] = {}  # see _interning_order (the instance's own once made)

    def _satisfiable(self, req: MatchRequest, m: JobMeta, excl: bool) -> bool:
        # far in the future: the planners' end less the job; a job as long as the
        # horizon itself (no duration, the service's unbounded graph) starts at 0
        sm = JobMeta(max(INF - m.duration - 1, 0), m.duration, m.jobid, m.constraint)
        sm.alloc = "sat"
        sm.sat = True
        rc, _n, _x = self._select(req, sm, excl)
        return rc == 0

    def _job_duration(self, req: MatchRequest, now: int) -> int:
        """The job's duration as Fluxion's jobmeta_t::build reads it: the graph's whole
        duration when the jobspec has none, EINVAL when it is negative or longer than
        that."""
        if req.duration > self.graph_end or req.duration < 0:
            self.errno = errno.EINVAL
            if self.report_errno:
                raise TraverserErrno(errno.EINVAL)
            if req.duration < 0:
                raise TraverserError(f"duration {req.duration} is negative")
            raise TraverserError(f"duration {req.duration} is longer than the graph lasts "
                                 f"({self.graph_end})")
        if req.duration > 0:
            return req.duration
        return INF - now if self.graph_end == INF else self.graph_end

    def nodes_up(self) -> int:
        """Nodes that are up with every ancestor up (a down vertex hides its subtree)."""
        if self.node_stats is not None:
            return self.node_stats
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

    def _candidate_times(self, req: MatchRequest, m: JobMeta):
        """Start times to try a reservation at, as Fluxion's schedule() asks them: the
        root's subtree planner's avail_time_first/next from ``now + 1`` for the request's
        aggregate counts (scheduled points only, with that planner's stale-count rules,
        which decide what a graph grown by ``attach`` offers)."""
        sp = self.g.root.subplan
        if sp is None:  # nothing planned below the root: everything is free now
            return
        # the filter tracks its types whether or not the root has units of them (a power
        # root's cores under -S PA: a total of 0, which any request of cores exceeds)
        counts = dict.fromkeys([*sp.totals, *self.subplan_types(self.g.root)], 0)
        for r in req.resources:
            if r.type in counts:
                counts[r.type] += r.count.min
            for t, n in self._user_data(r).items():
                if t in counts:
                    counts[t] += r.count.min * n
        if any(n for t, n in counts.items() if t not in sp.totals):
            self.errno = errno.ERANGE  # planner_multi_avail_time_first: more than the total
            return
        counts = {t: counts[t] for t in sp.totals}
        lead = self._lead_type(sp)
        if lead != sp.resource_types[0]:
            # the filter's types in fluxnode's order differ from Fluxion's: walk the
            # times of Fluxion's first type, as its planner_multi does
            sp = _LedBy(sp, lead)
        # The planner sets errno when it has no time left: ENOENT, or ERANGE for more than
        # its totals (what a later failure without an errno of its own reports). Fluxion's
        # loop also asks for the next time once after the walk that fits (the for loop's
        # step runs before its test), so the caller draws once more after a success.
        try:
            t = sp.avail_time_first(m.at + 1, m.duration, counts)
        except PlannerError as exc:
            # ERANGE (more than the totals) or ENOENT: no time to try. dfu_traverser_t::run
            # ends its loop there and judges satisfiability, as when no time fits.
            if exc.errno in (errno.ERANGE, errno.ENOENT):
                self.errno = exc.errno
                return
            raise
        while t is not None:
            yield t
            try:
                t = sp.avail_time_next()
            except PlannerError as exc:
                if exc.errno in (errno.ERANGE, errno.ENOENT):
                    self.errno = exc.errno
                    return
                raise
        self.errno = errno.ENOENT


    def _lead_type(self, sp: PlannerMulti) -> str:
        """The type whose planner gives Fluxion's reservation loop its candidate times:
        planner_multi_avail_time_first walks the times of its first planner only, and
        checks the others at each. Fluxion's root filter lists its types as
        get_my_pruning_types gives them: the set anchored at the root's type (at a
        cluster, with the leaf types no filter names, set_pruning_type's), then the ALL
        set without the root's type, each a std::set of interned strings, which orders
        them as they were first interned (interning_order). All types' planners hold
        the same points until a partial cancel takes a 0-unit span from some."""
        root = self.g.root
        anchored = set(self.prune_anchored.get(root.type, ()))
        if root.type == "cluster":
            anchored |= set(getattr(self, "auto_anchored", ()))
        anchored.discard(root.type)
        every = set(self.prune_anchored.get("ALL", ())) - anchored - {root.type}
        rank = self._interning_order()
        for group in (anchored, every):
            for t in sorted(group, key=lambda t: rank.get(t, len(rank))):
                if sp.has_type(t):
                    return t
        return sp.resource_types[0]

    def _interning_order(self) -> dict[str, int]:
        """Resource type -> its place in Fluxion's interning: data_std.cpp's constants at
        start-up, then each type as the graph's reader first meets it."""
        if any(t not in self._interned for t in self.g.by_type):  # once, and after attach
            order = dict.fromkeys(_INTERNED_FIRST)
            for v in self.g.vertices:
                if v.type not in order:
                    order[v.type] = None
            self._interned = {t: i for i, t in enumerate(order)}
        return self._interned


# resource/schema/data_std.cpp: the types interned before any graph is read, in order
_INTERNED_FIRST = ("cluster", "core", "socket", "gpu", "node", "rack", "slot", "xor_slot",
                   "ssd", "storage_node")


class _LedBy:
    """A root filter's reservation times led by another of its types' planner (see
    DfuReservation._lead_type): what PlannerMulti.avail_time_first/next give with that
    type first."""

    def __init__(self, sp: PlannerMulti, lead: str) -> None:
        self._first = sp.planner(lead)
        self._others = [(sp.planner(t), t) for t in sp.totals if t != lead]
        self._lead = lead
        self._iter: tuple[int, dict[str, int]] | None = None

    def avail_time_first(self, on_or_after: int, duration: int,
                         counts: dict[str, int]) -> int | None:
        self._iter = (duration, counts)
        return self._fit(self._first.avail_time_first(on_or_after, duration,
                                                      counts[self._lead]))

    def avail_time_next(self) -> int | None:
        return self._fit(self._first.avail_time_next())

    def _fit(self, t: int | None) -> int | None:
        duration, counts = self._iter  # type: ignore[misc]
        while t is not None:
            if all(_fits(p, t, duration, counts[rtype]) for p, rtype in self._others):
                return t
            t = self._first.avail_time_next()
        return None


def _fits(p, at: int, duration: int, request: int) -> bool:
    try:
        return p.avail_during(at, duration, request)
    except PlannerError:
        return False
