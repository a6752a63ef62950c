"""PlannerMulti: flux-sched's planner_multi test scenarios in table form, plus errors."""

from __future__ import annotations

import errno
import random

import pytest
from fluxnode.scheduler.planner.planner import INT64_MAX, PlannerError
from fluxnode.scheduler.planner.planner_multi import PlannerMulti

TYPES = ["A", "B", "C", "D", "E"]


def multi(*totals: int) -> PlannerMulti:
    return PlannerMulti(0, INT64_MAX, dict(zip(TYPES, totals, strict=False)))


def iterate(p: PlannerMulti, on_or_after: int, duration: int, request) -> list[int | None]:
    out = [p.avail_time_first(on_or_after, duration, request)]
    while out[-1] is not None:
        out.append(p.avail_time_next())
    return out


def test_getters() -> None:
    p = PlannerMulti(0, 9999, {"1": 10, "2": 20})
    assert (p.base_time, p.duration, p.resource_types) == (0, 9999, ["1", "2"])
    assert p.totals == {"1": 10, "2": 20} and p.resources_len == 2 and p.span_count == 0
    assert p.planner("2").total == 20


@pytest.fixture
def basics() -> PlannerMulti:
    p = multi(10, 20, 30, 20, 100)
    assert p.avail_during(0, 1, [10, 20, 30, 20, 100])
    assert p.avail_during(1, 1000, [5, 10, 15, 10, 50])
    assert p.add_span(1, 1000, [5, 10, 15, 10, 50]) == 0
    assert p.add_span(2000, 1001, [10, 20, 30, 20, 100]) == 1
    assert not p.avail_during(10, 2991, [1, 2, 3, 2, 10])
    assert p.avail_during(10, 1990, [1, 2, 3, 2, 10])
    assert p.add_span(10, 1990, {"A": 1, "B": 2, "C": 3, "D": 2, "E": 10}) == 2
    return p


@pytest.mark.parametrize(("at", "rtype", "free"), [
    (1, "A", 5), (10, "B", 8), (500, "C", 12), (1500, "A", 9), (2000, "A", 0),
    (2500, "A", 0), (3000, "E", 0), (3001, "C", 30),
])
def test_basics_free_at(basics: PlannerMulti, at: int, rtype: str, free: int) -> None:
    assert basics.avail_resources_at(at)[rtype] == free


@pytest.mark.parametrize(("duration", "request_", "times"), [
    (9, {"C": 15}, [0, 1, 1001, 3001]),
    (10, [1, 1, 1, 1, 50], [0, 1001, 3001]),
])
def test_basics_iteration(basics: PlannerMulti, duration, request_, times) -> None:
    assert iterate(basics, 0, duration, request_) == [*times, None]


def staircase(pattern: str) -> PlannerMulti:
    """Five types (10..50), type k losing k units during a span; 'strict': all spans
    start at 0 and last k*1000; 'partial': type k's span is [(k-1)*1000, k*1000)."""
    p = multi(10, 20, 30, 40, 50)
    for k in range(1, 6):
        request = [0] * 5
        request[k - 1] = k
        start, duration = (0, k * 1000) if pattern == "strict" else ((k - 1) * 1000, 1000)
        assert p.avail_during(start, duration, request)
        p.add_span(start, duration, request)
    return p


@pytest.mark.parametrize(("pattern", "on_or_after", "request_", "times"), [
    ("strict", 0, [10, 20, 30, 40, 45], [4000, 5000]),
    ("strict", 0, [0, 0, 0, 30, 40], [0, 1000, 2000, 3000, 4000, 5000]),
    ("strict", 3500, [0, 0, 0, 30, 40], [4000, 5000]),
    ("strict", 0, [10, 18, 30, 30, 30], [3000, 4000, 5000]),
    ("partial", 0, [10, 20, 30, 40, 50], [5000]),
    ("partial", 0, [9, 20, 27, 36, 50], [0, 2000, 3000, 5000]),
    ("partial", 0, [9, 19, 30, 40, 50], [0, 5000]),
])
def test_staircases(pattern, on_or_after, request_, times) -> None:
    p = staircase(pattern)
    assert iterate(p, on_or_after, 1000, request_) == [*times, None]


def test_many_spans() -> None:
    p = PlannerMulti(0, INT64_MAX, {"A": 99, "B": 99, "C": 99})
    for i in range(1000):
        request = [i % 100, 99 - i % 100, i % 100]
        assert p.avail_during(i * 1000, 1000, request)
        p.add_span(i * 1000, 1000, request)
    assert iterate(p, 0, 1000, [99, 99, 99]) == [1_000_000, None]
    assert iterate(p, 0, 1000, [98, 1, 98]) == [
        *(1000 * (100 * i + 1) for i in range(10)), 1_000_000, None]
    assert iterate(p, 0, 1000, [50, 49, 50]) == [
        *(1000 * (100 * i + 49) for i in range(10)), 1_000_000, None]


def test_add_remove_copy() -> None:
    p = multi(10, 20, 30, 40, 50)
    ids = [p.add_span(1000 * k, 1000, {TYPES[k]: k + 1}) for k in range(3)]
    assert ids == [0, 1, 2]
    q = p.copy()
    assert q == p
    p.rem_span(ids[1])
    assert p.span_count == 2 and q.span_count == 3 and p != q
    assert p.avail_resources_at(1500)["B"] == 20 and q.avail_resources_at(1500)["B"] == 18
    assert p.add_span(0, 10, [0] * 5) == 3


def test_add_span_is_all_or_nothing() -> None:
    p = multi(10, 20)
    p.add_span(0, 100, {"B": 20})
    with pytest.raises(PlannerError) as info:
        p.add_span(50, 10, {"A": 1, "B": 1})
    assert info.value.errno == errno.EBUSY
    assert p.planner("A").span_count == 1  # only the first span's 0-unit span
    assert p.span_count == 1


def test_reduce_span_partial_cancel() -> None:
    p = PlannerMulti(0, 1000, {"core": 10, "gpu": 4, "memory": 64})
    sid = p.add_span(0, 100, {"core": 6, "gpu": 2})
    assert p.span_planned(sid) == {"core": 6, "gpu": 2, "memory": 0}
    # releasing some cores also drops the 0-unit memory span
    assert p.reduce_span(sid, {"core": 2}) is False
    assert p.span_planned(sid) == {"core": 4, "gpu": 2, "memory": 0}
    assert p.avail_resources_at(50) == {"core": 6, "gpu": 2, "memory": 64}
    assert p.reduce_span(sid, {"core": 4, "gpu": 2}) is True
    assert not p.has_span(sid)
    assert p.avail_resources_at(50) == {"core": 10, "gpu": 4, "memory": 64}


def test_update_types_and_totals() -> None:
    p = PlannerMulti(0, 1000, {"core": 10, "memory": 20})
    sid = p.add_span(0, 10, {"core": 5, "memory": 10})
    p.update({"gpu": 30, "core": 12})
    assert p.resource_types == ["gpu", "core"] and p.totals == {"gpu": 30, "core": 12}
    assert p.avail_resources_at(5) == {"gpu": 30, "core": 7}
    assert p.span_planned(sid) == {"gpu": 0, "core": 5}
    p.rem_span(sid)
    assert p.avail_resources_at(5) == {"gpu": 30, "core": 12}


@pytest.mark.parametrize(("call", "err"), [
    (lambda p: p.add_span(0, 10, [1]), errno.EINVAL),
    (lambda p: p.add_span(0, 10, {"X": 1}), errno.EINVAL),
    (lambda p: p.avail_time_next(), errno.EINVAL),
    (lambda p: p.rem_span(42), errno.ENOENT),
    (lambda p: p.reduce_span(42, {}), errno.ENOENT),
    (lambda p: p.span_planned(42), errno.ENOENT),
    (lambda p: p.planner("X"), errno.EINVAL),
    (lambda p: p.update({"A": -1}), errno.ERANGE),
    (lambda p: PlannerMulti(0, 0, {"A": 1}), errno.EINVAL),
    (lambda p: PlannerMulti(0, 10, {}).avail_time_first(0, 1, []), errno.EINVAL),
    (lambda p: PlannerMulti(0, 10, [("A", 1), ("A", 2)]), errno.EINVAL),
])
def test_errors(call, err) -> None:
    p = multi(10, 20)
    with pytest.raises(PlannerError) as info:
        call(p)
    assert info.value.errno == err


def test_random_against_single_planners() -> None:
    """A multi-planner answers like its planners taken together."""
    rng = random.Random(7)
    p = PlannerMulti(0, 500, {"core": 8, "gpu": 2})
    live: list[int] = []
    for _ in range(400):
        start, duration = rng.randrange(0, 450), rng.randint(1, 50)
        req = {"core": rng.randint(0, 8), "gpu": rng.randint(0, 2)}
        fits = all(p.planner(t).avail_during(start, duration, n) for t, n in req.items())
        assert p.avail_during(start, duration, req) is fits
        if fits and rng.random() < 0.7:
            live.append(p.add_span(start, duration, req))
        elif live and rng.random() < 0.5:
            p.rem_span(live.pop(rng.randrange(len(live))))
        t = p.avail_time_first(0, duration, req)
        core = p.planner("core")
        expected = None
        c = core.avail_time_first(0, duration, req["core"])
        while c is not None:
            if p.planner("gpu").avail_during(c, duration, req["gpu"]):
                expected = c
                break
            c = core.avail_time_next()
        assert t == expected


@pytest.mark.parametrize(
    ("start", "duration", "counts"),
    [(0, 10, {"core": 3, "node": 1}), (5, 10, {"core": 4}), (0, INT64_MAX - 1, {}),
     (2, 1, {"node": 2})],
)
def test_holding_is_a_new_multi_planner_with_one_span(start, duration, counts) -> None:
    """PlannerMulti.holding (the update walk's one call) is PlannerMulti() then add_span()."""
    totals = {"core": 4, "node": 2}
    made = PlannerMulti(0, INT64_MAX, totals)
    sid = made.add_span(start, duration, counts)
    held, hid = PlannerMulti.holding(0, INT64_MAX, totals, start, duration, counts)
    assert hid == sid
    assert held.spans() == made.spans()
    assert held.span_planned(hid) == made.span_planned(sid)
    for t in totals:
        assert held.planner(t) == made.planner(t)
    assert held.avail_resources_during(start, duration) == {
        t: n - counts.get(t, 0) for t, n in totals.items()
    }
    assert held.add_span(start, duration, {"core": 0}) == made.add_span(start, duration,
                                                                         {"core": 0})
    held.rem_span(hid)
    assert held.avail_resources_during(start, duration) == totals


def test_holding_refuses_what_add_span_refuses() -> None:
    with pytest.raises(PlannerError) as exc:
        PlannerMulti.holding(0, INT64_MAX, {"core": 4}, 0, 10, {"core": 5})
    assert exc.value.errno == errno.ERANGE
    with pytest.raises(PlannerError) as exc:
        PlannerMulti.holding(0, INT64_MAX, {"core": 4}, 0, 10, {"gpu": 1})
    assert exc.value.errno == errno.EINVAL


def test_a_shared_multi_planner_refuses_every_change_and_its_copy_is_free() -> None:
    """A gang's nodes hold one subtree filter together (PlannerMulti.share): a change
    through one holder, or through one of its planners, would change them all, so each
    raises EPERM; a holder that must change takes owned(), which changes alone, and one
    that drops the span it holds keeps nothing (without_span)."""
    p, sid = PlannerMulti.holding(0, 100, {"core": 8, "gpu": 2}, 0, 10, {"core": 3})
    assert sid == 0 and p.share() is p and p.shared
    changes = [
        lambda: p.add_span(20, 5, {"core": 1}),
        lambda: p.rem_span(0),
        lambda: p.reduce_span(0, {"core": 1}),
        lambda: p.update({"core": 16}),
        lambda: p.reset(0, 50),
        lambda: p.avail_time_first(0, 5, {"core": 1}),
        lambda: p.planner("core").add_span(20, 5, 1),
        lambda: p.planner("gpu").rem_span(1),
    ]
    for change in changes:
        with pytest.raises(PlannerError) as info:
            change()
        assert info.value.errno == errno.EPERM
    assert p.avail_resources_at(0) == {"core": 5, "gpu": 2} and p.span_count == 1
    own = p.owned()
    assert own is not p and not own.shared and own == p
    assert own.add_span(0, 10, {"core": 5, "gpu": 1}) == 1
    assert own.avail_resources_at(0) == {"core": 0, "gpu": 1}
    assert own.without_span(0) is own and own.avail_resources_at(0) == {"core": 3, "gpu": 1}
    assert p.avail_resources_at(0) == {"core": 5, "gpu": 2} and p.span_count == 1
    assert p.without_span(0) is None and p.span_count == 1  # the other holders keep it
    mine, _ = PlannerMulti.holding(0, 100, {"core": 8}, 0, 10, {"core": 3})
    assert mine.owned() is mine
