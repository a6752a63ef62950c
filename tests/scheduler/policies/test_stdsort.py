"""std_sort: a partial sort (best k) leaves the first k positions exactly as the full sort,
and the compiled order (``_stdsort.c``) is the Python reference's."""

from __future__ import annotations

import random

import pytest
from fluxnode.scheduler.policies import stdsort
from fluxnode.scheduler.policies.stdsort import std_sort
from hypothesis import given, settings
from hypothesis import strategies as st


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


compiled = pytest.mark.skipif(not stdsort.COMPILED,
                              reason="the C extension is not built (or FLUXNODE_PURE_PYTHON)")
INT64 = 2**63


@compiled
@settings(max_examples=400, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(0, 3), st.integers(-50, 50),
                               st.integers(-INT64 + 1, INT64 - 1)), max_size=300),
       descending=st.booleans(), depth=st.integers(0, 20), limit=st.integers(0, 320))
def test_the_compiled_order_is_the_python_order(keys, descending, depth, limit):
    """Same permutation and sorted bound from both, ties and the depth-0 fallback
    included (small depths reach it on any list past 16)."""
    assert stdsort._c_order(keys, descending, depth, limit) == \
        stdsort._order_py(keys, descending, depth, limit)


@compiled
@pytest.mark.parametrize("key", [INT64, -INT64 - 1, 2**100, 1.5, "a"])
def test_a_key_past_64_bits_or_not_an_int_goes_to_the_python_order(key):
    keys = [3, 1, key, 2] * 5
    assert stdsort._c_order(keys, False, 10, 20) is None
    items = [k for k in keys if isinstance(k, int)]
    std_sort(items, lambda k: k, True)
    assert items == sorted(items, reverse=True)


@compiled
def test_the_least_int64_sorts_ascending_but_not_descending_in_c():
    keys = [3, -INT64, 2] * 7  # -(-2**63) does not fit in 64 bits
    assert stdsort._c_order(keys, False, 10, 21) == stdsort._order_py(keys, False, 10, 21)
    assert stdsort._c_order(keys, True, 10, 21) is None


@compiled
def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        stdsort._c_order((1, 2), False, 1, 1)
    with pytest.raises(ValueError):
        stdsort._c_order([1, 2], False, -1, 1)
