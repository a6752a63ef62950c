"""std_sort: a partial sort (best k) leaves the first k positions exactly as the full sort."""

from __future__ import annotations

import random

from fluxnode.scheduler.policies.stdsort import std_sort


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
