"""Fluxion's ``locality`` policy: the root chooses by runs of consecutive scores.

``locality`` (flux-sched ``greater_interval_first_t``, policies/dfu_match_locality.cpp)
scores every vertex as ``policy=high`` does (its id + 1) and chooses below the root as
``high`` does. Only the root differs: it puts every candidate's score into a
boost::icl ``interval_set``, which joins touching values, so each maximal run of
consecutive scores becomes one interval. It then sorts the candidates by the interval
they fall in, the interval starting highest first. Candidates of one run compare
equal, so free neighbours (nodes 4-7 when 0-2 are busy) stay together and the run
that starts highest is taken first. The interval set keeps every type the root has
chosen so far in this match, as Fluxion's one comparator object does.

Among the candidates of one run, exact mode keeps what libstdc++'s ``std::sort``
leaves (``policies.stdsort``), so ``fluxnode resource-query -P locality`` answers as
Fluxion does. Fast mode (``Policy.stable_ties``) breaks that tie by score, higher
first. Runs are disjoint and ordered, so "run starting highest, then higher score" is
"higher score": fast ``locality`` is fast ``high``, and its choice comes from the same
runs as exact mode's.
"""

from __future__ import annotations

from collections.abc import Iterable


class RunFloors:
    """The scores the root has met in one match, each mapped to the lowest score of its
    run of consecutive scores. Two scores get the same floor when they are in one run."""

    __slots__ = ("_floor",)

    def __init__(self) -> None:
        self._floor: dict[int, int] = {}

    def add(self, scores: Iterable[int]) -> None:
        """Join ``scores`` into the set and recompute the floors (one sort: a match's
        root holds at most a few hundred thousand candidates)."""
        merged = set(self._floor)
        merged.update(scores)
        floor: dict[int, int] = {}
        prev = start = None
        for s in sorted(merged):
            if prev is None or s != prev + 1:
                start = s
            floor[s] = start
            prev = s
        self._floor = floor

    def key(self, group) -> int:
        """The sort key of a candidate group: the floor of its score's run."""
        return self._floor[group.score]
