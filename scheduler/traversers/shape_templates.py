"""Shape templates: an untouched subtree replayed from the walk of another of its shape.

Design: on a fresh graph most subtrees look alike. A socket of 32 free cores under
``first`` or ``low`` gives the same outcome (ok, units, score less its entry score, the
edges it marks by child position, visit counts, errno) as every other socket of the
same shape, and a node of such sockets in a tree as every other such node. So the first
walk of a shape is kept as a :class:`Template` and replayed for the others: a gang on a
fresh graph walks one node of each shape instead of 5,000.

- A shape is a number. ``leaf_shapes.leaf_number`` (compiled) looks up a leaf parent's
  fields (its type, id, size and status, and its children's) without building them; a
  node's deep shape names its leaf parents' numbers, its leaf children and its children's
  edge weights (the first-match policies walk children in that order); ``deep_number``
  (compiled) finds it when every part is numbered. Nodes are numbered when the graph is
  built (``_number_nodes``).
- A template is kept per request level in any window (``level_window.LevelWindow``;
  only an untouched subtree, whose x_checker holds no span, is replayed, and no window
  changes that) and shape. A walk that takes something leaves groups and makes none;
  after ``TPL_GIVE_UP`` such walks in a row a level stops numbering that vertex type,
  and tries again once in ``TPL_RETRY``.
- A status change pops the shapes of the vertex and its ancestors (``_invalidate``);
  past ``MAX_SHAPES`` numbers of one kind, every numbering and template starts over.

Templates give the plain walk's answers and visit counts (tests/scheduler/traversers/
test_templates.py); ``fast_shortcuts.decide`` says when they apply.
"""

from __future__ import annotations

from operator import attrgetter

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import MATCH_UNMET, Scoring
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import _NOT_SET, DfuSelect
from fluxnode.scheduler.traversers.fast_shortcuts import Shortcuts
from fluxnode.scheduler.traversers.leaf_shapes import deep_number, leaf_number
from fluxnode.scheduler.traversers.level_window import WalkLevel
from fluxnode.scheduler.traversers.perf_class_below import PerfClassBelow

_children_of = attrgetter("children")

# Distinct leaf-parent shapes numbered before the numbering starts over (see _leaf_shape).
MAX_SHAPES = 65536
# A request level whose walks of one vertex type have made no template this many times
# in a row stops numbering that type's shapes, and tries again once in TPL_RETRY walks
# (see _dom_dfv_tpl)
TPL_GIVE_UP = 16
TPL_RETRY = 256


class Template:
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

    def __init__(self, ok: bool, x: bool, avail: int, overall: int, empty_types: tuple,
                 marks: list[tuple[int, tuple[int, bool]]], preorder: int, postorder: int,
                 enforced: int, visited: bool, errno: int, deep: bool = False, centric: bool = False
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


class ShapeTemplates(PerfClassBelow, DfuSelect):
    """The select walk's part that numbers shapes and keeps and replays templates (a
    mixin of ``dfu_fast.FastTraverser``)."""

    _shortcuts: Shortcuts

    def _init_templates(self) -> None:
        """Every shape and template forgotten (the graph was (re)built)."""
        self._shapes: dict[int, int | None] = {}  # see _leaf_shape
        self._deep_shapes: dict[int, int | None] = {}  # see _deep_shape
        self._shape_ids: dict[tuple, int] = {}  # a shape -> its number (hashed once)
        # a leaf parent's shapes by a hash of their fields (see leaf_shapes.leaf_number)
        self._leaf_buckets: dict[int, list[tuple[tuple, int]]] = {}
        self._columns: dict[tuple, tuple] = {}  # see _shared_columns
        self._ctx_ids: dict[tuple, int] = {}  # a request level (any window) -> its number
        self._templates: dict[tuple, Template | None] = {}
        # (request level number, vertex type) -> walks in a row that made or found no
        # template; see _dom_dfv_tpl
        self._tpl_misses: dict[tuple[int, str], int] = {}
        self._starts_over = 0  # how many times _numbered started every numbering over
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
            self._columns.clear()
            self._ctx_ids.clear()
            self._shapes.clear()
            self._deep_shapes.clear()
            for wl in self._walk_levels.values():
                wl.template_ctx = None
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
            whole = self._shared_columns(whole)
            shape = self._numbered(self._shape_ids, whole)
            self._leaf_buckets.setdefault(h, []).append((whole, shape))
        self._shapes[uid] = shape
        return shape

    def _shared_columns(self, whole: tuple) -> tuple:
        """``whole`` (a new leaf shape's fields: the parent's type, id, size and status,
        then its children's types, ids, sizes and statuses, a tuple each) with those four
        columns replaced by equal ones kept before, when there are. Every node of a make
        has the same children's columns and its own id, so each node is a shape of its
        own: the leader's 1,000 nodes of 196 leaves kept 4,000 tuples of 196 entries
        (6.4 MiB, a fifth of its graph's memory; docs/benchmarks.md) where 4 do. Equal
        tuples compare and hash as before: numbers, lookups and templates are unchanged."""
        keep = self._columns.setdefault
        return (*whole[:4], *(keep(col, col) for col in whole[4:]))

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

    def _dom_dfv(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool, excl: bool,
                 to_parent: Scoring) -> tuple[bool, bool]:
        got = self._dom_dfv_tpl(m, u, resources, pristine, excl, to_parent)
        if got is None:
            return DfuSelect._dom_dfv(self, m, u, resources, pristine, excl, to_parent)
        return got

    def _dom_dfv_tpl(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                     excl: bool, to_parent: Scoring) -> tuple[bool, bool] | None:
        """An untouched vertex whose children are leaves (a socket of cores, with nothing
        held below it: its x_checker has no span) scores as every other of its shape:
        the first one's walk is kept as a template (its marks by child position) and
        replayed for the others. So does, in a tree, one whose children are such leaf
        parents or leaves (a node of sockets: a deep template). A fresh graph's gang
        walks one node of each shape instead of 5,000. None: no template stands for
        ``u`` (the caller walks it)."""
        if (
            not self._shortcuts.templates
            or u.parent is None
            or not u.children
            or (u.x_checker is not None and u.x_checker.span_count)
            or (self.policy.variation and u.uniq_id in self._perf_below())
        ):
            return None
        # every score below u moves with the node-centric score it is entered with, the
        # order among them does not: the template keeps scores relative to it
        wl = self._walk_levels.get((id(resources), pristine, excl))  # _walk_level in line
        if wl is None:
            wl = self._walk_level(m, resources, pristine, excl)
        ctx = wl.template_ctx
        if ctx is None:  # this walk's first leaf parent for the request level: number it
            ctx = self._ctx_number(wl)
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
            ctx = self._ctx_number(wl)
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

    def _ctx_number(self, wl: WalkLevel) -> int:
        """Number this walk's request level ``wl`` in any window (kept in ``wl``)."""
        ctx = self._numbered(self._ctx_ids, wl.key.level)
        wl.template_ctx = ctx
        return ctx

    def _template_walk(self, key: tuple, m: JobMeta, u: Vertex, resources: list[Request],
                       pristine: bool, excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        pre, post, enforced = self.preorder, self.postorder, self._enforced
        ml, last = self.policy.ml_scores, self.policy.last_factor
        start, said = len(self._mark_edges), len(self.err_msg)
        ok, x, probe, err = self._probe_walk(m, u, resources, pristine, excl, to_parent)
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
            len(self.err_msg) == said  # a refusal it wrote names this subtree's vertices
            and all(pe is u or (deep and pe.parent is u) for pe, _ce in edges)
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
            tpl = Template(
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
