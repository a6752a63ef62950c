"""The root index: the exhaustive policies' root candidates kept across matches (fast mode).

Design: an exhaustive policy (low, high, lonode, hinode, lonodex, hinodex, locality,
variation) scores every candidate of every match, and Fluxion breaks ties among equal
scores by whatever order its unstable ``std::sort`` leaves, which exact mode replays
(``policies.stdsort``). To replay that order the whole candidate list must exist and be
sorted on every match: ~10 matches/s on 5,000 nodes.

Fast mode keeps the scores and changes only the tie rule: among equal scores, the
candidate met first in the walk (the lowest vertex id) wins (``Policy.stable_ties``: a
stable sort everywhere). A stable order is a property of each child's candidates alone,
so the root no longer needs them all at once: per request level, job window and
node-centric score (``level_window.LevelWindow``), :class:`RootIndex` keeps every root
child's outcome of the walk (ok or not, its candidate groups per type, the edges it
marked) and, per type, those groups sorted per child with a heap of the children by
their best group (``policies.indexed_evals``). A match re-walks only the children whose
subtree changed since (the update and release walks report every vertex they touch
through the subtree cache's ``pop``, which the index watches: ``dfu_impl.SubtreeCache``),
then chooses with a k-way merge that reads ``k`` groups.

What a fast match returns is what the walk with stable ties returns (same vertices, same
output), so every level's choice has the score exact mode's has; tests/scheduler/
policies/test_fast_mode_properties.py checks both on random graphs and streams.

Used only where it pays and is the same (``fast_shortcuts.decide``): exhaustive policy
with ``stable_ties``, the root not a node, and no slot at the root (its candidates then
are not kept per child). A constraint (RFC 31: hostlist, ranks, properties) is per job,
and tests only nodes: the index stands for it when the root's children are the nodes
and nothing below them is one (the service's graph, cluster -> nodes), since the
constraint then turns down root children whole and nothing else. The index stays the
constraint's none (its children are walked without it) and the match skips the children
the constraint turns down (``_skipped``; ``IndexedEvals``' ``skip``), so a binder's
request that leaves out a few nodes costs what one that leaves out none does. When a walk
of one root child moves the node-centric score (an unbalanced node-centric walk), its
candidates are not the child's alone: :class:`IndexFallback` sends the match to the plain
walk.
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.indexed_evals import IndexedEvals, TypeIndex
from fluxnode.scheduler.policies.scoring import Edge, EGroup, Evals, Scoring
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import NODE_TYPES, DfuSelect
from fluxnode.scheduler.traversers.level_window import LevelWindow

# Requests (levels x windows x policies) whose root index is kept; the oldest goes first.
MAX_INDEXES = 8


class RootChild:
    """One root child's outcome of the walk for one request level and window."""

    __slots__ = ("ok", "x", "types", "marks")

    def __init__(self, ok: bool, x: bool, types: dict[str, tuple[list[EGroup], int, int]],
                 marks: list[tuple[Vertex, Vertex, tuple[int, bool]]]) -> None:
        self.ok = ok
        self.x = x
        self.types = types  # type -> (groups in walk order, qualified units, total units)
        self.marks = marks  # the edges its walk marked (a node choosing its sockets...)


class RootIndex:
    """Every root child's outcome for one request level, window and policy."""

    __slots__ = ("children", "types", "dirty", "fresh", "pos_of", "descending")

    def __init__(self, root: Vertex, descending: bool) -> None:
        self.children: list[RootChild | None] = [None] * len(root.children)
        self.pos_of = {c.uniq_id: i for i, c in enumerate(root.children)}
        self.types: dict[str, TypeIndex] = {}
        self.dirty: set[int] = set()  # uniq_ids popped from the subtree cache since
        self.fresh = True  # nothing computed yet
        self.descending = descending

    def set_child(self, pos: int, child: RootChild | None) -> None:
        old = self.children[pos]
        if old is not None and old.ok:
            for t in old.types:
                if child is None or not child.ok or t not in child.types:
                    self.types[t].set_child(pos, None)
        self.children[pos] = child
        if child is not None and child.ok:
            for t, (groups, qual, total) in child.types.items():
                ti = self.types.get(t)
                if ti is None:
                    ti = self.types[t] = TypeIndex(self.descending)
                ti.set_child(pos, groups, qual, total)



class IndexFallback(Exception):
    """The index cannot stand for this walk (see RootIndex); run the plain walk."""


class RootIndexWalk(DfuSelect):
    """The select walk's part that reads and keeps the root index (a mixin of
    ``dfu_fast.FastTraverser``, which decides when it applies)."""

    _indexes: dict[tuple[LevelWindow, int], RootIndex]
    _root_index: RootIndex | None  # this walk's, once _index_explore made it
    _root_dfu: Scoring | None  # the root's scoring that holds the indexed types
    _replayed: set[int]  # root children whose marks this match put back (_replay_marks)
    _nodes_at_root: bool  # the root's children are the graph's nodes (see the module)
    _skip_of: tuple[object, frozenset[int]] | None  # the last constraint's skipped children

    def _init_root_index(self) -> None:
        root = self.g.root
        kids = root.children
        self._nodes_at_root = (
            bool(kids) and all(c.type in NODE_TYPES for c in kids)
            and not any(v.type in NODE_TYPES for v in self.g.vertices
                        if v.parent is not None and v.parent is not root))
        self._skip_of = None

    def set_property(self, v: Vertex, key: str, value: str) -> None:
        super().set_property(v, key, value)  # type: ignore[misc]  # Traverser's
        self._skip_of = None  # a property constraint may turn down other nodes now

    def _skipped(self, constraint) -> frozenset[int]:
        """The root children (by position) ``constraint`` turns down, as ``_prune`` would:
        by name, rank and properties. Kept for the last constraint (the service keeps one
        object per ``ranks`` text, so a burst asks this once)."""
        got = self._skip_of
        if got is not None and got[0] is constraint:
            return got[1]
        skip = frozenset(pos for pos, c in enumerate(self.g.root.children)
                         if not constraint.match(c.name, c.rank, c.properties))
        self._skip_of = (constraint, skip)
        return skip

    def _index_for(
        self, m: JobMeta, resources: list[Request], pristine: bool, excl: bool
    ) -> RootIndex:
        p = self.policy
        key = (self._walk_level(m, resources, pristine, excl).key, p.ml_scores)
        idx = self._indexes.pop(key, None)
        if idx is None:
            idx = RootIndex(self.g.root, p.high)
            while len(self._indexes) >= MAX_INDEXES:
                old = self._indexes.pop(next(iter(self._indexes)))
                self._subtree_cache.unwatch(old.dirty)
            self._subtree_cache.watch(idx.dirty)
        self._indexes[key] = idx  # most recently used last
        return idx

    def _index_explore(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                       excl: bool, dfu: Scoring) -> int:
        idx = self._index_for(m, resources, pristine, excl)
        skip: frozenset[int] = frozenset()
        if m.constraint is not None:  # the children walked without it, skipped after
            skip = self._skipped(m.constraint)
            free = JobMeta(m.at, m.duration, m.jobid, None)
            free.alloc, free.sat = m.alloc, m.sat
            m = free
        kids = u.children
        if idx.fresh:
            todo = range(len(kids))
            idx.fresh = False
        else:
            pos_of = idx.pos_of
            todo = sorted({pos_of[k] for k in idx.dirty if k in pos_of})
        idx.dirty.clear()
        named = None if pristine else self._level(resources).named
        policy = self.policy
        marks = self._marks
        mark_edges = self._mark_edges
        for pos in todo:
            c = kids[pos]
            if named is not None and c.type not in named and not c.children:
                idx.set_child(pos, None)
                continue
            ml = policy.ml_scores
            start = len(mark_edges)
            probe = Scoring()
            try:
                got = self._dom_dfv_tpl(m, c, resources, pristine, excl, probe)
                ok, x = (self._dom_dfv_walk(m, c, resources, pristine, excl, probe)
                         if got is None else got)
            except BaseException:
                idx.fresh = True  # half done: start over next time
                raise
            if policy.ml_scores != ml:  # an unbalanced node-centric walk: not per child
                policy.ml_scores = ml
                idx.fresh = True
                raise IndexFallback()
            if not ok:
                idx.set_child(pos, RootChild(False, x, {}, []))
                continue
            types = {t: (ev.egroups, ev.qual, ev.total) for t, ev in probe.types.items()}
            avail = probe.avail
            own = EGroup(probe.overall, avail, x, edges=[Edge(c, avail, avail, x, u)])
            groups, qual, total = types.get(c.type, ((), 0, 0))
            types[c.type] = ([*groups, own], qual + (avail if own.score > 0 else 0), total + avail)
            got = [(pe, ce, marks[(pe.uniq_id, ce.uniq_id)]) for pe, ce in mark_edges[start:]]
            idx.set_child(pos, RootChild(True, x, types, got))
        self._root_index = idx
        self._root_dfu = dfu
        self._replayed: set[int] = set()
        rc = -1
        for t, ti in idx.types.items():
            if not skip:
                if ti.present:
                    dfu.types[t] = IndexedEvals(ti)
                    rc = 0
                continue
            offered = ti.offered(skip)
            if offered[2]:
                dfu.types[t] = IndexedEvals(ti, skip, offered)
                rc = 0
        return rc

    # ------------------------------------------------- choosing at the root
    def _resolve(self, dfu: Scoring, to_parent: Scoring) -> int:
        if dfu is not self._root_dfu:
            return DfuSelect._resolve(self, dfu, to_parent)
        if dfu.hier or to_parent.types:
            if not dfu.hier:
                self._materialize(dfu)
            return DfuSelect._resolve(self, dfu, to_parent)
        if dfu.overall > 0:
            to_parent.types.update(dfu.types)  # the root's: taken over, not copied
        return 0

    def _materialize(self, dfu: Scoring) -> None:
        """Turn indexed types back into plain lists (a merge into a non-empty Scoring)."""
        for t, ev in list(dfu.types.items()):
            if type(ev) is IndexedEvals:
                plain = Evals()
                for eg in ev.index.all_groups(ev.skip) + ev.extra:
                    plain.add(eg)
                dfu.types[t] = plain

    def _enforce(self, dfu: Scoring, unconstrained: bool) -> None:
        # the chosen groups' root children marked edges in an earlier match's walk (a
        # node choosing its sockets): put those marks back first, as a walk of this
        # match would have left them
        idx = getattr(self, "_root_index", None)
        if idx is not None:
            root = self.g.root
            for ev in dfu.types.values():
                if type(ev) is not IndexedEvals or not ev.best_k:
                    continue
                for eg in ev.egroups[: ev.best_i]:
                    for e in eg.edges:
                        v = e.vertex
                        while v.parent is not None and v.parent is not root:
                            v = v.parent
                        self._replay_marks(idx, v)
        DfuSelect._enforce(self, dfu, unconstrained)

    def _replay_marks(self, idx: RootIndex, child: Vertex) -> None:
        if child.uniq_id in self._replayed:
            return
        self._replayed.add(child.uniq_id)
        pos = idx.pos_of.get(child.uniq_id)
        entry = idx.children[pos] if pos is not None else None
        if entry is None:
            return
        marks = self._marks
        for pe, ce, val in entry.marks:
            key = (pe.uniq_id, ce.uniq_id)
            if key not in marks:
                self._mark_edges.append((pe, ce))
            marks[key] = val

