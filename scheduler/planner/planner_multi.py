"""Fluxion's planner_multi: one :class:`Planner` per resource type, moved together.

Fluxion keeps one at each subtree root to know, e.g., how many cores and GPUs are free below
it over time, and prunes a whole subtree when a request cannot fit. A multi-span adds a span
to every planner (0-unit spans included, so all planners share the same scheduled points);
``avail_time_first`` walks the first type's candidate times and keeps those where the other
types are free too, as planner_multi.c does.

Requests are a mapping ``{type: count}`` (types left out ask for 0) or a sequence of counts
in the planner's type order. Multi-span ids count from 0, like Fluxion's.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Iterable, Mapping, Sequence

from fluxnode.scheduler.planner.planner import INT64_MAX, Planner, PlannerError

__all__ = ["PlannerMulti"]

Request = Mapping[str, int] | Sequence[int]

# type -> index maps, shared by every multi-planner with the same types (never mutated)
_INDEXES: dict[tuple[str, ...], dict[str, int]] = {}


def _shared_index(types: list[str]) -> dict[str, int]:
    key = tuple(types)
    index = _INDEXES.get(key)
    if index is None:
        index = {t: i for i, t in enumerate(types)}
        if len(_INDEXES) < 1024:
            _INDEXES[key] = index
    return index


class PlannerMulti:
    """Planners for several resource types over one horizon."""

    __slots__ = ("_base", "_duration", "_planners", "_index", "_spans", "_counter", "_iter",
                 "shared")

    def __init__(self, base_time: int, duration: int,
                 totals: Mapping[str, int] | Iterable[tuple[str, int]]) -> None:
        # (a plain dict first: an ABC isinstance check is slow, and this runs per vertex)
        mapping = type(totals) is dict or isinstance(totals, Mapping)
        items = list(totals.items() if mapping else totals)
        if duration < 1:
            raise PlannerError(_errno.EINVAL, f"duration must be >= 1, not {duration}")
        self._base, self._duration = base_time, duration
        types = [rtype for rtype, _ in items]
        if len(set(types)) != len(types):
            raise PlannerError(_errno.EINVAL, f"resource types given twice in {types}")
        self._planners = [Planner(base_time, duration, total, rtype) for rtype, total in items]
        self._index = _shared_index(types)
        # multi-span id -> sub-span id per planner (None once a partial cancel removed it);
        # None until the first span, to keep idle multi-planners small
        self._spans: dict[int, list[int | None]] | None = None
        self._counter = 0
        self._iter: tuple[int, list[int]] | None = None  # duration, counts
        # held by several vertices (see share): read-only, every change raises
        self.shared = False

    @classmethod
    def holding(cls, base_time: int, duration: int, totals: dict[str, int], start: int,
                span_duration: int, request: dict[str, int]) -> tuple[PlannerMulti, int]:
        """A new multi-planner with one span planned: ``PlannerMulti(...)`` then
        ``add_span(...)`` in one pass, each type's planner made with its span
        (``Planner.holding``). Returns it and the span id. A gang's update walk makes one
        for each node and socket it takes."""
        if (duration < 1 or type(totals) is not dict or type(request) is not dict
                or not request.keys() <= totals.keys()):
            mp = cls(base_time, duration, totals)  # the general path says what is wrong
            return mp, mp.add_span(start, span_duration, request)
        mp = cls.__new__(cls)
        mp._base, mp._duration = base_time, duration
        mp._planners = [
            Planner.holding(base_time, duration, total, rtype, start, span_duration,
                            request.get(rtype, 0))
            for rtype, total in totals.items()
        ]
        mp._index = _shared_index(list(totals))
        mp._spans = {0: [1] * len(mp._planners)}
        mp._counter = 1
        mp._iter = None
        mp.shared = False
        return mp, 0

    def share(self) -> PlannerMulti:
        """Mark this multi-planner (and its planners) read-only and return it, so that
        several vertices can hold it: the update walk gives the fresh vertices of one
        job that have the same totals and the same counts below them one subtree
        filter, not one each (a gang's 1,000 nodes and 1,000 sockets: two, not 2,000;
        see job_spans.JobSpans). As with :meth:`Planner.share`, every change raises
        (EPERM), a holder that must change its own takes :meth:`owned` first, and one
        that drops the job whose span it holds drops the multi-planner."""
        self.shared = True
        for p in self._planners:
            p.share()
        return self

    def owned(self) -> PlannerMulti:
        """This multi-planner, or a private copy of it when it is shared (to change it)."""
        return self.copy() if self.shared else self

    def without_span(self, span_id: int) -> PlannerMulti | None:
        """What a holder keeps once span ``span_id`` goes: this multi-planner less the
        span, or None for a shared one (it held that span alone, see share)."""
        if self.shared:
            return None
        self.rem_span(span_id)
        return self

    def _read_only(self) -> None:
        raise PlannerError(_errno.EPERM, "a shared planner_multi cannot change; copy it first")

    # ---------------------------------------------------------------- getters

    @property
    def base_time(self) -> int:
        return self._base

    @property
    def duration(self) -> int:
        return self._duration

    @property
    def resource_types(self) -> list[str]:
        return [p.resource_type for p in self._planners]

    @property
    def totals(self) -> dict[str, int]:
        return {p.resource_type: p.total for p in self._planners}

    @property
    def span_count(self) -> int:
        return len(self._spans) if self._spans else 0

    @property
    def resources_len(self) -> int:
        """How many resource types (planner_multi_resources_len)."""
        return len(self._planners)

    def __repr__(self) -> str:
        return (f"PlannerMulti(base_time={self._base}, duration={self._duration}, "
                f"totals={self.totals}, spans={self.span_count})")

    def has_type(self, resource_type: str) -> bool:
        return resource_type in self._index

    def planner(self, resource_type: str) -> Planner:
        """The planner of one type (shares state: changing it changes this multi-planner)."""
        try:
            return self._planners[self._index[resource_type]]
        except KeyError:
            raise PlannerError(_errno.EINVAL, f"no planner for {resource_type!r}") from None

    def spans(self) -> list[int]:
        return sorted(self._spans or ())

    def has_span(self, span_id: int) -> bool:
        return bool(self._spans) and span_id in self._spans

    def span_planned(self, span_id: int) -> dict[str, int]:
        """Units each type still holds in a multi-span (0 where a partial cancel removed it)."""
        subs = self._get(span_id)
        out = {}
        for i, p in enumerate(self._planners):
            sub = subs[i] if i < len(subs) else None
            out[p.resource_type] = 0 if sub is None else p.span(sub).planned
        return out

    # ---------------------------------------------------------------- queries

    def avail_resources_at(self, at: int) -> dict[str, int]:
        return {p.resource_type: p.avail_resources_at(at) for p in self._planners}

    def avail_resources_during(self, at: int, duration: int) -> dict[str, int]:
        return {p.resource_type: p.avail_resources_during(at, duration) for p in self._planners}

    def avail_during(self, at: int, duration: int, request: Request) -> bool:
        """Whether every type has its requested units free during ``[at, at + duration)``."""
        counts = self._counts(request)
        return all(p.avail_during(at, duration, n) for p, n in zip(self._planners, counts,
                                                                   strict=True))

    def avail_time_first(self, on_or_after: int, duration: int, request: Request) -> int | None:
        """The first candidate time of the first type's planner at which every type fits."""
        if self.shared:
            self._read_only()
        counts = self._counts(request)
        if not self._planners:
            raise PlannerError(_errno.EINVAL, "planner_multi has no resource types")
        self._iter = (duration, counts)
        t = self._planners[0].avail_time_first(on_or_after, duration, counts[0])
        return self._fit_others(t)

    def avail_time_next(self) -> int | None:
        if self._iter is None or not self._planners:
            raise PlannerError(_errno.EINVAL, "avail_time_next without avail_time_first")
        return self._fit_others(self._planners[0].avail_time_next())

    # ---------------------------------------------------------------- updates

    def add_span(self, start: int, duration: int, request: Request) -> int:
        """Add one span per type (0-unit ones too); all or nothing. Returns the id."""
        if self.shared:
            self._read_only()
        counts = self._counts(request)
        subs: list[int | None] = []
        try:
            for p, n in zip(self._planners, counts, strict=False):  # _counts made the lengths equal
                subs.append(p.add_span(start, duration, n))
        except PlannerError:
            for p, sub in zip(self._planners, subs, strict=False):
                p.rem_span(sub)
            raise
        span_id = self._counter
        self._counter += 1
        if self._spans is None:
            self._spans = {}
        self._spans[span_id] = subs
        self._iter = None
        return span_id

    def rem_span(self, span_id: int) -> None:
        if self.shared:
            self._read_only()
        subs = self._get(span_id)
        if len(subs) > len(self._planners):
            raise PlannerError(_errno.EINVAL, f"span {span_id} predates a planner update")
        for p, sub in zip(self._planners, subs, strict=False):
            if sub is not None:
                p.rem_span(sub)
        del self._spans[span_id]
        self._iter = None

    def reduce_span(self, span_id: int, amounts: Mapping[str, int]) -> bool:
        """Partial cancel: give back ``amounts`` per type (types not named give back 0, which
        removes their 0-unit spans). Returns True when nothing is left and the multi-span
        was removed (planner_multi_reduce_span)."""
        if self.shared:
            self._read_only()
        subs = self._get(span_id)
        if len(subs) < len(self._planners):
            raise PlannerError(_errno.EINVAL, f"span {span_id} predates a planner update")
        for amount in amounts.values():
            if not 0 <= amount <= INT64_MAX:
                raise PlannerError(_errno.ERANGE, f"amount {amount} is out of range")
        for i, p in enumerate(self._planners):
            sub = subs[i]
            if sub is None or not p.has_span(sub):
                continue
            if p.reduce_span(sub, amounts.get(p.resource_type, 0)):
                subs[i] = None
        self._iter = None
        if all(s is None for s in subs):
            del self._spans[span_id]
            return True
        return False

    def update(self, totals: Mapping[str, int]) -> None:
        """Make the types and totals these (planner_multi_update): existing types get the
        new total and order, new ones get an empty planner, types not named are dropped."""
        if self.shared:
            self._read_only()
        for rtype, total in totals.items():
            if not 0 <= total <= INT64_MAX:
                raise PlannerError(_errno.ERANGE, f"total of {rtype!r} must be within "
                                                  f"0..INT64_MAX, not {total}")
        planners = []
        for rtype, total in totals.items():
            if rtype in self._index:
                p = self._planners[self._index[rtype]]
                p.update_total(total)
            else:
                p = Planner(self._base, self._duration, total, rtype)
            planners.append(p)
        old = {p.resource_type: i for i, p in enumerate(self._planners)}
        for span_id, subs in (self._spans or {}).items():
            self._spans[span_id] = [subs[old[p.resource_type]]
                                    if p.resource_type in old and old[p.resource_type] < len(subs)
                                    else None for p in planners]
        self._planners = planners
        self._index = _shared_index([p.resource_type for p in planners])
        self._iter = None

    def reset(self, base_time: int, duration: int) -> None:
        """Forget every span and restart the horizon."""
        if self.shared:
            self._read_only()
        if duration < 1:
            raise PlannerError(_errno.EINVAL, f"duration must be >= 1, not {duration}")
        for p in self._planners:
            p.reset(base_time, duration)
        self._base, self._duration = base_time, duration
        self._spans = None
        self._counter = 0
        self._iter = None

    def copy(self) -> PlannerMulti:
        new = PlannerMulti.__new__(PlannerMulti)
        new._base, new._duration = self._base, self._duration
        new._planners = [p.copy() for p in self._planners]
        new._index = self._index
        new._spans = None if self._spans is None else {k: list(v) for k, v in self._spans.items()}
        new._counter, new._iter = self._counter, self._iter
        new.shared = False
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlannerMulti):
            return NotImplemented
        return (self._planners, self._spans or {}, self._counter) == (
            other._planners, other._spans or {}, other._counter)

    __hash__ = None  # mutable

    # ---------------------------------------------------------------- internals

    def _get(self, span_id: int) -> list[int | None]:
        try:
            return self._spans[span_id]  # type: ignore[index]
        except (KeyError, TypeError):
            raise PlannerError(_errno.ENOENT, f"no span {span_id}") from None

    def _counts(self, request: Request) -> list[int]:
        if type(request) is dict or isinstance(request, Mapping):
            if not request.keys() <= self._index.keys():
                unknown = set(request) - set(self._index)
                raise PlannerError(_errno.EINVAL, f"no planner for {sorted(unknown)}")
            return [request.get(t, 0) for t in self._index]  # _index is in planner order
        counts = list(request)
        if len(counts) != len(self._planners):
            raise PlannerError(_errno.EINVAL, f"{len(counts)} counts for "
                                              f"{len(self._planners)} resource types")
        return counts

    def _fit_others(self, t: int | None) -> int | None:
        duration, counts = self._iter  # type: ignore[misc]
        first = self._planners[0]
        while t is not None:
            if all(_fits(p, t, duration, n)
                   for p, n in zip(self._planners[1:], counts[1:], strict=True)):
                return t
            t = first.avail_time_next()
        return None


def _fits(p: Planner, at: int, duration: int, request: int) -> bool:
    try:
        return p.avail_during(at, duration, request)
    except PlannerError:
        return False
