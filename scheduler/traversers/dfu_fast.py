"""The fast traverser: Fluxion's walk with four speed-ups, each a named part of its own.

Design: ``FastTraverser`` is the plain ``Traverser`` (dfu.py) with four speed-ups that
change no answer, each a mixin in its own file with its own design comment:

- the root index (``root_index.py``): the exhaustive policies' root candidates kept
  across matches, re-walking only the root children whose subtree changed (fast mode:
  ``Policy.stable_ties``; the tie rule is the only difference from exact mode);
- leaves scored in line (``inline_leaves.py``): the exhaustive walk's leaves worked out
  without their walk's calls, runs of fresh ones in one compiled call;
- shape templates (``shape_templates.py``): an untouched subtree replayed from the walk
  of another of its shape;
- the first-match walk (``first_match_walk.py``): the first-match policies' leaves in
  line, and the children they turned down at once remembered until they change.

The hot walk methods call the plain walk's by name (``DfuSelect._explore(self, ...)``),
not through ``super()``: Python 3.11 looks a ``super()`` attribute up class by class
along the MRO on every call, and these mixins put five classes in the way.

Which of them a select walk takes is decided once, before it starts, into a frozen
``fast_shortcuts.Shortcuts`` that every part reads. Their caches key what they keep
per request level and job window with one type (``level_window.LevelWindow``), and
hear of changed vertices by one path: the subtree cache's ``pop``
(``dfu_impl.SubtreeCache``), which they watch. A change of policy (the service changes
it between matches) forgets what depends on it (``_select``).

With ``Policy.stable_ties`` False (exact mode, as resource-query) only the walk's
speed-ups apply (leaves in line, templates, the first-match walk): the same answers
and visit counts as the plain Traverser, in less time.
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import Scoring
from fluxnode.scheduler.traversers.dfu import Traverser
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import DfuSelect
from fluxnode.scheduler.traversers.fast_shortcuts import NONE, Shortcuts, decide
from fluxnode.scheduler.traversers.first_match_walk import FirstMatchWalk
from fluxnode.scheduler.traversers.root_index import IndexFallback, RootIndexWalk
from fluxnode.scheduler.traversers.shape_templates import ShapeTemplates

__all__ = ["FastTraverser"]


class FastTraverser(RootIndexWalk, ShapeTemplates, FirstMatchWalk, Traverser):
    """A Traverser with the root index, shape templates, leaves in line and the
    first-match walk's memory (see the module)."""

    def __init__(self, graph, policy="first", *args, **kwargs) -> None:
        self._indexes = {}
        self._cache_policy: tuple | None = None
        self._shortcuts: Shortcuts = NONE
        self._root_index = None
        self._root_dfu = None
        self._replayed = set()
        self._walk_levels = {}
        super().__init__(graph, policy, *args, **kwargs)

    def _reinit(self) -> None:
        super()._reinit()
        self._indexes = {}
        self._walk_levels = {}
        self._root_slot_of: tuple[list[Request] | None, bool] = (None, False)
        # vertices with a perf_class below them (see _perf_below); None: not gathered yet
        self._pc_below = None
        self._init_prunes()
        self._init_templates()
        self._init_root_index()

    # ------------------------------------------------------------ the walk
    def _select(self, req, m: JobMeta, excl: bool) -> tuple[int, int, bool]:
        p = self.policy
        exhaustive = not p.stop_on_1
        key = (p.name, p.high, p.node_centric, p.node_exclusive, exhaustive, p.variation,
               p.stable_ties)
        if key != self._cache_policy:  # the service changes policy between matches
            self._subtree_cache.clear()  # (visit counts, as for a window: DfuSelect._select)
            self._templates.clear()
            self._tpl_misses.clear()
            self._forget_prunes()
            self._cache_policy = key
        if self._pruned_dirty:
            self._forget_changed_prunes()
        self._cacheable = exhaustive and not self._aux
        root = self.g.root
        root_slot = self._root_slot(req.resources)
        root_is_node = root.type == "node"
        s = decide(p, False, root_is_node, root_slot)
        if m.constraint is not None and not (s.root_index and self._nodes_at_root):
            s = decide(p, True, root_is_node, root_slot)
        if self._aux or self._labels_of(req.resources):
            s = NONE  # the plain walk: the auxiliary subsystems, or labels (DfuImpl)
        # else the root index applies the constraint (see root_index.py); nothing else
        # of the walk meets it: the root's children are walked without it
        self._shortcuts = s
        self._root_index = None
        self._root_dfu = None
        self._leaf_levels = {}  # see _leaf_requests
        try:
            return super()._select(req, m, excl)
        except IndexFallback:
            self._shortcuts = NONE
            self._root_index = None
            return super()._select(req, m, excl)

    def _root_slot(self, resources: list[Request]) -> bool:
        """Does a slot of ``resources`` sit at the root (``_test``'s answer)? Asked of a
        request that may put one there, once per request (a match selects two to four
        times, and a caller may match one request many times)."""
        asked, answer = self._root_slot_of
        if asked is resources:
            return answer
        root = self.g.root
        answer = False
        for r in resources:
            if r.type == "slot" or (r.type == root.type and r.with_):
                answer = self._test(root, resources, True)[1] == "slot"
                break
        self._root_slot_of = (resources, answer)  # holds the last request's list
        return answer

    def _explore(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool, excl: bool,
                 dfu: Scoring, multiplier: int = 1) -> int:
        s = self._shortcuts
        if u.parent is None and s.root_index:
            if not dfu.types:
                return self._index_explore(m, u, resources, pristine, excl, dfu)
            if m.constraint is not None:  # the walk's shortcuts know no constraint
                raise IndexFallback()
        if s.first_match:
            return self._explore_first(m, u, resources, pristine, excl, dfu, multiplier)
        if self._cache is None or self.policy.stop_on_1 or not s.inline_leaves:
            return DfuSelect._explore(self, m, u, resources, pristine, excl, dfu, multiplier)
        return self._explore_cached(m, u, resources, pristine, excl, dfu)

    def match(self, *args, **kwargs):
        self._root_index = None
        try:
            return super().match(*args, **kwargs)
        finally:
            self._root_index = None
