"""std_sort: a partial sort (best k) leaves the first k positions exactly as the full sort."""

from __future__ import annotations

import random

from fluxnode.scheduler.stdsort import std_sort


def test_partial_prefix_equals_full_sort_with_ties() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.choice([1, 5, 17, 40, 200, 1000])
        items = [(rng.randrange(rng.choice([2, 5, 50, 10**6])), i) for i in range(n)]
        descending = rng.random() < 0.5
        full = list(items)
        std_sort(full, lambda x: x[0], descending)
        keys = [k for k, _ in full]
        assert keys == sorted(keys, reverse=descending)
        for limit in (1, 2, 16, 17, n // 3 + 1, n):
            part = list(items)
            std_sort(part, lambda x: x[0], descending, limit)
            assert part[:limit] == full[:limit]
            assert sorted(part) == sorted(items)  # a permutation: nothing lost


def test_stopper_partition_equals_scan_partition() -> None:
    from fluxnode.scheduler import stdsort

    rng = random.Random(3)
    for _ in range(300):
        n = rng.choice([257, 300, 1000, 3000])
        a = [rng.randrange(rng.choice([1, 2, 3, 10, 1000, 10**9])) for _ in range(n)]
        stdsort._move_median_to_first(a, list(range(n)), 0, 1, n // 2, n - 1)
        a1, i1, a2, i2 = list(a), list(range(n)), list(a), list(range(n))
        c1 = stdsort._scan_partition(a1, i1, 1, n, 0)
        c2 = stdsort._partition_by_stoppers(a2, i2, 1, n, 0)
        assert (c1, a1, i1) == (c2, a2, i2)
