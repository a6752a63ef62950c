"""Candidates of one type below a vertex with many children, kept sorted across matches.

The exhaustive policies score every candidate of a request on every match: on 5,000
nodes the root gathers ~320,000 groups and sorts them to choose one. The fast mode
(see ``traversers.dfu_fast``) instead keeps, per request and per child of the root,
that child's groups sorted best first, and a heap of the children by their best group.
Choosing the best ``k`` units is then a k-way merge that reads ``k`` groups, and a
match that changed one child re-sorts that child's few groups only.

Order (the fast mode's tie rule): by score, best first (descending for ``policy=high``,
ascending for ``low``); among equal scores, the group met first in the walk, which is
the child with the lowest position (graph order, i.e. the lowest vertex id) and within
a child its walk order. That is exactly what a stable sort of the walk's concatenated
candidate list gives (``Evals.choose_best_k(stable=True)``), so a property test can
compare the two.

:class:`TypeIndex` is the kept state (one per request, window and type);
:class:`IndexedEvals` is the read-only view a match's ``Scoring`` holds in place of an
``Evals`` (the same attributes the policy and the traverser read).
"""

from __future__ import annotations

import heapq
from operator import attrgetter

from fluxnode.scheduler.policies.scoring import MATCH_UNMET, EGroup

_score = attrgetter("score")


class TypeIndex:
    """One type's candidate groups per child position, sorted per child once asked for."""

    __slots__ = (
        "counts",
        "descending",
        "runs",
        "sorted_runs",
        "heap",
        "version",
        "qual",
        "total",
        "present",
    )

    def __init__(self, descending: bool) -> None:
        self.descending = descending
        self.runs: dict[int, list[EGroup]] = {}  # child position -> its groups, walk order
        self.counts: dict[int, tuple[int, int]] = {}  # child position -> (qual, total)
        self.sorted_runs: dict[int, list[EGroup]] = {}  # runs a choice read past the head
        self.heap: list[tuple[int, int, int]] | None = None  # (head key, position, version)
        self.version: dict[int, int] = {}
        self.qual = 0
        self.total = 0
        self.present = 0  # children whose outcome names this type (even with no groups)

    def _key(self, eg: EGroup) -> int:
        return -eg.score if self.descending else eg.score

    def set_child(
        self, pos: int, groups: list[EGroup] | None, qual: int = 0, total: int = 0
    ) -> None:
        """Replace what child ``pos`` offers (None: the type is absent from its outcome):
        its groups in walk order, and their qualified and total units."""
        old = self.runs.pop(pos, None)
        if old is not None:
            self.present -= 1
            q, t = self.counts.pop(pos)
            self.qual -= q
            self.total -= t
        ver = self.version.get(pos, 0) + 1
        self.version[pos] = ver
        self.sorted_runs.pop(pos, None)
        if groups is None:
            return
        self.present += 1
        self.runs[pos] = groups
        self.counts[pos] = (qual, total)
        self.qual += qual
        self.total += total
        if self.heap is not None and groups:
            # the best group, the first of equals (min and max keep the first they meet);
            # the whole run is sorted only if a choice reads past it
            best = max(groups, key=_score) if self.descending else min(groups, key=_score)
            heapq.heappush(self.heap, (self._key(best), pos, ver))
            if len(self.heap) > 4 * len(self.runs) + 64:
                self._build_heap()  # too many stale entries

    def _sorted(self, pos: int) -> list[EGroup]:
        run = self.sorted_runs.get(pos)
        if run is None:
            run = self.sorted_runs[pos] = sorted(
                self.runs[pos], key=_score, reverse=self.descending
            )  # stable
        return run

    def _build_heap(self) -> None:
        heap = []
        pick = max if self.descending else min
        for pos, groups in self.runs.items():
            if groups:
                heap.append((self._key(pick(groups, key=_score)), pos, self.version[pos]))
        heapq.heapify(heap)
        self.heap = heap

    def best(self, k: int, extra: list[EGroup], skip: frozenset[int] = frozenset()) -> list[EGroup]:
        """The groups holding the best ``k`` units, best first, each with ``needs`` set
        (as ``Evals.choose_best_k``). ``extra``: groups added after every child's (the
        vertex's own, as a walk appends them last); ``skip``: child positions left out
        (a constraint's, see ``IndexedEvals``). Requires ``k`` <= qual."""
        if self.heap is None:
            self._build_heap()
        heap = self.heap
        version = self.version
        descending = self.descending
        last = 1 << 60  # a position after every child's
        merge: list[tuple[int, int, int]] = []  # (key, position, index in its run)
        runs: dict[int, list[EGroup]] = {}
        if extra:
            runs[last] = run = sorted(extra, key=_score, reverse=descending)
            merge.append((-run[0].score if descending else run[0].score, last, 0))
        taken: list[tuple[int, int, int]] = []  # heap entries to put back
        out: list[EGroup] = []
        left = k
        while left > 0:
            while heap:
                top = heap[0]
                if version.get(top[1]) != top[2] or top[1] not in self.runs:
                    heapq.heappop(heap)  # stale
                    continue
                if skip and top[1] in skip:  # left out of this match: put back after
                    taken.append(heapq.heappop(heap))
                    continue
                if merge and (merge[0][0], merge[0][1]) < (top[0], top[1]):
                    break
                heapq.heappop(heap)
                taken.append(top)
                runs[top[1]] = self._sorted(top[1])
                heapq.heappush(merge, (top[0], top[1], 0))
                break
            if not merge:
                break
            _key, pos, j = heapq.heappop(merge)
            run = runs[pos]
            eg = run[j]
            eg.needs = left if left <= eg.count else eg.count
            left -= eg.count
            out.append(eg)
            if j + 1 < len(run):
                nxt = run[j + 1]
                heapq.heappush(merge, (-nxt.score if descending else nxt.score, pos, j + 1))
        for entry in taken:
            heapq.heappush(heap, entry)
        return out

    def all_groups(self, skip: frozenset[int] = frozenset()) -> list[EGroup]:
        """Every group in walk order (children by position), as a walk concatenates them;
        the children at ``skip`` left out."""
        out: list[EGroup] = []
        for pos in sorted(self.runs):
            if pos not in skip:
                out.extend(self.runs[pos])
        return out

    def offered(self, skip: frozenset[int]) -> tuple[int, int, int]:
        """(qualified units, total units, children present) with the children at ``skip``
        left out."""
        qual, total, present = self.qual, self.total, self.present
        counts = self.counts
        for pos in skip:
            got = counts.get(pos)
            if got is not None:
                qual -= got[0]
                total -= got[1]
                present -= 1
        return qual, total, present


class IndexedEvals:
    """What a match's ``Scoring`` holds for one type when the fast index answers: the
    attributes ``Evals`` has (qual, total, egroups, best_k, best_i) and its choose.
    ``skip``: the children (by position) this match may not use, as a constraint that
    tests only the children turns them down; the index itself knows no constraint, so
    every match shares it."""

    __slots__ = ("index", "skip", "extra", "egroups", "qual", "total", "best_k", "best_i",
                 "cursor")

    def __init__(self, index: TypeIndex, skip: frozenset[int] = frozenset(),
                 offered: tuple[int, int, int] | None = None) -> None:
        self.index = index
        self.skip = skip
        self.extra: list[EGroup] = []
        self.egroups: list[EGroup] = []  # after choose_best_k: the chosen groups, best first
        if offered is None:
            self.qual, self.total = index.qual, index.total
        else:
            self.qual, self.total = offered[0], offered[1]
        self.best_k = 0
        self.best_i = 0
        self.cursor = -1

    def add(self, eg: EGroup) -> None:
        self.total += eg.count
        if eg.score > MATCH_UNMET:
            self.qual += eg.count
        self.extra.append(eg)

    def choose_best_k(
        self, k: int, descending: bool, partial: bool = False, stable: bool = True
    ) -> bool:
        if k == 0 or k > self.qual:
            return False
        if descending == self.index.descending:
            chosen = self.index.best(k, self.extra, self.skip)
        else:  # asked in the other order (not by the exhaustive policies): sort them all
            groups = self.index.all_groups(self.skip) + self.extra
            groups.sort(key=_score, reverse=descending)
            chosen = []
            left = k
            for eg in groups:
                if left <= 0:
                    break
                eg.needs = left if left <= eg.count else eg.count
                left -= eg.count
                chosen.append(eg)
        self.egroups = chosen
        self.best_k = k
        self.best_i = len(chosen)
        return True
