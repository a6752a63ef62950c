"""Fluxion's planner: how many units of one resource type are free over time.

Fluxion keeps one planner per resource vertex (and aggregate ones per subtree), so this has
to be cheap when empty and fast when busy. The timeline is a sorted list of *scheduled
points* (times where some span starts or ends) each holding the ``remaining`` units from that
time until the next point; ``bisect`` finds a time's state in O(log n) and span updates touch
only the points inside the span. A planner with no spans holds no lists at all.

Semantics follow flux-sched's ``planner.h`` (``resource/planner``):

* the horizon is ``[base_time, base_time + duration)``; spans must start at or after
  ``base_time`` and ``start + duration - 1 <= base_time + duration`` (Fluxion's check);
* candidate start times of ``avail_time_first``/``avail_time_next`` are *scheduled points*
  only (the base time and the starts/ends of spans) at or after ``on_or_after``, in time
  order, that have ``request`` units free for ``duration`` and end inside the horizon; an
  empty planner asked from a time after its base time has no candidate (returns None),
  exactly like Fluxion;
* ``update_total`` shifts every point's ``remaining`` by the change, clamped at 0, but (as in
  Fluxion, whose min-time tree keeps the old counts until a point is touched again) the
  candidate search of ``avail_time_first`` keeps using the old counts of untouched points.

Errors raise :class:`PlannerError` whose ``errno`` is Fluxion's: ``EINVAL`` (bad time,
duration or amount to reduce), ``ERANGE`` (a request above the total or below zero, a query
outside the horizon), ``EBUSY`` (a span over busy time), ``ENOENT`` (no such span).
"""

from __future__ import annotations

import errno as _errno
from bisect import bisect_left, bisect_right
from typing import NamedTuple

__all__ = ["INT64_MAX", "Planner", "PlannerError", "Span"]

INT64_MAX = 2**63 - 1


# Horizon ends shared between planners: a graph's planners all end at base + INT64_MAX, and
# one int object instead of one per planner is a fifth of an empty planner's memory.
_ENDS: dict[int, int] = {}


def _shared_end(end: int) -> int:
    shared = _ENDS.get(end)
    if shared is not None:
        return shared
    if len(_ENDS) < 1024:
        return _ENDS.setdefault(end, end)
    return _ENDS.get(end, end)


class PlannerError(Exception):
    """A planner call Fluxion would fail; ``errno`` is the errno Fluxion sets."""

    def __init__(self, errnum: int, message: str) -> None:
        self.errno = errnum
        self.reason = message
        super().__init__(f"{message} ({_errno.errorcode.get(errnum, errnum)})")


class Span(NamedTuple):
    """A planned span: ``planned`` units from ``start`` for ``duration``."""

    start: int
    duration: int
    planned: int


class Planner:
    """Free units of ``resource_type`` over ``[base_time, base_time + duration)``."""

    __slots__ = (
        "_base", "_end", "_total", "_type",
        "_at", "_rem", "_ref",
        "_spans", "_counter", "_iter", "_key", "_tracked", "_planned",
        "shared",
    )

    def __init__(self, base_time: int, duration: int, total: int, resource_type: str) -> None:
        if duration < 1:
            raise PlannerError(_errno.EINVAL, f"duration must be >= 1, not {duration}")
        if not 0 <= total <= INT64_MAX:
            raise PlannerError(_errno.ERANGE, f"total must be within 0..INT64_MAX, not {total}")
        self._base = base_time
        self._end = _shared_end(base_time + duration)
        self._total = total
        self._type = resource_type
        # Scheduled points, parallel lists sorted by time; None while the only point is the
        # base point with everything free (no span), which is most planners most of the time.
        self._at: list[int] | None = None
        self._rem: list[int] | None = None
        self._ref: list[int] | None = None
        self._spans: dict[int, tuple[int, int, int]] | None = None  # id -> (start, last, n)
        self._counter = 0
        self._planned = 0  # units of every span together (the O(1) lower bound's running sum)
        self._iter: tuple[int, int, int, int] | None = None  # on_or_after, dur, request, next
        # Fluxion's min-time tree: the free count each point had when last (re)inserted.
        # None while equal to _rem, i.e. unless update_total changed counts behind its back.
        self._key: list[int] | None = None
        # times of points an avail_time iteration took out of that tree (Fluxion re-inserts
        # them, refreshing their count, at the next avail_time_first or span change)
        self._tracked: list[int] | None = None
        # held by several vertices (see share): read-only, every change raises
        self.shared = False

    @classmethod
    def holding(cls, base_time: int, duration: int, total: int, resource_type: str,
                start: int, span_duration: int, request: int) -> Planner:
        """A new planner with one span planned (span id 1): what ``Planner(...)`` then
        ``add_span(...)`` give, in one call. The update walk makes two of these for most
        vertices a job takes (its schedule and x_checker), 140 for a whole node."""
        last = start + span_duration
        end = base_time + duration
        if (duration < 1 or not 0 <= total <= INT64_MAX or span_duration < 1
                or start < base_time or last - 1 > end or not 0 <= request <= total):
            p = cls(base_time, duration, total, resource_type)  # raises what is wrong
            p.add_span(start, span_duration, request)
            return p
        p = cls.__new__(cls)
        p._base = base_time
        p._end = _shared_end(end)
        p._total = total
        p._type = resource_type
        if start == base_time:
            p._at, p._rem, p._ref = [base_time, last], [total - request, total], [2, 1]
        else:
            p._at, p._rem, p._ref = [base_time, start, last], [total, total - request, total], \
                [1, 1, 1]
        p._spans = {1: (start, last, request)}
        p._counter = 1
        p._planned = request
        p._iter = p._key = p._tracked = None
        p.shared = False
        return p

    def share(self) -> Planner:
        """Mark this planner read-only and return it, so that several vertices can hold
        it: the update walk gives the fresh vertices a job takes whole one planner per
        (needs, size, type) instead of one each (64 cores of a node: 2 planners, not
        128; see job_spans.JobSpans).
        Every change raises (PlannerError EPERM); a holder that must change its own
        takes a :meth:`copy` first, and one that drops the job whose span it holds
        drops the planner (it holds that one span, nothing else)."""
        self.shared = True
        return self

    def owned(self) -> Planner:
        """This planner, or a private copy of it when it is shared (to change it)."""
        return self.copy() if self.shared else self

    def without_span(self, span_id: int) -> Planner | None:
        """What a holder keeps once span ``span_id`` goes: this planner less the span, or
        None for a shared one (it held that span alone, see share)."""
        if self.shared:
            return None
        self.rem_span(span_id)
        return self

    def _read_only(self) -> None:
        raise PlannerError(_errno.EPERM, "a shared planner cannot change; copy it first")

    # ---------------------------------------------------------------- getters

    @property
    def base_time(self) -> int:
        return self._base

    @property
    def duration(self) -> int:
        return self._end - self._base

    @property
    def plan_end(self) -> int:
        return self._end

    @property
    def total(self) -> int:
        return self._total

    @property
    def resource_type(self) -> str:
        return self._type

    @property
    def span_count(self) -> int:
        return len(self._spans) if self._spans else 0

    def __repr__(self) -> str:
        return (f"Planner(base_time={self._base}, duration={self.duration}, "
                f"total={self._total}, resource_type={self._type!r}, spans={self.span_count})")

    def spans(self) -> list[int]:
        """Span ids in increasing order (Fluxion's span_first/span_next)."""
        return sorted(self._spans) if self._spans else []

    def span(self, span_id: int) -> Span:
        start, last, planned = self._get_span(span_id)
        return Span(start, last - start, planned)

    def has_span(self, span_id: int) -> bool:
        return bool(self._spans) and span_id in self._spans

    def points(self) -> list[tuple[int, int]]:
        """The scheduled points as (time, remaining), for tests and debugging."""
        if self._at is None:
            return [(self._base, self._total)]
        return list(zip(self._at, self._rem, strict=True))

    # ---------------------------------------------------------------- queries

    def avail_lower_bound(self) -> int:
        """Units free at every time of the horizon, in O(1): the total minus the units of
        every span counted at once. Exact when no spans overlap in time differently; a
        matcher checks it first and asks :meth:`avail_during` only when it is too low."""
        free = self._total - self._planned
        return free if free > 0 else 0

    def avail_resources_at(self, at: int) -> int:
        """Units free at time ``at``."""
        if at < self._base or at > self._end:
            raise PlannerError(_errno.ERANGE, f"time {at} is outside the planner horizon "
                                              f"[{self._base}, {self._end}]")
        if self._at is None:
            return self._total
        return self._rem[bisect_right(self._at, at) - 1]

    def avail_resources_during(self, at: int, duration: int) -> int:
        """The fewest units free at any time of ``[at, at + duration)``."""
        self._check_window(at, duration)
        if self._at is None:
            return self._total
        at_list, rem = self._at, self._rem
        i = bisect_right(at_list, at) - 1
        end = at + duration
        lowest = rem[i]
        n = len(at_list)
        i += 1
        while i < n and at_list[i] < end:
            if rem[i] < lowest:
                lowest = rem[i]
            i += 1
        return lowest

    def avail_during(self, at: int, duration: int, request: int) -> bool:
        """Whether ``request`` units are free during all of ``[at, at + duration)``."""
        self._check_request(request)
        self._check_window(at, duration)
        if self._at is None:
            return request <= self._total
        return self._free_during(bisect_right(self._at, at) - 1, at + duration, request)

    def avail_time_first(self, on_or_after: int, duration: int, request: int) -> int | None:
        """The earliest scheduled point ``t >= on_or_after`` with ``request`` units free
        during ``[t, t + duration)`` inside the horizon, or None. Starts an iteration that
        :meth:`avail_time_next` continues."""
        if self.shared:
            self._read_only()
        if on_or_after < self._base or on_or_after >= self._end or duration < 1:
            raise PlannerError(
                _errno.EINVAL,
                f"on_or_after {on_or_after} must be within [{self._base}, {self._end}) and "
                f"duration {duration} >= 1")
        self._check_request(request)
        self._restore()
        start = 0 if self._at is None else bisect_left(self._at, on_or_after)
        self._iter = (on_or_after, duration, request, start)
        if self._key is not None:  # points before on_or_after that the tree search visits
            self._tracked = [t for t, k in zip(self._at[:start], self._key, strict=False)
                             if k >= request]
        return self._next_fit()

    def avail_time_next(self) -> int | None:
        """The next candidate after the last :meth:`avail_time_first`/``next`` answer."""
        if self._iter is None:
            raise PlannerError(_errno.EINVAL, "avail_time_next without avail_time_first "
                                              "(or the planner changed since)")
        return self._next_fit()

    def unavail_time_first(self, on_or_after: int, request: int) -> int | None:
        """The first scheduled point, from the state at ``on_or_after``, where fewer than
        ``request`` units are free (Fluxion's planner_unavail_time_first), or None."""
        if on_or_after < self._base or on_or_after >= self._end:
            raise PlannerError(_errno.EINVAL, f"on_or_after {on_or_after} is outside "
                                              f"[{self._base}, {self._end})")
        self._check_request(request)
        self._restore()
        if self._at is None:
            return self._base if request > self._total else None
        rem = self._rem
        for i in range(bisect_right(self._at, on_or_after) - 1, len(rem)):
            if request > rem[i]:
                return self._at[i]
        return None

    # ---------------------------------------------------------------- updates

    def add_span(self, start: int, duration: int, request: int) -> int:
        """Plan ``request`` units during ``[start, start + duration)``; returns the span id
        (1, 2, ... like Fluxion's)."""
        if self.shared:
            self._read_only()
        if duration < 1 or start < self._base or start + duration - 1 > self._end:
            raise PlannerError(
                _errno.EINVAL,
                f"span [{start}, {start + duration}) is outside the planner horizon "
                f"[{self._base}, {self._end})")
        self._check_request(request)
        last = start + duration
        if self._at is None:
            # the first span of an untouched planner (most vertices' only one): nothing
            # else is planned, so the points are known without searching
            base, total = self._base, self._total
            if start == base:
                self._at, self._rem, self._ref = [base, last], [total - request, total], [2, 1]
            else:
                self._at, self._rem, self._ref = (
                    [base, start, last],
                    [total, total - request, total],
                    [1, 1, 1],
                )
            self._counter += 1
            self._planned += request
            self._spans = {self._counter: (start, last, request)}
            self._iter = self._tracked = None
            return self._counter
        at_list, rem, ref = self._at, self._rem, self._ref
        if not self._free_during(bisect_right(at_list, start) - 1, last, request):
            raise PlannerError(_errno.EBUSY, f"{request} {self._type} not free during "
                                             f"[{start}, {last})")
        self._restore()
        i = self._point(start)
        ref[i] += 1
        j = self._point(last)
        ref[j] += 1
        for k in range(i, j):
            rem[k] -= request
        self._refresh_keys(i, j)
        self._counter += 1
        self._planned += request
        self._spans[self._counter] = (start, last, request)
        self._iter = None
        return self._counter

    def rem_span(self, span_id: int) -> None:
        """Remove a span, freeing its units."""
        if self.shared:
            self._read_only()
        start, last, planned = self._get_span(span_id)
        del self._spans[span_id]
        self._planned -= planned
        self._restore()
        at_list, rem, ref = self._at, self._rem, self._ref
        i = bisect_left(at_list, start)
        j = bisect_left(at_list, last, i)
        for k in range(i, j):
            rem[k] += planned
        self._refresh_keys(i, j)
        ref[i] -= 1
        ref[j] -= 1
        for k in (j, i):  # later index first so the earlier one stays valid
            if ref[k] == 0:
                del at_list[k], rem[k], ref[k]
                if self._key is not None:
                    del self._key[k]
        self._iter = None
        if (not self._spans and len(at_list) == 1 and rem[0] == self._total
                and self._key is None):
            self._at = self._rem = self._ref = None

    def reduce_span(self, span_id: int, amount: int) -> bool:
        """Give back ``amount`` units of a span (a partial cancel); the span goes away when
        its planned amount is reached. Returns True when the span was removed."""
        if self.shared:
            self._read_only()
        start, last, planned = self._get_span(span_id)
        if amount == planned:
            self.rem_span(span_id)
            return True
        if amount == 0:
            return False
        if amount < 0 or amount > planned:
            raise PlannerError(_errno.EINVAL, f"cannot reduce span {span_id} of {planned} "
                                              f"{self._type} by {amount}")
        self._spans[span_id] = (start, last, planned - amount)
        self._planned -= amount
        self._restore()
        at_list, rem = self._at, self._rem
        i = bisect_left(at_list, start)
        j = bisect_left(at_list, last, i)
        for k in range(i, j):
            rem[k] += amount
        self._refresh_keys(i, j)
        self._iter = None
        return False

    def update_total(self, total: int) -> None:
        """Change the total; every point's free count moves by the difference (not below 0)."""
        if self.shared:
            self._read_only()
        if not 0 <= total <= INT64_MAX:
            raise PlannerError(_errno.ERANGE, f"total must be within 0..INT64_MAX, not {total}")
        delta = total - self._total
        if not delta:
            return
        if self._at is None:  # the base point now holds a count the tree does not know
            self._at, self._rem, self._ref = [self._base], [self._total], [1]
            if self._spans is None:
                self._spans = {}
        self._total = total
        if self._key is None:
            if self._iter is not None and self._tracked is None:
                # the points the running iteration visited are out of the tree: they come
                # back with fresh counts at the next restore
                _, _, request, cursor = self._iter
                self._tracked = [t for t, r in zip(self._at[:cursor], self._rem, strict=False)
                                 if r >= request]
            self._key = list(self._rem)
        self._rem[:] = [r + delta if r + delta >= 0 else 0 for r in self._rem]
        if self._key == self._rem:
            self._key = None

    def reset(self, base_time: int, duration: int) -> None:
        """Forget every span and restart the horizon (span ids restart at 1)."""
        if self.shared:
            self._read_only()
        if duration < 1:
            raise PlannerError(_errno.EINVAL, f"duration must be >= 1, not {duration}")
        self._base, self._end = base_time, _shared_end(base_time + duration)
        self._at = self._rem = self._ref = None
        self._spans = None
        self._counter = 0
        self._planned = 0
        self._iter = None
        self._key = self._tracked = None

    def copy(self) -> Planner:
        new = Planner.__new__(Planner)
        new._base, new._end, new._total, new._type = self._base, self._end, self._total, self._type
        new._at = None if self._at is None else list(self._at)
        new._rem = None if self._rem is None else list(self._rem)
        new._ref = None if self._ref is None else list(self._ref)
        new._spans = None if self._spans is None else dict(self._spans)
        new._counter, new._iter, new._planned = self._counter, self._iter, self._planned
        new._key = None if self._key is None else list(self._key)
        new._tracked = None if self._tracked is None else list(self._tracked)
        new.shared = False
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Planner):
            return NotImplemented
        return (self._base, self._end, self._total, self._type, self.points(), self._key,
                self._spans or {}, self._counter) == (
                other._base, other._end, other._total, other._type, other.points(), other._key,
                other._spans or {}, other._counter)

    __hash__ = None  # mutable

    # ---------------------------------------------------------------- internals

    def _check_request(self, request: int) -> None:
        if request < 0 or request > self._total:
            raise PlannerError(_errno.ERANGE, f"request {request} is outside 0..{self._total} "
                                              f"{self._type}")

    def _check_window(self, at: int, duration: int) -> None:
        if duration < 1:
            raise PlannerError(_errno.EINVAL, f"duration must be >= 1, not {duration}")
        if at < self._base or at + duration > self._end:
            raise PlannerError(_errno.ERANGE, f"[{at}, {at + duration}) is outside the planner "
                                              f"horizon [{self._base}, {self._end})")

    def _get_span(self, span_id: int) -> tuple[int, int, int]:
        try:
            return self._spans[span_id]  # type: ignore[index]
        except (KeyError, TypeError):
            raise PlannerError(_errno.ENOENT, f"no span {span_id}") from None

    def _free_during(self, i: int, end: int, request: int) -> bool:
        """Whether the points from index ``i`` (the state at the window start) up to
        ``end`` all have ``request`` units free."""
        at_list, rem = self._at, self._rem
        n = len(at_list)
        while i < n and at_list[i] < end:
            if rem[i] < request:
                return False
            i += 1
        return True

    def _point(self, t: int) -> int:
        """Index of the point at ``t``, inserting one with the state at ``t`` if needed."""
        at_list = self._at
        i = bisect_left(at_list, t)
        if i < len(at_list) and at_list[i] == t:
            return i
        at_list.insert(i, t)
        self._rem.insert(i, self._rem[i - 1])
        self._ref.insert(i, 0)
        if self._key is not None:
            self._key.insert(i, self._rem[i])
        return i

    def _refresh_keys(self, i: int, j: int) -> None:
        """Points i..j-1 changed and were re-inserted into Fluxion's tree: fresh keys."""
        key = self._key
        if key is not None:
            key[i:j] = self._rem[i:j]
            if key == self._rem:
                self._key = None

    def _restore(self) -> None:
        """Fluxion's restore_track_points: re-insert the points an iteration took out."""
        tracked, self._tracked = self._tracked, None
        key = self._key
        if not tracked or key is None:
            return
        at_list, rem = self._at, self._rem
        n = len(at_list)
        for t in tracked:
            i = bisect_left(at_list, t)
            if i < n and at_list[i] == t:
                key[i] = rem[i]
        if key == rem:
            self._key = None

    def _next_fit(self) -> int | None:
        on_or_after, duration, request, i = self._iter  # type: ignore[misc]
        if self._at is None:  # only the base point, all free
            self._iter = (on_or_after, duration, request, 1)
            if i == 0 and on_or_after == self._base and self._base + duration <= self._end:
                return self._base
            return None
        at_list, rem = self._at, self._rem
        n = len(at_list)
        if self._key is not None:
            return self._next_fit_stale(on_or_after, duration, request, i)
        while i < n:
            if rem[i] < request:
                i += 1
                continue
            t = at_list[i]
            end = t + duration
            j = i + 1
            while j < n and at_list[j] < end and rem[j] >= request:
                j += 1
            if j < n and at_list[j] < end:
                # point j is busy and lies in the window of every candidate i..j: skip them
                i = j + 1
                continue
            self._iter = (on_or_after, duration, request, i + 1)
            return t if end <= self._end else None
        self._iter = (on_or_after, duration, request, n)
        return None

    def _next_fit_stale(self, on_or_after: int, duration: int, request: int,
                        i: int) -> int | None:
        """_next_fit while some tree keys are stale: candidates are chosen by key, checked
        by the real counts, and every candidate visited leaves the tree (is tracked)."""
        at_list, rem, key = self._at, self._rem, self._key
        if self._tracked is None:
            self._tracked = []
        tracked = self._tracked
        n = len(at_list)
        while i < n:
            if key[i] < request:
                i += 1
                continue
            tracked.append(at_list[i])
            t = at_list[i]
            end = t + duration
            j = i
            while j < n and at_list[j] < end and rem[j] >= request:
                j += 1
            if j < n and at_list[j] < end:
                i += 1
                continue
            self._iter = (on_or_after, duration, request, i + 1)
            return t if end <= self._end else None
        self._iter = (on_or_after, duration, request, n)
        return None
