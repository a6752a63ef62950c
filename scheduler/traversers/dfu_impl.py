"""What every part of the DFU traverser shares: its state, the job window, the emitted vertex.

Fluxion splits its traverser into ``dfu`` (the public calls) and ``dfu_impl`` (the
walks); here the walks are mixins of :class:`DfuImpl`, one file per concern:
``dfu_select`` (test, prune, score, choose), ``dfu_update`` (record the choice in
the planners, emit it, undo it), ``dfu_reservation`` (whether and when a request
can run). ``dfu.Traverser`` combines them. They share state through ``self``
(declared below) rather than passing it, so the hot walks read attributes exactly
as one class would: a mixin's methods are looked up once per type, like any method.

This module sits below all of them (and below ``find``), so the shared types
(:class:`Emit`, :class:`Job`, :class:`JobMeta`) import downward only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fluxnode.scheduler.graph.resource_graph import ResourceGraph, Vertex
from fluxnode.scheduler.planner.planner import Planner
from fluxnode.scheduler.policies.policy import Policy

INF = 2**63 - 1
# Fluxion's edge weight before the first update through that edge (UINT64_MAX): an
# untouched child is explored before every child a job has already gone through.
UNSET_WEIGHT = 2**64 - 1
X_CHECKER_NJOBS = 0x40000000


@dataclass(slots=True)
class Emit:
    """One vertex of a selection: ``needs`` units, exclusively or shared, at ``level``."""

    vertex: Vertex
    needs: int
    exclusive: bool
    level: int
    agfilter: dict | None = None


class Selection(list):
    """A selection (list of Emit) that also holds ``ghosts``: (position, Emit) of the
    vertices the update walk tagged but did not emit (a subtree filter a half-failed
    partial cancel left stale, see update_walk), each before the selection's entry at
    its position. Only such a walk makes one; every other selection is a plain list."""

    ghosts: list[tuple[int, Emit]]


@dataclass
class Job:
    """A placed job: its window, ALLOCATED or RESERVED, and the vertices it holds."""

    jobid: int
    at: int
    duration: int
    status: str
    vertices: dict[int, Vertex] = field(default_factory=dict)


class JobMeta:
    """One walk's job window and mode (Fluxion's jobmeta_t): alloc, reserve or sat."""

    __slots__ = ("at", "duration", "alloc", "jobid", "constraint", "sat", "no_alloc")

    def __init__(self, at: int, duration: int, jobid: int, constraint) -> None:
        self.at = at
        self.duration = duration
        self.alloc = "alloc"  # alloc | reserve | sat
        self.jobid = jobid
        self.constraint = constraint
        self.sat = False
        # a without_allocating match (Fluxion's AT_NO_ALLOC): its update plans nothing in
        # Fluxion, so no planner can refuse it (see update_walk)
        self.no_alloc = False


def free_during(p: Planner, at: int, duration: int) -> int:
    """Units of ``p`` free during the window, cut at the horizon's end (a job of
    unlimited duration reserved later still ends at INF)."""
    if p.avail_lower_bound() == p.total:  # nothing planned: O(1)
        return p.total
    if at + duration > INF:
        duration = INF - at
    return p.avail_resources_during(at, duration)


def note_move(order: dict[int, list], moves: dict[int, dict[int, tuple[int, int]]],
              via_uid: int, uid: int, old: int, w: int) -> None:
    """The edge into child ``uid`` of ``via_uid`` was re-weighed from ``old`` to ``w``:
    when that changes it and the parent keeps a sorted child order (``order``), the
    child's move waits in ``moves`` (first old weight, last new one) for
    DfuUpdate._move_weighed at the end of the update."""
    if old == w or via_uid not in order:
        return
    got = moves.setdefault(via_uid, {})
    first = got.get(uid)
    got[uid] = (old if first is None else first[0], w)


class SubtreeCache(dict):
    """The select walk's kept outcome of each unchanged subtree (uniq_id -> outcome, see
    ``DfuSelect._dom_dfv``), and the one path by which every other cache hears that a
    vertex's state changed: the update and release walks and a status change ``pop``
    the vertex (and its ancestors), and each watcher set gets its uniq_id. The fast
    traverser's root indexes and first-match prune memory are such watchers; the plain
    Traverser has none. Watchers are kept by identity (two empty sets are equal)."""

    __slots__ = ("watchers",)

    def __init__(self) -> None:
        super().__init__()
        self.watchers: dict[int, set[int]] = {}  # id(set) -> set

    def watch(self, changed: set[int]) -> None:
        """Add every uniq_id popped from now on to ``changed``."""
        self.watchers[id(changed)] = changed

    def unwatch(self, changed: set[int]) -> None:
        del self.watchers[id(changed)]

    def pop(self, key, default=None):
        for changed in self.watchers.values():
            changed.add(key)
        return dict.pop(self, key, default)


class DfuImpl:
    """The traverser's state, and the reads of a vertex both walks make.

    The mixins call one another through ``self`` (``DfuReservation._satisfiable``
    runs ``DfuSelect._select``; ``DfuUpdate._update`` reads ``_avail``), as
    Fluxion's dfu_impl_t methods do; only ``dfu.Traverser`` has them all."""

    g: ResourceGraph
    policy: Policy
    subsystems: list[str]
    prune_types: set[str]  # the types subtree filters track (the --prune-filters and leaf types)
    prune_anchored: dict[str, list[str]]  # anchor vertex type (or ALL) -> the types it tracks
    auto_anchored: list[str]  # leaf types no filter names, shown at the cluster vertex
    jobs: dict[int, Job]
    next_jobid: int
    preorder: int  # visits of the last walk (Fluxion's preorder/postorder counts)
    postorder: int
    total_preorder: int  # visits of the last match, cancel... (what resource-query prints)
    total_postorder: int
    _totals: dict[int, dict[str, int]]  # vertex uniq_id -> {type: units below it}
    _leaf_types: set[str]  # the types of the graph's leaves
    _weights: dict[int, int]  # child uniq_id -> weight of the edge into it (first-match order)
    _weights_via: dict[tuple[int, int], int]  # (parent, child) uniq_ids: a second parent's edge
    _order: dict[int, list[tuple[int, int, int]]]  # parent uniq_id -> children by weight
    _leaf_order: dict[int, list[Vertex]]  # parent uniq_id -> its leaf children, ordered once
    _last_type: dict[str, str | None]  # vertex type -> last filter type (see _edge_weight)
    _nodes_up: int | None
    # Fluxion's nodes_up counter (see dfu.Traverser.start_node_stats); None: count the
    # nodes up with every ancestor up
    node_stats: int | None = None
    graph_end: int  # the end of the graph's time (see dfu.Traverser)
    report_errno: bool  # see dfu.TraverserErrno
    level_leak: int  # see dfu_update._update
    leaked_xtypes: set[str]  # exclusive types a failed request left for good (see Traverser)
    errno: int  # Fluxion's errno as the last walk left it (see dfu.TraverserErrno)
    _tracked: dict[str, set[str]]  # vertex type -> the filter types checked when pruning
    _child_types: dict[int, set[str]]  # vertex uniq_id -> the types its out-edges reach
    loaded: ResourceGraph | None = None  # the graph as loaded, if ``g`` is a projection of it
    _loaded_ids: dict[int, Vertex] | None = None  # its vertices by uniq_id (_out_types)
    _subtree_cache: SubtreeCache  # see DfuSelect._dom_dfv
    _cache_window: tuple | None  # the window the subtree cache holds (DfuSelect._select)
    _cacheable: bool
    _cache: dict[int, tuple] | None  # the subtree cache when this match may use it
    _marks: dict[tuple[int, int], tuple[int, bool]]  # (parent, child) uniq_ids -> (needs, excl)
    _mark_edges: list[tuple[Vertex, Vertex]]  # the marked edges, in marking order
    _visited: set[int]
    _req_xtypes: set[str]  # the types the current request asks for exclusively
    _enforced: int  # marking passes of the current walk (see _dom_dfv)
    # the selection's auxiliary subsystems the graph has edges in, which the select walk
    # also explores (aux_walk); empty (the default): the dominant subsystem alone
    _aux: tuple[str, ...] = ()
    # Fluxion's per-vertex ephemeral store (idata.ephemeral), its one key "label": the
    # select walk of a request with labels writes it (see _labels_of); None until one does
    vertex_labels: dict[Vertex, str] | None = None
    _labeling: bool = False  # this walk's request labels a type a vertex can have
    _labeled_req: tuple = (None, False)  # (request list, _labeling) last asked

    def _labels_of(self, resources: list) -> bool:
        """Does this request label a request of a type other than ``slot``? Such a
        request's select walk writes the label on each vertex of that type it completes
        (dfu_impl_t::dom_dfv, after resolve), where it stays through later walks until
        another walk writes one there or a ``find`` writes the vertex out
        (ephemeral_t: the match writers read the store as it is, stale or not). Such a
        walk goes the plain way, vertex by vertex, none of its subtrees kept or
        skipped (DfuSelect._select, FastTraverser._select)."""
        asked, answer = self._labeled_req
        if asked is resources:
            return answer
        answer = False
        stack = list(resources)
        while stack:
            r = stack.pop()
            if r.label and r.type != "slot":
                answer = True
                break
            stack.extend(r.with_)
        self._labeled_req = (resources, answer)
        return answer

    def _put_label(self, u: Vertex, resources: list) -> None:
        """dom_dfv's last step for a vertex it completes: the label of the first request
        of this level for ``u``'s type that has one replaces what ``u`` kept (a second
        one fails Fluxion's insert, which keeps the first)."""
        for r in resources:
            if r.type == u.type and r.label:
                if self.vertex_labels is None:
                    self.vertex_labels = {}
                self.vertex_labels[u] = r.label
                return

    def labels_of(self, sel) -> dict[int, str] | None:
        """uniq_id -> label of the vertices of ``sel`` (Emits) that keep one: what the
        match writers write as their "ephemeral"."""
        kept = self.vertex_labels
        if not kept:
            return None
        got = {e.vertex.uniq_id: kept[e.vertex] for e in sel if e.vertex in kept}
        return got or None

    def forget_labels(self, sel) -> None:
        """``find`` wrote these vertices out: dom_find_dfv clears their stores."""
        if self.vertex_labels:
            for e in sel:
                self.vertex_labels.pop(e.vertex, None)

    def edge_weight_of(self, parent: Vertex, child: Vertex) -> int:
        """The weight of the edge ``parent`` -> ``child`` (first-match order): the
        containment parent's in ``_weights``, a second parent's (ASSOCIATE_IN) in
        ``_weights_via``; an edge never weighed weighs UINT64_MAX (relation_infra_t's
        m_weight), a leaf's always: only a vertex with a subtree filter is re-weighed
        (upd_by_outedges), and prime_pruning_filter gives a leaf none. So under a
        parent with both (a pdu's nodes and power, ``-S PA``) the leaves come first
        until an update weighs the others, each kind by uniq_id, highest first."""
        if child.parent is parent:
            return self._weights.get(child.uniq_id, UNSET_WEIGHT)
        return self._weights_via.get((parent.uniq_id, child.uniq_id), UNSET_WEIGHT)

    def subplan_types(self, u: Vertex, shown: bool = False) -> list[str]:
        """The resource types a vertex's subtree filter tracks, in Fluxion's order.

        ``shown``: as ``find agfilter=t`` reports them, where leaf types no filter
        names appear at the cluster vertex; they never prune a match (Fluxion's
        or-slot cases show those are not checked)."""
        if not u.children and not u.aux_children:  # a leaf in every subsystem
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
                # dom_find_dfv: what is free at the wall clock's now, or at 0 when all
                # is free then (resource-query's jobs start at 0: a job longer than
                # the time since 1970 is counted, a shorter one only when none is)
                p = sp.planner(t)
                free = p.avail_resources_at(int(time.time()))
                if free == p.total:
                    free = p.avail_resources_at(0)
                used = total - free
            else:
                used = 0
            out[t] = f"used:{used}, total:{total}"
        return dict(sorted(out.items()))

    def _avail(self, u: Vertex, m: JobMeta) -> int:
        p = u.schedule
        if p is None:
            return u.size
        return free_during(p, m.at, m.duration)

    def _x_busy(self, u: Vertex, m: JobMeta) -> bool:
        """Does any job hold something at or below ``u`` during the window (x_checker)?"""
        p = u.x_checker
        return p is not None and free_during(p, m.at, m.duration) < X_CHECKER_NJOBS

