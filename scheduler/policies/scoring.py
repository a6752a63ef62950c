"""Per-vertex candidate bookkeeping (Fluxion's scoring API and edge evaluators).

While the traverser walks a subtree it records, per resource type, groups of
candidate child edges with a score ("egroups"). A policy then chooses the best
``k`` of each type; choosing marks the subtree as constrained so its selection
is enforced at that level rather than merged upward.
"""

from __future__ import annotations

from operator import attrgetter

from fluxnode.scheduler.policies.stdsort import std_sort

MATCH_UNMET = 0
MATCH_MET = 1


class Edge:
    __slots__ = ("vertex", "count", "needs", "exclusive", "parent")

    def __init__(self, vertex, count: int, needs: int, exclusive: bool, parent=None) -> None:
        self.vertex = vertex
        self.parent = parent
        self.count = count
        self.needs = needs
        self.exclusive = exclusive


class EGroup:
    __slots__ = ("score", "count", "needs", "exclusive", "root", "label", "edges")

    def __init__(self, score: int, count: int, exclusive: bool, root: bool = False,
                 label: str = "", edges: list[Edge] | None = None) -> None:
        self.score = score
        self.count = count
        self.needs = 0
        self.exclusive = exclusive
        self.root = root
        self.label = label
        self.edges = edges if edges is not None else []


class Evals:
    __slots__ = ("egroups", "qual", "total", "best_k", "best_i", "cursor", "redo")

    def __init__(self) -> None:
        self.egroups: list[EGroup] = []
        self.qual = 0
        self.total = 0
        self.best_k = 0
        self.best_i = 0
        self.cursor = -1
        # after a partial sort: (the order before it, key, descending), to put back the
        # whole order a full sort leaves if the same groups are sorted again
        self.redo: tuple | None = None

    def add(self, eg: EGroup) -> None:
        self.total += eg.count
        if eg.score > MATCH_UNMET:
            self.qual += eg.count
        self.egroups.append(eg)

    def merge(self, o: Evals) -> None:
        self.qual += o.qual
        self.total += o.total
        self.egroups.extend(o.egroups)

    def choose_best_k(self, k: int, descending: bool, partial: bool = False,
                      stable: bool = False, key=None) -> bool:
        """Order the groups best first and mark the best ``k`` units. ``partial``: only
        the chosen groups are read afterwards, so only their positions are sorted
        (every group holds at least one unit, so they are within the first ``k``).

        ``stable``: the fast mode's tie rule (see policies.fast_index): among equal
        scores the group met first in the walk comes first (a stable sort), instead
        of the order libstdc++'s unstable ``std::sort`` leaves (Fluxion's).

        ``key``: what the sort compares instead of the score (locality's run floor).

        A second choice of the same groups (a request naming one type twice, as the
        flexible traverser's or-slots do) sorts what the first sort left, all of it:
        a partial first sort is then completed from ``redo`` as Fluxion's full one."""
        if k == 0 or k > self.qual:
            return False
        if stable:
            self.egroups.sort(key=_score, reverse=descending)  # stable, also reversed
            return self._take(k)
        redo = self.redo
        if redo is not None:
            self.redo = None
            self.egroups[:] = redo[0]
            std_sort(self.egroups, redo[1], redo[2])
        key = key or _score
        orig = list(self.egroups) if partial else None
        std_sort(self.egroups, key, descending, k if partial else None)
        i = 0
        left = k
        while left > 0:
            if orig is not None and i >= k:  # an empty group: sort all after all
                self.egroups[:] = orig
                return self.choose_best_k(k, descending, key=key)
            eg = self.egroups[i]
            eg.needs = left if left <= eg.count else eg.count
            left -= eg.count
            i += 1
        self.best_k = k
        self.best_i = i
        if orig is not None:
            self.redo = (orig, key, descending)
        return True

    def _take(self, k: int) -> bool:
        """Mark the first ``k`` units of the (ordered) groups as chosen."""
        i = 0
        left = k
        groups = self.egroups
        while left > 0:
            eg = groups[i]
            eg.needs = left if left <= eg.count else eg.count
            left -= eg.count
            i += 1
        self.best_k = k
        self.best_i = i
        return True

    def next(self) -> EGroup | None:
        self.cursor += 1
        if self.cursor < len(self.egroups):
            return self.egroups[self.cursor]
        self.cursor = len(self.egroups)
        return None

    def reset(self) -> None:
        self.cursor = -1


_score = attrgetter("score")


class Scoring:
    __slots__ = ("types", "overall", "avail", "hier")

    def __init__(self) -> None:
        self.types: dict[str, Evals] = {}
        self.overall = -1
        self.avail = 0
        self.hier = False

    def evals(self, t: str) -> Evals:
        ev = self.types.get(t)
        if ev is None:
            ev = self.types[t] = Evals()
        return ev

    def add(self, t: str, eg: EGroup) -> None:
        self.evals(t).add(eg)

    def qualified_count(self, t: str) -> int:
        ev = self.types.get(t)
        return ev.qual if ev else 0

    def total_count(self, t: str) -> int:
        ev = self.types.get(t)
        return ev.total if ev else 0

    def choose_best_k(self, t: str, k: int, descending: bool, stable: bool = False) -> None:
        if self.evals(t).choose_best_k(k, descending, partial=True, stable=stable):
            self.hier = True

    def choose_best_k_by(self, t: str, k: int, key) -> None:
        """Choose the best ``k`` by ``key``, highest first, in Fluxion's tie order (exact
        mode only: the fast mode's kept index orders by score)."""
        if self.evals(t).choose_best_k(k, True, partial=True, key=key):
            self.hier = True

    def choose_all(self, t: str, descending: bool, stable: bool = False) -> None:
        ev = self.evals(t)
        if ev.choose_best_k(ev.qual, descending, stable=stable):
            self.hier = True

    def merge(self, o: Scoring) -> None:
        types = self.types
        for t, ev in o.types.items():
            mine = types.get(t)
            if mine is None:
                mine = types[t] = Evals()
            mine.merge(ev)

    def sorted_types(self) -> list[str]:
        return sorted(self.types)
