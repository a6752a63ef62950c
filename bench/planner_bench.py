"""Planner memory and speed: what one planner per graph vertex costs.

Run: .venv/bin/python bench/planner_bench.py [--vertices N] [--spans N]

Prints bytes per empty Planner / PlannerMulti (tracemalloc, N of them alive at once),
creation rate, and operations per second on a planner holding --spans spans:
add_span+rem_span pairs, avail_during, avail_resources_during, avail_time_first
(a reservation search over the whole timeline) and the same on a PlannerMulti.
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from fluxnode.scheduler.planner.planner import INT64_MAX, Planner
from fluxnode.scheduler.planner.planner_multi import PlannerMulti


def per_object(factory, n: int) -> tuple[float, float]:
    """(bytes per object, objects created per second) with n alive at once."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    objs = [factory(i) for i in range(n)]
    elapsed = time.perf_counter() - t0
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    size = (after - before - 8 * len(objs)) / n  # minus the holding list's slots
    del objs
    return size, n / elapsed


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t0)


def busy_planner(spans: int, rng: random.Random) -> Planner:
    """A node-sized planner (64 cores) holding `spans` jobs back to back and overlapping."""
    p = Planner(0, INT64_MAX, 64, "core")
    t = 0
    for _ in range(spans):
        n = rng.randint(1, 16)
        start = p.avail_time_first(t, 3600, n)
        p.add_span(start, rng.randint(60, 3600), n)
        t = start
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=200_000, help="empty planners to create")
    ap.add_argument("--spans", type=int, default=2_000, help="spans in the busy planner")
    args = ap.parse_args()
    rng = random.Random(1)

    size, created = per_object(lambda i: Planner(0, INT64_MAX, 1, "core"), args.vertices)
    print(f"empty Planner: {size:.0f} B each, {created:,.0f} created/s ({args.vertices:,} alive)")
    size, created = per_object(
        lambda i: PlannerMulti(0, INT64_MAX, {"core": 64, "gpu": 4, "memory": 256}),
        args.vertices // 10)
    print(f"empty PlannerMulti(3 types): {size:.0f} B each, {created:,.0f} created/s")

    empty = Planner(0, INT64_MAX, 64, "core")
    print(
        "empty planner avail_during: "
        f"{rate(lambda i: empty.avail_during(i, 100, 8), 200_000):,.0f}/s"
    )

    p = busy_planner(args.spans, rng)
    points = len(p.points())
    horizon = p.points()[-1][0]
    print(f"busy planner: {p.span_count} spans, {points} scheduled points")

    def add_rem(i: int) -> None:
        at = rng.randrange(0, horizon)
        if p.avail_during(at, 100, 1):
            p.rem_span(p.add_span(at, 100, 1))

    print(f"  add_span+rem_span (with avail_during check): {rate(add_rem, 20_000):,.0f} pairs/s")
    print(f"  avail_during(random, 600s, 8): "
          f"{rate(lambda i: p.avail_during(rng.randrange(horizon), 600, 8), 50_000):,.0f}/s")
    print(f"  avail_resources_during(random, 600s): "
          f"{rate(lambda i: p.avail_resources_during(rng.randrange(horizon), 600), 50_000):,.0f}/s")
    print(f"  avail_time_first(0, 3600s, 64) (whole-node reservation search): "
          f"{rate(lambda i: p.avail_time_first(0, 3600, 64), 2_000):,.0f}/s")
    print(f"  avail_time_first(0, 600s, 1): "
          f"{rate(lambda i: p.avail_time_first(0, 600, 1), 50_000):,.0f}/s")

    m = PlannerMulti(0, INT64_MAX, {"core": 64, "gpu": 4})
    for _ in range(args.spans):
        req = {"core": rng.randint(1, 16), "gpu": rng.randint(0, 1)}
        start = m.avail_time_first(0, 3600, req)
        m.add_span(start, 3600, req)
    print(f"busy PlannerMulti(core,gpu): {m.span_count} spans, "
          f"{len(m.planner('core').points())} points")
    print(f"  avail_time_first(0, 3600s, 64 cores + 4 gpus): "
          f"{rate(lambda i: m.avail_time_first(0, 3600, {'core': 64, 'gpu': 4}), 500):,.0f}/s")

    def add_and_remove(i):
        return m.rem_span(m.add_span(m.avail_time_first(0, 60, [1, 0]), 60, [1, 0]))

    print(f"  add_span+rem_span: {rate(add_and_remove, 5_000):,.0f} pairs/s")


if __name__ == "__main__":
    main()
