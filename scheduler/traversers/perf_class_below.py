"""Where the variation policy's scores read a property: the vertices with a perf_class below.

Design: the variation policy scores a vertex by its own ``perf_class`` property (9999
without one). The fast traverser's walk shortcuts (leaves scored in line, shape
templates) read no property, so under variation they stand for a subtree only when
nothing below its root has one: the leaves in line then all score alike, and a
template's score is the walk's less its root's class (added back on replay). This mixin
keeps that set of vertices, gathered on first use and grown by ``set_property``.
"""

from __future__ import annotations

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.policies.policy import PERF_CLASS, Policy
from fluxnode.scheduler.traversers.dfu_select import DfuSelect


class PerfClassBelow(DfuSelect):
    """The vertices with a ``perf_class`` somewhere below them (a FastTraverser mixin)."""

    _pc_below: set[int] | None  # None: not gathered yet

    def set_property(self, v: Vertex, key: str, value: str) -> None:
        super().set_property(v, key, value)  # type: ignore[misc]  # Traverser's
        if key == PERF_CLASS and self._pc_below is not None:
            self._mark_perf_below(v)

    def _mark_perf_below(self, v: Vertex) -> None:
        p = v.parent
        below = self._pc_below
        while p is not None and p.uniq_id not in below:
            below.add(p.uniq_id)
            p = p.parent

    def _perf_below(self) -> set[int]:
        """The vertices with a ``perf_class`` somewhere below them (see the module)."""
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
