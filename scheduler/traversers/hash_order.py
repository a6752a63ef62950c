"""The order libstdc++'s ``std::unordered_map`` / ``unordered_set`` of integer keys
gives its elements, replayed so that what Fluxion does in that order is done in it.

Design: Fluxion keeps some of its working sets in unordered containers keyed by
integers (the jobs and ancestors a rank-based ``remove`` reduces, the ranks of a
partial cancel). Their order is no accident of the run: ``std::hash`` of an integer is
the integer itself and GCC's hashtable is deterministic, so the order follows from the
keys and the order they were inserted in. Where a step can fail half way, the order
decides what was done before it failed, and so what the user sees next.

The model is the hashtable of GCC 12's libstdc++ (``bits/hashtable.h``,
``hashtable_c++0x.cc``), the one Fluxion v0.54 is built with: one singly linked list of
all nodes, each bucket pointing at the node *before* its first one; a key in an empty
bucket goes to the front of the list, a key in a used bucket right after that
bucket's "before" node; the prime rehash policy (max load factor 1) starts at 13
buckets on the first insert and then at least doubles, taking the next prime of its
table (``_M_next_bkt``); a rehash walks the old list and rebuilds it by the same two
rules. Only inserts are modelled (no erase). Keys are signed 64-bit, hashed as their
unsigned value.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

# libstdc++'s __prime_list (hashtable-aux.cc), its start: enough for tables of up to
# about a hundred thousand keys; a larger one is refused rather than guessed.
_PRIMES = (
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
    83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227,
    241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661,
    709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879,
    2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087,
    5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983,
    14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411, 30727,
    33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817,
    78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793, 159871,
    172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061,
    379787, 410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049,
    834181, 902483, 976369, 1056323,
)
# _M_next_bkt's table for requests below 14 buckets
_FAST_BKT = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_U64 = 1 << 64


class HashOrderError(ValueError):
    """More keys than the modelled prime table reaches."""


def next_bucket_count(n: int) -> tuple[int, int]:
    """(bucket count, next resize) for a request of ``n`` buckets (_M_next_bkt)."""
    if n < len(_FAST_BKT):
        b = _FAST_BKT[n]
        return b, b
    i = bisect.bisect_left(_PRIMES, n)
    if i == len(_PRIMES):
        raise HashOrderError(f"an unordered container needing more than {_PRIMES[-1]} buckets")
    b = _PRIMES[i]
    return b, b


class UnorderedKeys:
    """The keys of one libstdc++ unordered container of integers, in its order."""

    __slots__ = ("_buckets", "_next", "_first", "_bucket_of", "_count", "_resize")

    def __init__(self, keys: Iterable[int] = ()) -> None:
        self._buckets = 1
        self._resize = 0
        self._count = 0
        self._first: int | None = None  # the list's head (after _M_before_begin)
        self._next: dict[int, int | None] = {}  # key -> the next key in the list
        # bucket -> the key before its first one (None: _M_before_begin)
        self._bucket_of: dict[int, int | None] = {}
        for k in keys:
            self.add(k)

    def __contains__(self, key: int) -> bool:
        return key in self._next

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        k = self._first
        while k is not None:
            yield k
            k = self._next[k]

    def _bkt(self, key: int) -> int:
        return (key % _U64) % self._buckets

    def add(self, key: int) -> None:
        """Insert ``key`` (nothing happens when it is there)."""
        if key in self._next:
            return
        n = self._count + 1
        if n > self._resize:  # _M_need_rehash
            min_bkts = max(n, 0 if self._resize else 11)
            if min_bkts >= self._buckets:
                self._rehash(max(min_bkts + 1, self._buckets * 2))
            else:
                self._resize = self._buckets
        self._insert_bucket_begin(self._bkt(key), key)
        self._count = n

    def _insert_after(self, before: int | None, key: int) -> None:
        """Link ``key`` in after ``before`` (None: at the list's head)."""
        if before is None:
            self._next[key] = self._first
            self._first = key
        else:
            self._next[key] = self._next[before]
            self._next[before] = key

    def _insert_bucket_begin(self, bkt: int, key: int) -> None:
        if bkt in self._bucket_of:  # after the node before the bucket's first
            self._insert_after(self._bucket_of[bkt], key)
            return
        # an empty bucket: the list's new head, and the bucket of the old head now
        # starts after it
        old = self._first
        self._insert_after(None, key)
        if old is not None:
            self._bucket_of[self._bkt(old)] = key
        self._bucket_of[bkt] = None

    def _rehash(self, request: int) -> None:
        """_M_rehash_aux: the old list walked in its order, each node linked in by the
        insertion rules into the new buckets (``bbegin``: the bucket of the head)."""
        self._buckets, self._resize = next_bucket_count(request)
        order = list(self)
        self._first = None
        self._bucket_of = {}
        bbegin = 0
        for k in order:
            bkt = self._bkt(k)
            if bkt in self._bucket_of:
                self._insert_after(self._bucket_of[bkt], k)
                continue
            self._insert_after(None, k)
            self._bucket_of[bkt] = None
            if self._next[k] is not None:
                self._bucket_of[bbegin] = k
            bbegin = bkt
