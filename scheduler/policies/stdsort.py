"""An exact replay of libstdc++'s ``std::sort`` (introsort) on a key.

Fluxion ranks candidates with ``std::sort``, which is not stable: among equal
scores the order it leaves is a property of the algorithm. Matching Fluxion's
choices byte for byte on ties therefore needs the same algorithm, so this
module reimplements it (median-of-three pivot, unguarded partition, final
insertion sort with threshold 16).

The steps are all comparisons and swaps of small integers, so they also run compiled
(``_stdsort.c``, built by ``pip install`` when a C compiler is there) on keys that fit
in 64 bits; :func:`_order_py` is the reference it must equal
(tests/scheduler/policies/test_stdsort.py), and runs for any other key.
"""

from __future__ import annotations

from fluxnode.scheduler.compiled import compiled

_THRESHOLD = 16


def std_sort(items: list, key, descending: bool, limit: int | None = None) -> None:
    """Sort ``items`` in place like ``std::sort(items, comp)``.

    ``comp(a, b)`` is ``key(a) > key(b)`` when ``descending`` else ``key(a) < key(b)``.

    ``limit``: only the first ``limit`` positions are wanted (choosing the best k).
    A partition whose right part starts at or after ``limit`` leaves it unsorted:
    nothing there ever moves left of the cut (it is all >= the left part), so the
    first ``limit`` positions hold exactly what the full sort puts there.
    """
    n = len(items)
    if n < 2:
        return
    keys = list(map(key, items))
    depth, wanted = 2 * (n.bit_length() - 1), n if limit is None else limit
    got = None if _c_order is None else _c_order(keys, descending, depth, wanted)
    idx, _bound = _order_py(keys, descending, depth, wanted) if got is None else got
    if limit is None or limit * 8 >= n:
        items[:] = list(map(list(items).__getitem__, idx))
    else:
        _to_front(items, idx[:limit])


def _order_py(keys: list, descending: bool, depth: int, limit: int) -> tuple[list[int], int]:
    """The permutation std::sort leaves (``idx[p]``: the original index of what ends at
    position ``p``) and the end of the sorted prefix (positions past it are left as the
    partitions put them; see ``limit`` in :func:`std_sort`)."""
    n = len(keys)
    a = [-k for k in keys] if descending else list(keys)
    idx = list(range(n))
    bound = [n]
    if n >= 2:
        _introsort_loop(a, idx, 0, n, depth, limit, bound)
        _final_insertion_sort(a, idx, 0, bound[0])
    return idx, bound[0]


def _to_front(items: list, chosen: list[int]) -> None:
    """Put ``items[chosen[p]]`` at position ``p`` by swaps (the rest stays a permutation):
    O(limit) instead of rewriting a candidate list of 320,000 groups per match."""
    where: dict[int, int] = {}  # original index -> current position, once moved
    holds: dict[int, int] = {}  # position -> original index of what it holds, once changed
    for p, orig in enumerate(chosen):
        cur = where.get(orig, orig)
        if cur == p:
            continue
        displaced = holds.get(p, p)
        items[p], items[cur] = items[cur], items[p]
        where[orig], holds[p] = p, orig
        where[displaced], holds[cur] = cur, displaced


def _swap(a, idx, i, j):
    a[i], a[j] = a[j], a[i]
    idx[i], idx[j] = idx[j], idx[i]


def _introsort_loop(a, idx, first, last, depth, limit, bound):
    while last - first > _THRESHOLD:
        if depth == 0:
            _heap_fallback(a, idx, first, last)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _move_median_to_first(a, idx, first, first + 1, mid, last - 1)
        cut = _unguarded_partition(a, idx, first + 1, last, first)
        if cut < limit:
            _introsort_loop(a, idx, cut, last, depth, limit, bound)
        elif cut < bound[0]:
            bound[0] = cut  # [cut, last) stays unsorted: past the wanted positions
        last = cut


def _move_median_to_first(a, idx, result, x, y, z):
    if a[x] < a[y]:
        if a[y] < a[z]:
            _swap(a, idx, result, y)
        elif a[x] < a[z]:
            _swap(a, idx, result, z)
        else:
            _swap(a, idx, result, x)
    elif a[x] < a[z]:
        _swap(a, idx, result, x)
    elif a[y] < a[z]:
        _swap(a, idx, result, z)
    else:
        _swap(a, idx, result, y)


def _unguarded_partition(a, idx, first, last, pivot):
    pv = a[pivot]
    while True:
        while a[first] < pv:
            first += 1
        last -= 1
        while pv < a[last]:
            last -= 1
        if not first < last:
            return first
        a[first], a[last] = a[last], a[first]
        idx[first], idx[last] = idx[last], idx[first]
        first += 1


def _insertion_sort(a, idx, first, last):
    for i in range(first + 1, last):
        v, vi = a[i], idx[i]
        if v < a[first]:
            a[first + 1:i + 1] = a[first:i]
            idx[first + 1:i + 1] = idx[first:i]
            a[first], idx[first] = v, vi
        else:
            j = i
            while v < a[j - 1]:
                a[j], idx[j] = a[j - 1], idx[j - 1]
                j -= 1
            a[j], idx[j] = v, vi


def _final_insertion_sort(a, idx, first, last):
    if last - first > _THRESHOLD:
        _insertion_sort(a, idx, first, first + _THRESHOLD)
        for i in range(first + _THRESHOLD, last):
            v, vi = a[i], idx[i]
            j = i
            while v < a[j - 1]:
                a[j], idx[j] = a[j - 1], idx[j - 1]
                j -= 1
            a[j], idx[j] = v, vi
    else:
        _insertion_sort(a, idx, first, last)


def _heap_fallback(a, idx, first, last):
    # libstdc++ switches to heapsort here; this depth is never reached by
    # Fluxion-sized candidate lists, so a plain sort keeps the contract.
    seg = sorted(zip(a[first:last], idx[first:last], strict=True), key=lambda p: p[0])
    a[first:last] = [p[0] for p in seg]
    idx[first:last] = [p[1] for p in seg]


_c_order = compiled("fluxnode.scheduler.policies._stdsort", "order")
COMPILED = _c_order is not None
