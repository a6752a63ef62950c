"""The fast mode of the exhaustive policies: the root's candidates kept across matches.

An exhaustive policy (low, high, lonode, hinode, lonodex, hinodex, locality) scores every
candidate of every match, and Fluxion breaks ties among equal scores by whatever order
its unstable ``std::sort`` leaves, which exact mode replays (``policies.stdsort``). To
replay that order the whole candidate list must exist and be sorted on every match:
~10 matches/s on 5,000 nodes.

Fast mode keeps the scores and changes only the tie rule: among equal scores, the
candidate met first in the walk (the lowest vertex id) wins (``Policy.stable_ties``: a
stable sort everywhere). A stable order is a property of each child's candidates alone,
so the root no longer needs them all at once: per request level, job window and policy,
:class:`RootIndex` keeps every root child's outcome of the walk (ok or not, its
candidate groups per type, the edges it marked) and, per type, those groups sorted per
child with a heap of the children by their best group (``policies.indexed_evals``).
A match re-walks only the children whose subtree changed since (the update and release
walks report every vertex they touch through the subtree cache's ``pop``, see
:class:`_TrackedCache`), then chooses with a k-way merge that reads ``k`` groups.

What a fast match returns is what the walk with stable ties returns (same vertices, same
output), so every level's choice has the score exact mode's has; tests/scheduler/
policies/test_fast_mode_properties.py checks both on random graphs and streams.

Used only where it pays and is the same: exhaustive policy with ``stable_ties``, no
constraints (they are per job), the root not a node, and the root not where a slot sits
(its candidates then are not kept per child). Anything else runs the plain walk.
"""

from __future__ import annotations

from itertools import islice
from operator import attrgetter, itemgetter

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.indexed_evals import IndexedEvals, TypeIndex
from fluxnode.scheduler.policies.policy import PERF_CLASS, WORST_PERF_CLASS, Policy
from fluxnode.scheduler.policies.scoring import MATCH_MET, MATCH_UNMET, Edge, EGroup, Scoring
from fluxnode.scheduler.traversers.dfu import Traverser
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import _NOT_SET, EBUSY, ShareTally
from fluxnode.scheduler.traversers.leaf_scores import add_leaf_group, leaf_free, score_fresh_leaves
from fluxnode.scheduler.traversers.leaf_shapes import deep_number, leaf_number
from fluxnode.scheduler.traversers.pruned_skip import skip_pruned

_children_of = attrgetter("children")
_third = itemgetter(2)

# Distinct leaf-parent shapes numbered before the numbering starts over (see _leaf_shape).
MAX_SHAPES = 65536
# A request level whose walks of one vertex type have made no template this many times
# in a row stops numbering that type's shapes, and tries again once in TPL_RETRY walks
# (see _dom_dfv_tpl)
TPL_GIVE_UP = 16
TPL_RETRY = 256

# Request levels and windows whose pruned vertices the first-match walk keeps (all are
# forgotten when one more comes: a service's windows move with time)
MAX_PRUNE_KEYS = 64
# Requests (levels x windows x policies) whose root index is kept; the oldest goes first.
MAX_INDEXES = 8


class _TrackedCache(dict):
    """The subtree cache, telling every root index which vertices' state changed: the
    update and release walks ``pop`` each vertex they touch (and its ancestors)."""

    __slots__ = ("sinks",)

    def __init__(self) -> None:
        super().__init__()
        self.sinks: dict[int, set[int]] = {}  # id(set) -> set: by identity

    def pop(self, key, default=None):
        for s in self.sinks.values():
            s.add(key)
        return dict.pop(self, key, default)


class _Child:
    """One root child's outcome of the walk for one request level and window."""

    __slots__ = ("ok", "x", "types", "marks")

    def __init__(
        self,
        ok: bool,
        x: bool,
        types: dict[str, tuple[list[EGroup], int, int]],
        marks: list[tuple[Vertex, Vertex, tuple[int, bool]]],
    ) -> None:
        self.ok = ok
        self.x = x
        self.types = types  # type -> (groups in walk order, qualified units, total units)
        self.marks = marks  # the edges its walk marked (a node choosing its sockets...)


class RootIndex:
    """Every root child's outcome for one request level, window and policy."""

    __slots__ = ("children", "types", "dirty", "fresh", "pos_of", "descending")

    def __init__(self, root: Vertex, descending: bool) -> None:
        self.children: list[_Child | None] = [None] * len(root.children)
        self.pos_of = {c.uniq_id: i for i, c in enumerate(root.children)}
        self.types: dict[str, TypeIndex] = {}
        self.dirty: set[int] = set()  # uniq_ids popped from the subtree cache since
        self.fresh = True  # nothing computed yet
        self.descending = descending

    def set_child(self, pos: int, child: _Child | None) -> None:
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


class _Template:
    """The outcome of one untouched leaf parent's walk, for every other of its shape."""

    __slots__ = (
        "ok",
        "x",
        "avail",
        "overall",
        "empty_types",
        "marks",
        "preorder",
        "postorder",
        "enforced",
        "visited",
        "errno",
        "deep",
        "centric",
    )

    def __init__(
        self,
        ok: bool,
        x: bool,
        avail: int,
        overall: int,
        empty_types: tuple,
        marks: list[tuple[int, tuple[int, bool]]],
        preorder: int,
        postorder: int,
        enforced: int,
        visited: bool,
        errno: int,
        deep: bool = False,
        centric: bool = False,
    ) -> None:
        self.ok = ok
        self.x = x
        self.avail = avail
        # less the node-centric score it was entered with (and, deep, the vertex's id)
        self.overall = overall
        self.empty_types = empty_types  # types its outcome names without a group
        # (child position, (needs, exclusive)) of the edges it marked; deep: (parent
        # position, -1 for the vertex itself, child position, (needs, exclusive))
        self.marks = marks
        self.preorder = preorder
        self.postorder = postorder
        self.enforced = enforced
        # whether the walk got past the test and prune (the vertex is then visited: a
        # later request of the same match does not walk it again), and the errno it set
        self.visited = visited
        self.errno = errno
        # a vertex whose children are leaf parents or leaves (a node of sockets): its
        # shape leaves out its own id, which only its own score reads
        self.deep = deep
        # a node a node-centric policy discovered: its walk left the policy's last
        # factor at the node's own (Policy.node_factor)
        self.centric = centric


class _Fallback(Exception):
    """The index cannot stand for this walk (see RootIndex); run the plain walk."""


class FastTraverser(Traverser):
    """A Traverser whose exhaustive policies with ``stable_ties`` use a kept root index.

    With ``Policy.stable_ties`` False (exact mode, as resource-query) only the walk's
    shortcuts apply (leaves scored in line, untouched leaf parents replayed from a
    template): the same answers and visit counts as the plain Traverser, in less time."""

    def __init__(self, graph, policy="first", *args, **kwargs) -> None:
        self._indexes: dict[tuple, RootIndex] = {}
        self._cache_policy: tuple | None = None
        self._index_ok = False
        self._inline_ok = False
        self._first_inline_ok = False
        self._tpl_ok = False
        self._root_index: RootIndex | None = None
        self._root_dfu: Scoring | None = None
        self._replayed: set[int] = set()
        super().__init__(graph, policy, *args, **kwargs)

    def _reinit(self) -> None:
        super()._reinit()
        self._subtree_cache = _TrackedCache()
        self._indexes = {}
        self._shapes: dict[int, int | None] = {}  # see _leaf_shape
        self._deep_shapes: dict[int, int | None] = {}  # see _deep_shape
        self._shape_ids: dict[tuple, int] = {}  # a shape -> its number (hashed once)
        # a leaf parent's shapes by a hash of their fields (see leaf_shapes.leaf_number)
        self._leaf_buckets: dict[int, list[tuple[tuple, int]]] = {}
        self._ctx_ids: dict[tuple, int] = {}  # a request level and window -> its number
        self._tpl_ctx: dict[tuple, int] = {}  # this match's: (level id, ...) -> number
        self._templates: dict[tuple, _Template | None] = {}
        # (request level number, vertex type) -> walks in a row that made or found no
        # template; see _dom_dfv_tpl
        self._tpl_misses: dict[tuple[int, str], int] = {}
        self._starts_over = 0  # how many times _numbered started every numbering over
        # vertices with a perf_class below them (see _perf_below); None: not gathered yet
        self._pc_below: set[int] | None = None
        # the first-match walk's pruned vertices (see _explore_first): uniq_id -> (request
        # level and window, errno); the ones the update walks touched since, to forget
        self._pruned: dict[int, tuple] = {}
        self._heres: dict[tuple, tuple] = {}
        self._pruned_dirty: set[int] = set()
        self._subtree_cache.sinks[id(self._pruned_dirty)] = self._pruned_dirty
        self._number_nodes()

    def _number_nodes(self) -> None:
        """Number every node's shape now, as the graph is (re)built: a few µs a node
        (about 25 ms on 5,000 nodes), which a gang's walk of fresh nodes would otherwise
        pay inside its match (a fresh node's template is found by its shape). Fluxion
        builds its per-vertex planners and prune filters at load for the same reason.
        A node is a vertex whose children have children (sockets of cores); a vertex
        with no shape (a rack) has its children looked at instead."""
        if self.g.shared_children:
            return
        stack = [self.g.root]
        while stack:
            u = stack.pop()
            kids = u.children
            if kids and kids[0].children and self._shape(u) is None:
                stack.extend(c for c in kids if c.children)

    def _invalidate(self, u: Vertex | None) -> None:
        # a status changed at or below u: the shapes of u and its ancestors name statuses
        v = u
        while v is not None:
            self._shapes.pop(v.uniq_id, None)
            self._deep_shapes.pop(v.uniq_id, None)
            v = v.parent
        super()._invalidate(u)

    def set_property(self, v: Vertex, key: str, value: str) -> None:
        super().set_property(v, key, value)
        if key == PERF_CLASS and self._pc_below is not None:
            self._mark_perf_below(v)

    def _mark_perf_below(self, v: Vertex) -> None:
        p = v.parent
        below = self._pc_below
        while p is not None and p.uniq_id not in below:
            below.add(p.uniq_id)
            p = p.parent

    def _perf_below(self) -> set[int]:
        """The vertices with a ``perf_class`` somewhere below them. The variation
        policy scores a vertex by its own perf_class (9999 without one), so the walk's
        shortcuts, which read no property, stand for a subtree only when nothing below
        its root has one: the leaves in line then all score alike, and a template's
        score is the walk's less its root's class (added back on replay)."""
        if self._pc_below is None:
            self._pc_below = set()
            for v in self.g.vertices:
                if PERF_CLASS in v.properties:
                    self._mark_perf_below(v)
        return self._pc_below

    def _own_score(self, u: Vertex, deep: bool) -> int:
        """The part of ``u``'s walk score that only ``u`` itself sets and its shape
        leaves out: its perf_class under variation; else its id for a deep template."""
        if self.policy.variation:
            return Policy.perf_class(u)
        return u.id if deep else 0

    # ----------------------------------------- untouched leaf parents, by shape
    def _numbered(self, ids: dict[tuple, int], whole: tuple) -> int:
        """``whole``'s number in ``ids`` (template keys are pairs of numbers, which hash
        fast). Past MAX_SHAPES of one kind (statuses flipped many times, many distinct
        requests) every numbering and template starts over."""
        got = ids.get(whole)
        if got is not None:
            return got
        if len(ids) >= MAX_SHAPES:
            self._shape_ids.clear()
            self._leaf_buckets.clear()
            self._ctx_ids.clear()
            self._shapes.clear()
            self._deep_shapes.clear()
            self._tpl_ctx.clear()
            self._templates.clear()
            self._tpl_misses.clear()
            self._starts_over += 1
        got = ids[whole] = len(ids)
        return got

    def _leaf_shape(self, u: Vertex) -> int | None:
        """The number of what the walk of ``u`` reads of ``u`` and its children when
        nothing is held below it: types, ids, sizes and statuses (None when a child has
        children). Equal numbers, equal shapes."""
        uid = u.uniq_id
        shape = self._shapes.get(uid, False)
        if shape is not False:
            return shape
        got = leaf_number(u, self._leaf_buckets)  # compiled (see leaf_shapes.py)
        if got is None or type(got) is int:
            shape = got
        else:  # a new shape: number it, and keep it where leaf_number looks
            h, whole = got
            shape = self._numbered(self._shape_ids, whole)
            self._leaf_buckets.setdefault(h, []).append((whole, shape))
        self._shapes[uid] = shape
        return shape

    def _shape(self, u: Vertex) -> int | None:
        """``u``'s leaf-parent shape, or else its deep one (None: neither)."""
        kids = u.children
        if kids and kids[0].children:  # not a leaf parent (see _leaf_shape): a node
            return self._deep_shape(u)
        shape = self._leaf_shape(u)
        return self._deep_shape(u) if shape is None else shape

    def _deep_shape(self, u: Vertex) -> int | None:
        """The number of what the walk of ``u`` reads of its subtree when nothing is held
        in it and its children are leaf parents or leaves (a node of sockets of cores):
        u's type, size and status, each leaf child's fields, each leaf parent's
        ``_leaf_shape``. Not u's id: only u's own score reads it (see _Template.deep).
        None for a deeper subtree, or in a graph where a vertex is the child of two
        (ResourceGraph.shared_children): then a walk may meet a vertex twice, and
        what a deep template leaves out of the visited set (all but its root) counts."""
        uid = u.uniq_id
        shape = self._deep_shapes.get(uid, False)
        if shape is not False:
            return shape
        shape = None
        if self.g.shared_children == 0:
            # every part numbered already (a gang's fresh node): one call (compiled);
            # else each part is numbered here
            shape = deep_number(u, self._shapes, self._leaf_buckets, self._weights,
                                self._shape_ids)
            if shape is None:
                parts: list = []
                for c in u.children:
                    if c.children:
                        got = self._leaf_shape(c)
                        if got is None:
                            break
                        parts.append(got)
                    else:
                        parts.append((c.type, c.id, c.size, c.status))
                else:
                    # the first-match policies walk the children by edge weight (the update
                    # walk sets one on each vertex it goes through, a cancel leaves it)
                    weights = self._weights
                    order = tuple(weights.get(c.uniq_id, 0) for c in u.children)
                    shape = self._numbered(
                        self._shape_ids, ("deep", u.type, u.size, u.status, tuple(parts), order))
        self._deep_shapes[uid] = shape
        return shape

    def _dom_dfv(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        to_parent: Scoring,
    ) -> tuple[bool, bool]:
        got = self._dom_dfv_tpl(m, u, resources, pristine, excl, to_parent)
        if got is None:
            return super()._dom_dfv(m, u, resources, pristine, excl, to_parent)
        return got

    def _dom_dfv_tpl(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        to_parent: Scoring,
    ) -> tuple[bool, bool] | None:
        """An untouched vertex whose children are leaves (a socket of cores, with nothing
        held below it: its x_checker has no span) scores as every other of its shape:
        the first one's walk is kept as a template (its marks by child position) and
        replayed for the others. So does, in a tree, one whose children are such leaf
        parents or leaves (a node of sockets: a deep template). A fresh graph's gang
        walks one node of each shape instead of 5,000. None: no template stands for
        ``u`` (the caller walks it)."""
        if (
            not self._tpl_ok
            or u.parent is None
            or not u.children
            or (u.x_checker is not None and u.x_checker.span_count)
            or (self.policy.variation and u.uniq_id in self._perf_below())
        ):
            return None
        # every score below u moves with the node-centric score it is entered with, the
        # order among them does not: the template keeps scores relative to it
        here = (id(resources), pristine, excl, m.alloc, m.sat)
        ctx = self._tpl_ctx.get(here)
        if ctx is None:  # this match's first leaf parent for the request level: number it
            ctx = self._ctx_number(here, resources, pristine, excl, m)
        # A walk that takes something leaves groups in its scoring and makes no template
        # (see _template_walk): a single-core first-match walks a fresh node and socket
        # per match, so it numbered two new shapes (tuples of 70 children's fields) per
        # match for nothing. After TPL_GIVE_UP such walks in a row for this request level
        # and type, the type's shapes are numbered only once in TPL_RETRY walks (the
        # graph's state may have changed): the plain walk gives the same answer as a
        # template, which only saves time.
        misses = self._tpl_misses
        mkey = (ctx, u.type)
        missed = misses.get(mkey, 0)
        if missed >= TPL_GIVE_UP:
            misses[mkey] = missed + 1 if missed < TPL_RETRY else TPL_GIVE_UP - 1
            return None
        starts = self._starts_over
        shape = self._shape(u)
        if shape is None:
            return None
        if self._starts_over != starts:  # numbering the shape started over: ctx went too
            ctx = self._ctx_number(here, resources, pristine, excl, m)
            shape = self._shape(u)
            mkey, missed = (ctx, u.type), 0
        key = (ctx, shape)
        tpl = self._templates.get(key, False)
        if tpl is False:
            got = self._template_walk(key, m, u, resources, pristine, excl, to_parent)
            misses[mkey] = missed + 1 if self._templates.get(key) is None else 0
            return got
        if tpl is None:
            misses[mkey] = missed + 1
            return None
        misses[mkey] = 0
        self.preorder += tpl.preorder
        self.postorder += tpl.postorder
        self._enforced += tpl.enforced
        if tpl.centric:
            self.policy.last_factor = self.policy.node_factor(u)
        if tpl.visited:
            self._visited.add(u.uniq_id)
        if tpl.errno != _NOT_SET:
            self.errno = tpl.errno
        if tpl.marks:
            marks = self._marks
            kids = u.children
            uid = u.uniq_id
            if tpl.deep:
                for pi, ci, val in tpl.marks:
                    pe = u if pi < 0 else kids[pi]
                    c = pe.children[ci]
                    k = (pe.uniq_id, c.uniq_id)
                    if k not in marks:
                        self._mark_edges.append((pe, c))
                    marks[k] = val
            else:
                for i, val in tpl.marks:
                    c = kids[i]
                    k = (uid, c.uniq_id)
                    if k not in marks:
                        self._mark_edges.append((u, c))
                    marks[k] = val
        if tpl.ok:
            for t in tpl.empty_types:
                to_parent.evals(t)
            to_parent.avail = tpl.avail
            to_parent.overall = tpl.overall + self.policy.ml_scores + self._own_score(u, tpl.deep)
        return tpl.ok, tpl.x

    def _ctx_number(self, here: tuple, resources: list[Request], pristine: bool, excl: bool,
                    m: JobMeta) -> int:
        """Number this match's request level ``here`` (kept in ``_tpl_ctx``)."""
        whole = (self._cache_policy, self._sig(resources), pristine, excl, m.alloc, m.sat)
        ctx = self._tpl_ctx[here] = self._numbered(self._ctx_ids, whole)
        return ctx

    def _template_walk(
        self,
        key: tuple,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        to_parent: Scoring,
    ) -> tuple[bool, bool]:
        pre, post, enforced = self.preorder, self.postorder, self._enforced
        ml, last = self.policy.ml_scores, self.policy.last_factor
        start = len(self._mark_edges)
        probe = Scoring()
        err0, self.errno = self.errno, _NOT_SET
        ok, x = self._dom_dfv_walk(m, u, resources, pristine, excl, probe)
        err = self.errno
        if err == _NOT_SET:
            self.errno = err0
        if ok:
            to_parent.merge(probe)
            to_parent.avail = probe.avail
            to_parent.overall = probe.overall
        tpl = None
        edges = self._mark_edges[start:]
        deep = any(map(_children_of, u.children))
        # a node-centric walk of a node shifts every score below it by the node's factor
        # (the order among them stays) and leaves that factor behind
        centric = (
            self.policy.node_centric and u.type == "node"
            and self.policy.last_factor != last
            and self.policy.last_factor == self.policy.node_factor(u)
        )
        if (
            all(pe is u or (deep and pe.parent is u) for pe, _ce in edges)
            and self.policy.ml_scores == ml
            and (self.policy.last_factor == last or centric)
            and not any(ev.egroups for ev in probe.types.values())
            and (not ok or not (deep or self.policy.variation) or probe.overall > MATCH_UNMET)
        ):
            pos = {c.uniq_id: i for i, c in enumerate(u.children)} if edges else {}
            marks = self._marks
            if deep:
                below = {}
                for pe, _ce in edges:
                    if pe is not u and pe.uniq_id not in below:
                        below[pe.uniq_id] = {c.uniq_id: j for j, c in enumerate(pe.children)}
                got = [
                    (-1, pos[ce.uniq_id], marks[(u.uniq_id, ce.uniq_id)]) if pe is u else
                    (pos[pe.uniq_id], below[pe.uniq_id][ce.uniq_id],
                     marks[(pe.uniq_id, ce.uniq_id)])
                    for pe, ce in edges
                ]
            else:
                got = [(pos[ce.uniq_id], marks[(u.uniq_id, ce.uniq_id)]) for _pe, ce in edges]
            tpl = _Template(
                ok,
                x,
                probe.avail,
                probe.overall - ml - self._own_score(u, deep),
                tuple(probe.types),
                got,
                self.preorder - pre,
                self.postorder - post,
                self._enforced - enforced,
                u.uniq_id in self._visited,
                err,
                deep,
                centric,
            )
        self._templates[key] = tpl
        return ok, x

    # ------------------------------------------------------------ the walk
    def _select(self, req, m: JobMeta, excl: bool) -> tuple[int, int, bool]:
        p = self.policy
        exhaustive = not p.stop_on_1
        key = (p.name, p.high, p.node_centric, p.node_exclusive, exhaustive, p.variation,
               p.stable_ties)
        if key != self._cache_policy:  # the service changes policy between matches
            self._subtree_cache.clear()
            self._templates.clear()
            self._tpl_misses.clear()
            self._pruned.clear()
            self._heres.clear()
            self._cache_policy = key
        dirty = self._pruned_dirty
        if dirty:
            pruned = self._pruned
            for uid in dirty:
                pruned.pop(uid, None)
            dirty.clear()
        self._cacheable = exhaustive
        # the walk's shortcuts (leaves in line, untouched leaf parents by template) give
        # what the plain walk gives in either tie order; the root index only stable ties.
        # Under variation (scores by perf_class) only where no perf_class is below
        # (see _perf_below).
        self._inline_ok = exhaustive and m.constraint is None and self.g.root.type != "node"
        self._index_ok = self._inline_ok and p.stable_ties
        # the first-match policies' leaves in line (not variation: its leaves score by
        # a property; not with constraints, which prune nodes by name)
        self._first_inline_ok = p.stop_on_1 and not p.variation and m.constraint is None
        # untouched subtrees replayed from templates: the exhaustive policies and the
        # first-match ones (whose children's order, by edge weight, is in the shapes)
        self._tpl_ok = self._inline_ok or (
            self._first_inline_ok and self.g.root.type != "node")
        self._root_index = None
        self._root_dfu = None
        self._leaf_levels: dict[int, tuple] = {}  # see _leaf_requests
        self._tpl_ctx = {}  # request levels by id: only within one match
        self._here_ctx: dict[tuple, tuple] = {}  # the same, for _explore_first
        try:
            return super()._select(req, m, excl)
        except _Fallback:
            self._index_ok = self._inline_ok = self._first_inline_ok = self._tpl_ok = False
            self._root_index = None
            return super()._select(req, m, excl)

    def _dom_slot(self, m, u, shape, nslots, pristine, label, dfu) -> int:
        if u.parent is not None or not (self._tpl_ok or self._index_ok):
            return super()._dom_slot(m, u, shape, nslots, pristine, label, dfu)
        # a slot at the root: its candidates are chosen all at once, by the plain walk
        flags = self._index_ok, self._inline_ok, self._tpl_ok
        self._index_ok = self._inline_ok = self._tpl_ok = False
        try:
            return super()._dom_slot(m, u, shape, nslots, pristine, label, dfu)
        finally:
            self._index_ok, self._inline_ok, self._tpl_ok = flags

    def _explore(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        dfu: Scoring,
        multiplier: int = 1,
    ) -> int:
        if u.parent is None and self._index_ok and not dfu.types:
            return self._index_explore(m, u, resources, pristine, excl, dfu)
        if self._first_inline_ok:
            return self._explore_first(m, u, resources, pristine, excl, dfu, multiplier)
        if self._cache is None or self.policy.stop_on_1 or not self._inline_ok:
            return super()._explore(m, u, resources, pristine, excl, dfu, multiplier)
        return self._explore_cached(m, u, resources, pristine, excl, dfu)

    def _explore_first(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        dfu: Scoring,
        multiplier: int,
    ) -> int:
        """The first-match ``_explore`` (children in edge-weight order, stopping once every
        type has ``multiplier`` shares) with a leaf's outcome worked out in line, as
        ``_explore_cached`` does for the exhaustive policies: the same tests, prunes,
        errno, visit counts and score (``Policy.finish_vtx`` of a leaf asking nothing
        below it), without its dozen calls. A gang of 1,000 nodes under ``first`` takes
        one core of each: a third of its vertices.

        A child the walk turns down at once (its test or a prune: one visit, an errno,
        nothing else) is remembered with the request level and window (``_pruned``)
        until an update or release walk, or a status change, touches it (the subtree
        cache's ``pop`` tells ``_pruned_dirty``), and is turned down again the same way
        without its walk: on a full graph a single-core ``firstnodex`` match went
        through thousands of busy nodes at about 2 µs each."""
        rc2 = -1
        level = self._level(resources)
        tally = ShareTally(level.per_share, multiplier)
        sat_types = tally.sat_types
        named = None if pristine else level.named
        leaf_r = self._leaf_requests(level) if named is not None else {}
        direct = self._cache is None
        visited = self._visited
        policy = self.policy
        centric = policy.node_centric
        xtypes = level.xtypes
        checking = not m.sat
        allocating = m.alloc == "alloc"
        at, duration = m.at, m.duration
        pruned = self._pruned
        ctx = (id(resources), pristine, excl)  # the level's key, within this match
        here = self._here_ctx.get(ctx)
        if here is None:
            here = (self._cache_policy, self._sig(resources), pristine, excl, at, duration,
                    m.alloc, m.sat)
            heres = self._heres
            got = heres.get(here)
            if got is None:  # one object per key, compared by identity; a few kept
                if len(heres) >= MAX_PRUNE_KEYS:
                    heres.clear()
                    pruned.clear()
                got = heres[here] = here
            here = self._here_ctx[ctx] = got
        children = self._children(u)
        order = self._order.get(u.uniq_id) if pruned else None
        if order is not None and type(children) is not list:
            # the leading run of remembered prunes in one call (see pruned_skip.py):
            # nothing is counted yet, so no type is satisfied
            kids = u.children
            pos, k, err = skip_pruned(kids, order, 0, pruned, here, visited, _NOT_SET)
            if k:
                self.preorder += k
                if err != _NOT_SET:
                    self.errno = err
                children = map(kids.__getitem__, map(_third, islice(order, pos, None)))
        for c in children:
            uid = c.uniq_id
            if uid in visited:
                continue
            ctype = c.type
            if ctype in sat_types:
                continue
            kids = c.children
            if named is not None and ctype not in named and (direct or not kids):
                self.preorder += 1
                self.errno = EBUSY  # dom_dfv's test: no request of this level names it
                continue
            r = None if kids else leaf_r.get(ctype)
            if r is None or (centric and ctype == "node"):
                if kids:
                    hit = pruned.get(uid)
                    if hit is not None and hit[0] is here:
                        self.preorder += 1
                        if hit[1] != _NOT_SET:
                            self.errno = hit[1]
                        continue
                    pre, post = self.preorder, self.postorder
                    err0, self.errno = self.errno, _NOT_SET
                ok, x_out = self._dom_dfv(m, c, resources, pristine, excl, dfu)
                if kids:
                    err = self.errno
                    if err == _NOT_SET:
                        self.errno = err0
                    if not ok and self.preorder == pre + 1 and self.postorder == post \
                            and uid not in visited:
                        pruned[uid] = (here, err)  # its test or a prune turned it down
                if not ok:
                    continue
                count = dfu.avail
                dfu.add(ctype, EGroup(dfu.overall, count, x_out,
                                      edges=[Edge(c, count, count, x_out, u)]))
            else:
                # _dom_dfv_walk of a leaf for the one request ``r`` naming its type
                self.preorder += 1
                x_in = excl or ctype in xtypes
                avail = leaf_free(c, r, x_in, checking, allocating, at, duration)
                if avail < 0:
                    self.errno = -avail
                    continue
                visited.add(uid)
                self.postorder += 1
                overall = MATCH_MET + policy.ml_scores + c.id + 1
                dfu.avail = avail
                dfu.overall = overall
                dfu.add(ctype, EGroup(overall, avail, x_in, edges=[Edge(c, avail, avail, x_in, u)]))
            rc2 = 0
            if tally.count(dfu):
                break
        return rc2

    def _explore_cached(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        dfu: Scoring,
    ) -> int:
        """The exhaustive ``_explore`` (no dynamic stop) with a leaf's outcome worked out
        in line: a leaf that exactly one request of the level names, asking nothing below
        it, is tested, pruned and scored as ``_dom_dfv_walk`` would (same visit counts),
        without its ten calls. Leaves are most of a graph (a gang on 5,000 nodes scores
        320,000 cores) and of the socket a single-core match re-walks. Under variation
        the leaves score alike (9999: no perf_class below ``u``), or ``u`` is walked
        plainly."""
        policy = self.policy
        variation = policy.variation
        if variation and u.uniq_id in self._perf_below():
            return super()._explore(m, u, resources, pristine, excl, dfu)
        level = self._level(resources)
        named = None if pristine else level.named
        leaf_r = self._leaf_requests(level) if named is not None else {}
        visited = self._visited
        xtypes = level.xtypes
        centric = policy.node_centric
        checking = not m.sat
        allocating = m.alloc == "alloc"
        at, duration = m.at, m.duration
        rc2 = -1
        pre = post = 0  # this loop's leaf visits, added to the walk's counts at the end
        last = None  # (avail, overall) of the last leaf taken, while no subtree came after
        # a leaf's score is base + its id (low, high...); under variation base alone
        by_id = not variation
        base = MATCH_MET + (WORST_PERF_CLASS if variation else policy.ml_scores + 1)
        children = u.children
        nk = len(children)
        i = 0
        while i < nk:
            if leaf_r:  # runs of fresh leaves that pass: scored in one call (compiled)
                i, k, avail, overall = score_fresh_leaves(
                    children, i, u, leaf_r, visited, dfu, xtypes, excl, checking, allocating,
                    centric, base, by_id)
                if k:
                    pre += k
                    post += k
                    last = (avail, overall)
                    rc2 = 0
                if i == nk:
                    break
            c = children[i]
            i += 1
            uid = c.uniq_id
            if uid in visited:
                continue
            kids = c.children
            ctype = c.type
            r = None if kids else leaf_r.get(ctype)
            if r is None or (centric and ctype == "node"):
                if named is not None and ctype not in named and not kids:
                    pre += 1
                    self.errno = EBUSY  # dom_dfv's test: no request of this level names it
                    continue
                ok, x_out = self._dom_dfv(m, c, resources, pristine, excl, dfu)
                if by_id:
                    base = MATCH_MET + policy.ml_scores + 1  # a node-centric walk may move it
                if ok:
                    last = None
                    count = dfu.avail
                    dfu.add(
                        ctype,
                        EGroup(dfu.overall, count, x_out, edges=[Edge(c, count, count, x_out, u)]),
                    )
                    rc2 = 0
                continue
            # _dom_dfv_walk of a leaf for the one request ``r`` naming its type; each
            # prune sets the errno _prune sets (resource-query reports the last one)
            pre += 1
            x_in = excl or ctype in xtypes
            avail = leaf_free(c, r, x_in, checking, allocating, at, duration)
            if avail < 0:
                self.errno = -avail
                continue
            visited.add(uid)
            overall = base + c.id if by_id else base
            post += 1
            last = (avail, overall)
            add_leaf_group(dfu, c, u, ctype, avail, overall, x_in)
            rc2 = 0
        self.preorder += pre
        self.postorder += post
        if last is not None:
            dfu.avail, dfu.overall = last
        return rc2

    def _leaf_requests(self, level) -> dict[str, Request]:
        """Per vertex type, the one request of ``level`` naming it when that request asks
        for nothing below it (the leaves ``_explore_cached`` scores in line)."""
        held = self._leaf_levels.get(id(level))
        if held is not None:
            return held[1]
        seen: dict[str, list[Request]] = {}
        for r in level.resources:
            seen.setdefault(r.type, []).append(r)
        got = {t: rs[0] for t, rs in seen.items() if len(rs) == 1 and not rs[0].with_}
        self._leaf_levels[id(level)] = (level, got)  # the level held: its id stays its own
        return got

    def _index_for(
        self, m: JobMeta, resources: list[Request], pristine: bool, excl: bool
    ) -> RootIndex:
        p = self.policy
        key = (
            self._cache_policy,
            self._sig(resources),
            pristine,
            excl,
            m.at,
            m.duration,
            m.alloc,
            m.sat,
            p.ml_scores,
        )
        idx = self._indexes.pop(key, None)
        if idx is None:
            idx = RootIndex(self.g.root, p.high)
            while len(self._indexes) >= MAX_INDEXES:
                old = self._indexes.pop(next(iter(self._indexes)))
                del self._subtree_cache.sinks[id(old.dirty)]
            self._subtree_cache.sinks[id(idx.dirty)] = idx.dirty
        self._indexes[key] = idx  # most recently used last
        return idx

    def _index_explore(
        self,
        m: JobMeta,
        u: Vertex,
        resources: list[Request],
        pristine: bool,
        excl: bool,
        dfu: Scoring,
    ) -> int:
        idx = self._index_for(m, resources, pristine, excl)
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
                raise _Fallback()
            if not ok:
                idx.set_child(pos, _Child(False, x, {}, []))
                continue
            types = {t: (ev.egroups, ev.qual, ev.total) for t, ev in probe.types.items()}
            avail = probe.avail
            own = EGroup(probe.overall, avail, x, edges=[Edge(c, avail, avail, x, u)])
            groups, qual, total = types.get(c.type, ((), 0, 0))
            types[c.type] = ([*groups, own], qual + (avail if own.score > 0 else 0), total + avail)
            got = [(pe, ce, marks[(pe.uniq_id, ce.uniq_id)]) for pe, ce in mark_edges[start:]]
            idx.set_child(pos, _Child(True, x, types, got))
        self._root_index = idx
        self._root_dfu = dfu
        self._replayed: set[int] = set()
        rc = -1
        for t, ti in idx.types.items():
            if ti.present:
                dfu.types[t] = IndexedEvals(ti)
                rc = 0
        return rc

    # ------------------------------------------------- choosing at the root
    def _resolve(self, dfu: Scoring, to_parent: Scoring) -> int:
        if dfu is not self._root_dfu:
            return super()._resolve(dfu, to_parent)
        if dfu.hier or to_parent.types:
            if not dfu.hier:
                self._materialize(dfu)
            return super()._resolve(dfu, to_parent)
        if dfu.overall > 0:
            to_parent.types.update(dfu.types)  # the root's: taken over, not copied
        return 0

    def _materialize(self, dfu: Scoring) -> None:
        """Turn indexed types back into plain lists (a merge into a non-empty Scoring)."""
        from fluxnode.scheduler.policies.scoring import Evals

        for t, ev in list(dfu.types.items()):
            if type(ev) is IndexedEvals:
                plain = Evals()
                for eg in ev.index.all_groups() + ev.extra:
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
        super()._enforce(dfu, unconstrained)

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

    def match(self, *args, **kwargs):
        self._root_index = None
        try:
            return super().match(*args, **kwargs)
        finally:
            self._root_index = None
