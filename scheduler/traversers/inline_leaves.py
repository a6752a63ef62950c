"""Leaves scored in line: the exhaustive walk's leaves worked out without their walk's calls.

Design: leaves are most of a graph (a gang on 5,000 nodes scores 320,000 cores) and of
the socket a single-core match re-walks. A leaf that exactly one request of the level
names, asking nothing below it (``_leaf_requests``), is tested, pruned and scored in
``_explore_cached`` as ``_dom_dfv_walk`` would (same visit counts, errno and group),
without its ten calls; runs of fresh leaves that pass are scored in one compiled call
(``leaf_scores.score_fresh_leaves``). Every other child is walked as before. Under
variation the leaves score alike (9999) only where no perf_class lies below the vertex
(``perf_class_below.py``); elsewhere the vertex is walked plainly.

The first-match walk (``first_match_walk.py``) works its leaves out in line the same
way, with the same ``_leaf_requests``. ``fast_shortcuts.decide`` says when each applies.
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.policy import WORST_PERF_CLASS
from fluxnode.scheduler.policies.scoring import MATCH_MET, Edge, EGroup, Scoring
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import EBUSY, EINVAL, DfuSelect
from fluxnode.scheduler.traversers.leaf_scores import add_leaf_group, leaf_free, score_fresh_leaves
from fluxnode.scheduler.traversers.perf_class_below import PerfClassBelow


class InlineLeaves(PerfClassBelow):
    """The exhaustive ``_explore`` with leaves in line (a mixin of
    ``dfu_fast.FastTraverser``)."""

    _leaf_levels: dict[int, tuple]  # this walk's: id(level) -> (level, _leaf_requests)

    def _explore_cached(self, m: JobMeta, u: Vertex, resources: list[Request], pristine: bool,
                        excl: bool, dfu: Scoring) -> int:
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
            return DfuSelect._explore(self, m, u, resources, pristine, excl, dfu)
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
                if avail == -EINVAL:
                    self._by_excl_conflict(c, r)
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
