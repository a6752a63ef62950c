"""Planner behaviour: flux-sched's planner test scenarios, errors, and a brute-force model."""

from __future__ import annotations

import errno
import random

import pytest
from fluxnode.scheduler.planner.planner import INT64_MAX, Planner, PlannerError, Span


def iterate(p: Planner, on_or_after: int, duration: int, request: int) -> list[int | None]:
    """avail_time_first then avail_time_next until None."""
    out = [p.avail_time_first(on_or_after, duration, request)]
    while out[-1] is not None:
        out.append(p.avail_time_next())
    return out


def test_getters() -> None:
    p = Planner(0, 9999, 10, "1")
    assert (p.base_time, p.duration, p.total, p.resource_type) == (0, 9999, 10, "1")
    assert (p.plan_end, p.span_count, p.spans()) == (9999, 0, [])


def test_one_unit_filled_and_freed() -> None:
    # one unit over [0, 10): spans are placed back to back at the first fitting point
    p = Planner(0, 10, 1, "B")
    steps = [(5, 0), (2, 5), (2, 7)]
    ids = []
    for duration, expected in steps:
        t = p.avail_time_first(0, duration, 1)
        assert t == expected
        ids.append(p.add_span(t, duration, 1))
    assert p.avail_time_first(0, 2, 1) is None  # [9, 11) would leave the horizon
    assert p.avail_time_first(0, 1, 1) == 9
    p.add_span(9, 1, 1)
    assert p.span(ids[1]) == Span(5, 2, 1)
    p.rem_span(ids[1])
    p.rem_span(ids[2])
    assert p.avail_time_first(0, 5, 1) is None  # only 4 free units of time at 5..9
    assert p.avail_time_first(0, 4, 1) == 5
    p.add_span(5, 4, 1)
    assert ids == [1, 2, 3]


@pytest.fixture
def three_spans() -> Planner:
    # 10 units; 5 during [1, 1001), 10 during [2000, 3001), 1 during [10, 2000)
    p = Planner(0, INT64_MAX, 10, "A")
    assert p.avail_during(0, 1, 10)
    assert p.avail_during(1, 1000, 5)
    p.add_span(1, 1000, 5)
    p.add_span(2000, 1001, 10)
    assert not p.avail_during(10, 2991, 1)
    assert p.avail_during(10, 1990, 1)
    p.add_span(10, 1990, 1)
    return p


@pytest.mark.parametrize(("at", "free"), [
    (1, 5), (10, 4), (1500, 9), (2000, 0), (2500, 0), (3000, 0), (3001, 10),
])
def test_free_at(three_spans: Planner, at: int, free: int) -> None:
    assert three_spans.avail_resources_at(at) == free


@pytest.mark.parametrize(("at", "duration", "count", "ok", "least"), [
    (2000, 1001, 1, False, 0),
    (0, 1001, 4, True, 4),
    (10, 1990, 4, True, 4),
    (4, 3, 5, True, 5),  # inside one span, no edges
    (20, 980, 4, True, 4),
    (1001, 998, 9, True, 9),
    (2500, 101, 1, False, 0),
    (0, 1000, 4, True, 4),  # one edge
    (10, 990, 4, True, 4),
    (20, 981, 4, True, 4),
    (1001, 999, 9, True, 9),
    (100, 1401, 4, True, 4),  # several overlapping spans
    (1500, 1001, 1, False, 0),
    (1000, 1001, 1, False, 0),
    (0, 3001, 1, False, 0),  # all spans
    (0, 2001, 1, False, 0),
    (3001, 2000, 10, True, 10),
])
def test_free_during(three_spans: Planner, at, duration, count, ok, least) -> None:
    assert three_spans.avail_during(at, duration, count) is ok
    assert three_spans.avail_resources_during(at, duration) == least


def test_avail_time_iteration(three_spans: Planner) -> None:
    assert iterate(three_spans, 0, 9, 5) == [0, 1, 1001, 3001, None]
    assert iterate(three_spans, 0, 10, 9) == [1001, 3001, None]


def test_add_span_restarts_iteration() -> None:
    p = Planner(0, 10, 10, "C")
    assert iterate(p, 0, 4, 3) == [0, None]
    p.add_span(0, 4, 3)
    assert p.avail_time_first(0, 4, 3) == 0
    assert p.avail_time_next() == 4
    p.add_span(4, 1, 1)
    with pytest.raises(PlannerError) as info:
        p.avail_time_next()
    assert info.value.errno == errno.EINVAL


def test_on_or_after_only_considers_scheduled_points() -> None:
    p = Planner(0, INT64_MAX, 3, "A")
    # an empty planner has a single point, at its base time
    assert p.avail_time_first(100000, 100, 2) is None
    assert p.avail_during(100000, 100, 2)
    p.add_span(100000, 100, 2)
    assert p.avail_time_first(100000, 200, 2) == 100100
    p.add_span(100100, 200, 2)
    assert iterate(p, 100000, 200, 1)[:3] == [100000, 100100, 100300]
    assert iterate(p, 0, 200, 1)[:2] == [0, 100000]


def test_many_spans_and_removal() -> None:
    p = Planner(0, INT64_MAX, 10, "core")
    ids = [p.add_span(i // 2 * 1000, 1000, 5) for i in range(2000)]
    assert p.span_count == 2000 and len(p.points()) == 1001
    for sid in ids[::4]:
        p.rem_span(sid)
    assert p.avail_resources_at(0) == 5 and p.avail_resources_at(1000) == 0
    for sid in ids:
        if p.has_span(sid):
            p.rem_span(sid)
    assert p.points() == [(0, 10)] and p.span_count == 0


def test_fully_overlapping_spans() -> None:
    p = Planner(0, INT64_MAX, 10_000_000, "hardware-thread")
    for _ in range(2000):
        t = p.avail_time_first(0, 4, 100)
        assert t == 0
        p.add_span(t, 4, 100)
    assert p.avail_resources_at(0) == 10_000_000 - 200_000
    assert len(p.points()) == 2


def test_sliding_overlap() -> None:
    p = Planner(0, INT64_MAX, 10_000_000, "hardware-thread")
    for i in range(3000):
        assert p.avail_during(i, 4, 100)
        p.add_span(i, 4, 100)
    assert p.avail_resources_at(1500) == 10_000_000 - 400


def test_local_and_global_reservations() -> None:
    # flux-sched's "resource service flow": leaf planners and an aggregate one per type
    totals = {"A": 16, "B": 2, "C": 32}
    types = list(totals)
    locals_ = [Planner(0, INT64_MAX, totals[types[i % 3]], types[i % 3]) for i in range(9)]
    globals_ = {t: Planner(0, INT64_MAX, 3 * n, t) for t, n in totals.items()}
    at, duration = 3600, 1000
    for i, local in enumerate(locals_):
        rtype = types[i % 3]
        local.add_span(at, duration, totals[rtype])
        globals_[rtype].add_span(at, duration, totals[rtype])
    at += 1000
    for i in range(600):
        rtype, local = types[i % 3], locals_[i % 9]
        t = globals_[rtype].avail_time_first(at, duration, totals[rtype])
        assert t == at + (i // 9) * duration
        assert local.avail_during(t, duration, totals[rtype])
        local.add_span(t, duration, totals[rtype])
        globals_[rtype].add_span(t, duration, totals[rtype])


def test_add_remove_add_and_copies() -> None:
    spans = [(0, 600, 36), (0, 57600, 3600), (57600, 57600, 1800), (115200, 57600, 1152),
             (172800, 57600, 2304), (115200, 900, 468)]
    p = Planner(0, INT64_MAX, 100000, "core")
    ids = [p.add_span(*s) for s in spans]
    for sid in ids:
        p.rem_span(sid)
    assert p.points() == [(0, 100000)] and p.span_count == 0
    assert p != Planner(0, INT64_MAX, 100000, "core")  # the span counter moved on
    ids = [p.add_span(*s) for s in spans]
    assert ids == [7, 8, 9, 10, 11, 12]
    q = p.copy()
    assert q == p
    q.rem_span(ids[3])
    assert q != p
    assert p.avail_resources_at(115200) == 100000 - 1152 - 468
    r = q.copy()
    r.reset(0, INT64_MAX)
    assert r != q and r.span_count == 0 and r.add_span(0, 1, 1) == 1


def test_reduce_span() -> None:
    p = Planner(0, 100, 10, "core")
    sid = p.add_span(10, 10, 8)
    assert p.reduce_span(sid, 0) is False
    assert p.reduce_span(sid, 3) is False
    assert p.span(sid).planned == 5 and p.avail_resources_at(15) == 5
    with pytest.raises(PlannerError) as info:
        p.reduce_span(sid, 6)
    assert info.value.errno == errno.EINVAL
    assert p.reduce_span(sid, 5) is True
    assert not p.has_span(sid) and p.points() == [(0, 10)]
    zero = p.add_span(0, 5, 0)
    assert p.reduce_span(zero, 0) is True  # a 0-unit span goes away when reduced by 0


def test_update_total() -> None:
    p = Planner(0, 100, 10, "core")
    p.update_total(12)
    assert p.avail_resources_at(0) == 12
    sid = p.add_span(10, 10, 8)
    p.update_total(6)  # shrinks below what is planned: free counts clamp at 0
    assert [p.avail_resources_at(t) for t in (0, 10, 20)] == [6, 0, 6]
    keep = p.add_span(10, 5, 0)  # keeps the point at 10 alive
    p.rem_span(sid)
    # Fluxion adds back what it could not take: points after the clamp exceed the total
    assert p.points() == [(0, 6), (10, 8), (15, 8)]
    p.rem_span(keep)
    assert p.points() == [(0, 6)]


def test_unavail_time_first() -> None:
    p = Planner(0, 100, 10, "core")
    assert p.unavail_time_first(0, 5) is None
    p.add_span(10, 10, 8)
    assert p.unavail_time_first(0, 5) == 10
    assert p.unavail_time_first(20, 5) is None


@pytest.mark.parametrize(("call", "err"), [
    (lambda p: p.avail_resources_at(101), errno.ERANGE),
    (lambda p: p.avail_resources_at(-1), errno.ERANGE),
    (lambda p: p.avail_resources_during(95, 10), errno.ERANGE),
    (lambda p: p.avail_resources_during(0, 0), errno.EINVAL),
    (lambda p: p.avail_during(95, 10, 5), errno.ERANGE),
    (lambda p: p.avail_during(0, 10, 11), errno.ERANGE),
    (lambda p: p.avail_during(0, 10, -1), errno.ERANGE),
    (lambda p: p.avail_time_first(100, 1, 1), errno.EINVAL),
    (lambda p: p.avail_time_first(-1, 1, 1), errno.EINVAL),
    (lambda p: p.avail_time_first(0, 0, 1), errno.EINVAL),
    (lambda p: p.avail_time_first(0, 1, 11), errno.ERANGE),
    (lambda p: p.avail_time_next(), errno.EINVAL),
    (lambda p: p.add_span(-1, 10, 1), errno.EINVAL),
    (lambda p: p.add_span(0, 0, 1), errno.EINVAL),
    (lambda p: p.add_span(95, 7, 1), errno.EINVAL),
    (lambda p: p.add_span(0, 10, 11), errno.ERANGE),
    (lambda p: p.add_span(0, 10, -1), errno.ERANGE),
    (lambda p: p.add_span(10, 10, 3), errno.EBUSY),
    (lambda p: p.rem_span(999), errno.ENOENT),
    (lambda p: p.reduce_span(999, 1), errno.ENOENT),
    (lambda p: p.reduce_span(1, -1), errno.EINVAL),
    (lambda p: p.span(999), errno.ENOENT),
    (lambda p: p.update_total(-1), errno.ERANGE),
    (lambda p: p.reset(0, 0), errno.EINVAL),
    (lambda p: Planner(0, 0, 1, "x"), errno.EINVAL),
    (lambda p: Planner(0, 1, -1, "x"), errno.ERANGE),
    (lambda p: Planner(0, 1, INT64_MAX + 1, "x"), errno.ERANGE),
])
def test_errors(call, err) -> None:
    p = Planner(0, 100, 10, "core")
    p.add_span(10, 10, 8)
    with pytest.raises(PlannerError) as info:
        call(p)
    assert info.value.errno == err
    assert str(info.value).endswith(f"({errno.errorcode[err]})")


def test_span_may_end_one_past_the_horizon() -> None:
    # Fluxion's check is start + duration - 1 <= plan_end
    p = Planner(0, 100, 10, "core")
    sid = p.add_span(95, 6, 1)
    assert p.span(sid) == Span(95, 6, 1)


def test_empty_planner_stays_listless() -> None:
    p = Planner(0, 100, 10, "core")
    sid = p.add_span(0, 10, 1)
    p.rem_span(sid)
    assert p._at is None and p.points() == [(0, 10)]


class Model:
    """Brute force: free(t) = total - sum of the spans covering t."""

    def __init__(self, base: int, duration: int, total: int) -> None:
        self.base, self.end, self.total = base, base + duration, total
        self.spans: dict[int, list[int]] = {}

    def free(self, t: int) -> int:
        return self.total - sum(n for s, e, n in self.spans.values() if s <= t < e)

    def points(self) -> list[int]:
        pts = {self.base}
        for s, e, _ in self.spans.values():
            pts.update((s, e))
        return sorted(pts)

    def min_free(self, at: int, duration: int) -> int:
        times = [at] + [t for t in self.points() if at < t < at + duration]
        return min(self.free(t) for t in times)

    def candidates(self, on_or_after: int, duration: int, request: int) -> list[int]:
        return [t for t in self.points()
                if t >= on_or_after and t + duration <= self.end
                and self.min_free(t, duration) >= request]


def test_random_against_brute_force() -> None:
    rng = random.Random(20261122)
    for _round in range(150):
        total = rng.randint(1, 12)
        horizon = rng.choice([50, 200, 1000])
        p, m = Planner(0, horizon, total, "core"), Model(0, horizon, total)
        for _op in range(120):
            op = rng.random()
            if op < 0.45:
                start = rng.randrange(0, horizon)
                duration = rng.randint(1, horizon // 4)
                request = rng.randint(0, total)
                fits = (start + duration <= horizon + 1
                        and m.min_free(start, duration) >= request)
                if fits:
                    sid = p.add_span(start, duration, request)
                    m.spans[sid] = [start, start + duration, request]
                else:
                    with pytest.raises(PlannerError):
                        p.add_span(start, duration, request)
            elif op < 0.6 and m.spans:
                sid = rng.choice(list(m.spans))
                p.rem_span(sid)
                del m.spans[sid]
            elif op < 0.7 and m.spans:
                sid = rng.choice(list(m.spans))
                planned = m.spans[sid][2]
                amount = rng.randint(0, planned)
                removed = p.reduce_span(sid, amount)
                assert removed is (amount == planned)
                if removed:
                    del m.spans[sid]
                else:
                    m.spans[sid][2] -= amount
            else:
                at = rng.randrange(0, horizon)
                duration = rng.randint(1, horizon - at)
                request = rng.randint(0, total)
                assert p.avail_resources_at(at) == m.free(at)
                assert p.avail_resources_during(at, duration) == m.min_free(at, duration)
                assert p.avail_during(at, duration, request) is (
                    m.min_free(at, duration) >= request)
                got = iterate(p, at, duration, request)
                assert got == [*m.candidates(at, duration, request), None]
            assert p.span_count == len(m.spans)
            assert [t for t, _ in p.points()] == m.points()
            assert all(r == m.free(t) for t, r in p.points())


def test_update_total_leaves_fluxion_search_keys_stale() -> None:
    # Fluxion's min-time tree keeps each point's old free count until the point is touched;
    # update_total does not touch it, so the candidate search still sees 36 at time 0
    p = Planner(0, INT64_MAX, 36, "core")
    p.update_total(72)
    assert p.avail_resources_at(0) == 72 and p.avail_during(0, 10, 40)
    assert p.avail_time_first(0, 10, 40) is None
    p.add_span(100, 10, 1)  # points 100 and 110 enter the tree with current counts
    assert iterate(p, 0, 10, 40) == [100, 110, None]
    # the iteration took 100 and 110 out; restored with fresh counts, base still stale
    assert p.avail_time_first(0, 10, 36) == 0
    # once the base point is visited it comes back fresh at the next restore
    assert p.avail_time_first(0, 10, 40) == 0


def test_update_total_during_an_iteration() -> None:
    p = Planner(0, 1000, 10, "core")
    p.add_span(100, 10, 5)
    assert p.avail_time_first(0, 10, 5) == 0  # visits (takes out) the base point
    p.update_total(20)  # the base point is out of the tree: it comes back fresh
    assert p.avail_time_next() == 100
    # the restore re-inserts 0 and 100 with fresh counts (20, 15); 110 keeps its old 10
    assert iterate(p, 0, 10, 12) == [0, 100, None]
    assert p.avail_resources_during(110, 10) == 20


def test_random_update_total_keeps_counts_right() -> None:
    rng = random.Random(99)
    for _round in range(40):
        total = rng.randint(1, 10)
        p, m = Planner(0, 300, total, "core"), Model(0, 300, total)
        for _op in range(80):
            op = rng.random()
            if op < 0.4:
                start, duration = rng.randrange(0, 300), rng.randint(1, 60)
                request = rng.randint(0, m.total)
                if start + duration <= 301 and m.min_free(start, duration) >= request:
                    m.spans[p.add_span(start, duration, request)] = [start, start + duration,
                                                                     request]
            elif op < 0.55 and m.spans:
                sid = rng.choice(list(m.spans))
                p.rem_span(sid)
                del m.spans[sid]
            elif op < 0.65:
                # only grow (or shrink while nothing is planned): no clamping, so the
                # brute-force model still holds
                new = m.total + rng.randint(0, 5) if m.spans else rng.randint(1, 15)
                p.update_total(new)
                m.total = new
            else:
                at = rng.randrange(0, 300)
                duration = rng.randint(1, 300 - at)
                request = rng.randint(0, m.total)
                assert p.avail_resources_during(at, duration) == m.min_free(at, duration)
                got = iterate(p, at, duration, request)
                true = m.candidates(at, duration, request)
                assert got[-1] is None and set(got[:-1]) <= set(true)
                assert got[:-1] == sorted(got[:-1])
            assert all(r == m.free(t) for t, r in p.points())


def test_avail_lower_bound_counts_every_span_at_once() -> None:
    p = Planner(0, 1000, 10, "core")
    assert p.avail_lower_bound() == 10
    a = p.add_span(0, 100, 4)
    b = p.add_span(200, 100, 5)  # never overlaps a: the bound (1) is below the true minimum (5)
    assert p.avail_lower_bound() == 1
    assert p.avail_resources_during(0, 1000) == 5
    p.reduce_span(b, 2)
    assert p.avail_lower_bound() == 3
    p.rem_span(a)
    assert p.avail_lower_bound() == 7
    assert p.copy().avail_lower_bound() == 7
    p.update_total(2)  # fewer units than planned: never below 0
    assert p.avail_lower_bound() == 0
    p.reset(0, 1000)
    assert p.avail_lower_bound() == 2


@pytest.mark.parametrize(
    ("start", "duration", "units"),
    [(0, 10, 3), (5, 10, 4), (0, INT64_MAX - 1, 1), (7, 1, 0), (0, 1, 4)],
)
def test_holding_is_a_new_planner_with_one_span(start, duration, units) -> None:
    """Planner.holding (the update walk's one call) is Planner() then add_span()."""
    made = Planner(0, INT64_MAX, 4, "core")
    sid = made.add_span(start, duration, units)
    held = Planner.holding(0, INT64_MAX, 4, "core", start, duration, units)
    assert sid == 1 and held == made
    assert held.span(1) == made.span(1)
    assert held.avail_resources_during(start, duration) == 4 - units
    held.rem_span(1)
    made.rem_span(1)
    assert held == made and held.points() == [(0, 4)]


@pytest.mark.parametrize(
    ("start", "duration", "units", "errnum"),
    [(0, 10, 5, errno.ERANGE), (-1, 10, 1, errno.EINVAL), (0, 0, 1, errno.EINVAL),
     (0, 10, -1, errno.ERANGE)],
)
def test_holding_refuses_what_add_span_refuses(start, duration, units, errnum) -> None:
    with pytest.raises(PlannerError) as exc:
        Planner.holding(0, INT64_MAX, 4, "core", start, duration, units)
    assert exc.value.errno == errnum


def test_a_shared_planner_refuses_every_change_and_its_copy_is_free() -> None:
    """Leaves of a subtree a job takes whole hold one planner together (Planner.share):
    any change through one holder would change them all, so every mutator raises, and
    a holder that must change takes a copy, which changes alone."""
    p = Planner.holding(0, 100, 4, "core", 0, 10, 4).share()
    changes = [
        lambda: p.add_span(20, 5, 1),
        lambda: p.rem_span(1),
        lambda: p.reduce_span(1, 1),
        lambda: p.update_total(8),
        lambda: p.reset(0, 50),
        lambda: p.avail_time_first(0, 5, 1),
    ]
    for change in changes:
        with pytest.raises(PlannerError) as info:
            change()
        assert info.value.errno == errno.EPERM
    assert p.points() == [(0, 0), (10, 4)] and p.span_count == 1  # untouched
    own = p.copy()
    assert not own.shared and own == p
    assert own.add_span(20, 5, 1) == 2
    own.rem_span(1)
    assert own.points() == [(0, 4), (20, 3), (25, 4)]
    assert p.points() == [(0, 0), (10, 4)] and p.span_count == 1
