"""What one update walk hands the vertices it takes: the job's planners, shared where it can.

Design: a job's update walk (``update_walk.py``) records the job's span on every vertex
it takes: its schedule planner, x_checker and subtree filter. Most vertices a big walk
takes are fresh and taken whole, and would each get equal private planners holding
one span. :class:`JobSpans` hands them shared ones instead (``Planner.share``), one per
kind, with the job's read-only containers (``LeafHold``, ``InnerHold``): the leaves'
"kit", and per kind of fresh inner vertex an :class:`InnerKit`. What it hands out holds
nothing of the job but its window's span, so :class:`SpanPool` keeps it for the next
walks with the same window. ``reported`` is what a taken vertex tells its parent.
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import InnerHold, LeafHold, Vertex
from fluxnode.scheduler.planner.planner import Planner
from fluxnode.scheduler.planner.planner_multi import PlannerMulti
from fluxnode.scheduler.traversers.dfu_impl import INF, X_CHECKER_NJOBS

UNWEIGHED = object()  # an InnerKit whose edge weight is not known yet
# the marked edges from which an update walk shares kits among its inner vertices
# (see update_walk.py): a 1,000-node gang marks 3,000; a single-core match 3 to 4, and kits
# made for one node and one socket cost it 9% more instructions (first 0.779 ->
# 0.851 M)
KIT_MIN_MARKS = 16
# the recipes kept for one key (see update_walk.py): a gang over two kinds of node keeps two
RECIPES_PER_KEY = 4
NO_TOTALS: dict[str, int] = {}  # read-only: the totals of a vertex with none


def reported(u: Vertex, agg: dict[str, int], x: bool, needs: int,
             prune_types: set[str]) -> dict[str, int]:
    """What the update walk reports to a taken vertex's parent: the units of each
    tracked type below it (``agg``), plus, when its own type is tracked, its size
    when taken exclusively (``x``), else its size less ``needs``."""
    up = dict(agg)
    if u.type in prune_types:
        up[u.type] = up.get(u.type, 0) + (u.size if x else u.size - needs)
    return up


class InnerKit:
    """What every fresh inner vertex the update walk takes the same way gets (see
    JobSpans.inner_kit): its planners and containers, all shared, what it reports to
    its parent (``up``, read-only) and, once worked out, its edge weight."""

    __slots__ = ("schedule", "x_checker", "subplan", "held", "up", "weight")

    def __init__(self, schedule: Planner | None, x_checker: Planner,
                 subplan: PlannerMulti | None, held: InnerHold, up: dict[str, int]) -> None:
        self.schedule = schedule
        self.x_checker = x_checker
        self.subplan = subplan
        self.held = held
        self.up = up
        self.weight = UNWEIGHED


class SpanPool:
    """The shared planners and subtree filters of update walks, kept for later walks.

    What JobSpans hands out as shared is read-only and holds one span, the walk's
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
# planner JobSpans._fresh makes for a vertex of size X_CHECKER_NJOBS taking 1 unit
_X_KEY = (1, X_CHECKER_NJOBS, "x_checker")


class JobSpans:
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
        self.inner_kits: dict[tuple, InnerKit] = {}
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
                  totals: dict[str, int], prune_types: set[str]) -> InnerKit:
        """What a fresh inner vertex gets when the job takes it as ``u``: ``needs`` of
        its own units when ``x``, and ``agg`` units below it. The update walk keeps
        kits in ``inner_kits`` by what decides them (type, size, x, needs, whether
        taken whole, the totals dict, agg) and looks there first: a 1,000-node gang
        makes two, where each node and socket made two planners, a multi-planner and
        five containers of its own. Only a walk that marked KIT_MIN_MARKS edges or more
        uses kits (see update_walk.py): a single-core match takes a node and a socket or two,
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
        return InnerKit(schedule, self._shared_x(), subplan, held,
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
