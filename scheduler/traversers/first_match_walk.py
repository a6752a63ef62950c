"""The first-match walk: leaves worked out in line, and children turned down at once remembered.

Design: the first-match policies (first, firstnodex, custom ``stop_on_1_matches``)
walk children in edge-weight order and stop once every type has its shares. Two things
make that walk cheap without changing its answers, visit counts or errno:

- A leaf that exactly one request of the level names, asking nothing below it, is
  tested, pruned and scored as ``_dom_dfv_walk`` would, in line, without its dozen
  calls (a gang of 1,000 nodes under ``first`` takes one core of each: a third of its
  vertices).
- A child the walk turns down at once (its test or a prune: one visit, an errno,
  nothing else) is remembered with its request level and window (``_pruned``, keyed
  by an interned ``level_window.LevelWindow`` compared by identity) until an update or
  release walk, or a status change, touches it: the subtree cache tells the watcher
  set ``_pruned_dirty`` (``dfu_impl.SubtreeCache``), and the next walk forgets those.
  The leading run of remembered prunes in a vertex's child order is skipped in one
  compiled call (``pruned_skip.py``). On a full graph a single-core ``firstnodex``
  match went through thousands of busy nodes at about 2 µs each.

``fast_shortcuts.decide`` says when it applies (not under variation, whose leaves
score by a property, nor with constraints, which prune nodes by name).
tests/scheduler/traversers/test_first_pruned.py holds it to the plain walk.
"""

from __future__ import annotations

from itertools import islice
from operator import itemgetter

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import MATCH_MET, Edge, EGroup, Scoring
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import _NOT_SET, EBUSY, EINVAL, ShareTally
from fluxnode.scheduler.traversers.inline_leaves import InlineLeaves
from fluxnode.scheduler.traversers.leaf_scores import leaf_free
from fluxnode.scheduler.traversers.level_window import LevelWindow, WalkLevel
from fluxnode.scheduler.traversers.pruned_skip import skip_pruned

_third = itemgetter(2)

# Request levels and windows whose pruned vertices the first-match walk keeps (all are
# forgotten when one more comes: a service's windows move with time)
MAX_PRUNE_KEYS = 64


class FirstMatchWalk(InlineLeaves):
    """The first-match ``_explore`` with leaves in line and remembered prunes (a mixin of
    ``dfu_fast.FastTraverser``)."""

    def _init_prunes(self) -> None:
        """Nothing remembered; the subtree cache tells ``_pruned_dirty`` of changes."""
        # uniq_id -> (interned request level and window, errno)
        self._pruned: dict[int, tuple[LevelWindow, int]] = {}
        self._heres: dict[LevelWindow, LevelWindow] = {}  # one object per key
        self._pruned_dirty: set[int] = set()  # vertices changed since the last walk
        self._subtree_cache.watch(self._pruned_dirty)

    def _forget_prunes(self) -> None:
        """Every remembered prune forgotten (the policy changed)."""
        self._pruned.clear()
        self._heres.clear()

    def _forget_changed_prunes(self) -> None:
        """The remembered prunes of the vertices changed since the last walk forgotten."""
        dirty = self._pruned_dirty
        if dirty:
            pruned = self._pruned
            for uid in dirty:
                pruned.pop(uid, None)
            dirty.clear()

    def _prune_key(self, wl: WalkLevel) -> LevelWindow:
        """``wl``'s key, interned: one object per key (a few kept), compared by identity."""
        heres = self._heres
        got = heres.get(wl.key)
        if got is None:
            if len(heres) >= MAX_PRUNE_KEYS:
                heres.clear()
                self._pruned.clear()
            got = heres[wl.key] = wl.key
        wl.prune_key = got
        return got

    def _explore_first(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                       excl: bool, dfu: Scoring, multiplier: int) -> int:
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
        wl = self._walk_levels.get((id(resources), pristine, excl))  # _walk_level in line
        if wl is None:
            wl = self._walk_level(m, resources, pristine, excl)
        here = wl.prune_key
        if here is None:  # _prune_key in line
            here = self._heres.get(wl.key)
            if here is None:
                here = self._prune_key(wl)
            wl.prune_key = here
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
                    pre, post, said = self.preorder, self.postorder, len(self.err_msg)
                    err0, self.errno = self.errno, _NOT_SET
                ok, x_out = self._dom_dfv(m, c, resources, pristine, excl, dfu)
                if kids:
                    err = self.errno
                    if err == _NOT_SET:
                        self.errno = err0
                    # (not one that wrote a refusal: it is written on every walk)
                    if not ok and self.preorder == pre + 1 and self.postorder == post \
                            and uid not in visited and len(self.err_msg) == said:
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
                    if avail == -EINVAL:
                        self._by_excl_conflict(c, r)
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
