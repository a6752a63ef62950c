"""The shapes of TBON trees, answered by arithmetic where Flux's plugins use a formula.

flux-core's topology plugins fill a parent table of `size` entries and scan it for
children; a Python table of tuples for 1,000,000 ranks took 1.2 s and about 200 MiB. kary,
binomial and mincrit trees need no table: a rank's parent, children, level and subtree
follow from the rank and the size, so building one costs nothing and each question costs
at most the tree's depth. Only `custom` (parents named in the config) keeps a table, and
checks there that it is a tree.

* kary:K (K >= 1): parent (r - 1) // K, children K*r + 1 .. K*r + K; K = 0 is flat.
* binomial: parent is r with its lowest set bit cleared, children r + 2**j for every j
  below r's lowest set bit (below the order for rank 0), level the number of set bits;
  a subtree is the range r .. r + lowbit(r) - 1.
* mincrit:K: K routers under rank 0, leaf r under router (r - K - 1) % K + 1.
"""

from __future__ import annotations

from collections.abc import Sequence


class TopologyError(ValueError):
    """A topology spec or parent assignment that does not describe a tree rooted at rank 0."""


class Shape:
    """A rooted tree over ranks 0..size-1 (ranks are checked by the caller)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def parent(self, rank: int) -> int | None:
        raise NotImplementedError

    def children(self, rank: int) -> Sequence[int]:
        """In ascending order, as flux-core's scan of its table finds them."""
        raise NotImplementedError

    def level(self, rank: int) -> int:
        level, p = 0, self.parent(rank)
        while p is not None:
            level, p = level + 1, self.parent(p)
        return level

    def maxlevel(self) -> int:
        raise NotImplementedError

    def subtree(self, rank: int) -> list[int]:
        """`rank` and all its descendants, sorted."""
        out, stack = [], [rank]
        while stack:
            r = stack.pop()
            out.append(r)
            stack.extend(self.children(r))
        return sorted(out)

    def child_route(self, rank: int, target: int) -> int | None:
        """The child of `rank` whose subtree holds `target`, or None."""
        want = self.level(rank) + 1
        depth = self.level(target)
        if depth < want:
            return None
        r = target
        for _ in range(depth - want):
            r = self.parent(r)  # type: ignore[assignment]  # below rank 0, never None
        return r if self.parent(r) == rank else None


class Fanout(Shape):
    """A shape with a fanout parameter K (kary, mincrit)."""

    def __init__(self, size: int, k: int) -> None:
        super().__init__(size)
        self.k = k


class Kary(Fanout):
    def parent(self, rank: int) -> int | None:
        return None if rank == 0 else (rank - 1) // self.k if self.k else 0

    def children(self, rank: int) -> Sequence[int]:
        if self.k == 0:
            return range(1, self.size) if rank == 0 else range(0)
        first = self.k * rank + 1
        return range(min(first, self.size), min(first + self.k, self.size))

    def level(self, rank: int) -> int:
        if self.k <= 1 or rank == 0:
            return rank if self.k == 1 else min(rank, 1)
        level = 0
        while rank:
            rank, level = (rank - 1) // self.k, level + 1
        return level

    def maxlevel(self) -> int:
        return self.level(self.size - 1)

    def subtree(self, rank: int) -> list[int]:
        if self.k == 0:
            return list(range(self.size)) if rank == 0 else [rank]
        if self.k == 1:
            return list(range(rank, self.size))
        out: list[int] = []
        lo = hi = rank  # this level's descendants: lo..hi
        while lo < self.size:
            out.extend(range(lo, min(hi + 1, self.size)))
            lo, hi = lo * self.k + 1, hi * self.k + self.k
        return out

    def child_route(self, rank: int, target: int) -> int | None:
        if self.k == 1:
            return rank + 1 if target > rank else None
        return super().child_route(rank, target)


class Binomial(Shape):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.order = (size - 1).bit_length()  # smallest k with 2**k >= size

    def parent(self, rank: int) -> int | None:
        return rank & (rank - 1) if rank else None

    def _span(self, rank: int) -> int:
        """2**j for the first j that is not a child offset of `rank`."""
        return rank & -rank if rank else 1 << self.order

    def children(self, rank: int) -> Sequence[int]:
        span, out, j = self._span(rank), [], 1
        while j < span and rank + j < self.size:
            out.append(rank + j)
            j <<= 1
        return out

    def level(self, rank: int) -> int:
        return rank.bit_count()

    def maxlevel(self) -> int:
        n = self.size - 1  # the most set bits of any rank up to n
        return max(n.bit_count(), n.bit_length() - 1)

    def subtree(self, rank: int) -> list[int]:
        return list(range(rank, min(rank + self._span(rank), self.size)))

    def child_route(self, rank: int, target: int) -> int | None:
        if not rank <= target < rank + self._span(rank) or target == rank:
            return None
        # the child is `rank` plus the highest bit of what separates them
        return rank + (1 << ((target - rank).bit_length() - 1))


class Mincrit(Fanout):
    def parent(self, rank: int) -> int | None:
        if rank == 0 or self.k == 0 or rank <= self.k:
            return None if rank == 0 else 0
        return (rank - self.k - 1) % self.k + 1

    def children(self, rank: int) -> Sequence[int]:
        if rank == 0:
            return range(1, self.size if self.k == 0 else min(self.k + 1, self.size))
        if self.k == 0 or rank > self.k:
            return range(0)
        return range(rank + self.k, self.size, self.k)

    def level(self, rank: int) -> int:
        return 0 if rank == 0 else 1 if self.k == 0 or rank <= self.k else 2

    def maxlevel(self) -> int:
        return self.level(self.size - 1)

    def subtree(self, rank: int) -> list[int]:
        if rank == 0:
            return list(range(self.size))
        return [rank, *self.children(rank)]


class Table(Shape):
    """Explicit parents (``custom``), checked to form a tree rooted at rank 0."""

    def __init__(self, parents: Sequence[int | None]) -> None:
        super().__init__(len(parents))
        size = self.size
        if parents[0] is not None:
            raise TopologyError(f"rank 0 may not have a parent (got {parents[0]})")
        kids: list[list[int]] = [[] for _ in range(size)]
        for rank in range(1, size):
            parent = parents[rank]
            if not isinstance(parent, int) or isinstance(parent, bool) or not 0 <= parent < size:
                raise TopologyError(
                    f"rank {rank}: parent {parent} is not a rank of this instance (size {size})"
                )
            if parent == rank:
                raise TopologyError(f"rank {rank}: a rank cannot be its own parent")
            kids[parent].append(rank)
        levels = [-1] * size
        levels[0] = 0
        for rank in range(1, size):
            path: list[int] = []
            r: int | None = rank
            while r is not None and levels[r] < 0:
                if r in path:
                    cycle = path[path.index(r):] + [r]
                    raise TopologyError(
                        f"parent cycle: {' -> '.join(map(str, cycle))} never reaches rank 0"
                    )
                path.append(r)
                r = parents[r]
            base = levels[r] if r is not None else 0
            for depth, p in enumerate(reversed(path), start=1):
                levels[p] = base + depth
        self._parents = tuple(parents)
        self._children = tuple(tuple(c) for c in kids)
        self._levels = tuple(levels)

    def parent(self, rank: int) -> int | None:
        return self._parents[rank]

    def children(self, rank: int) -> Sequence[int]:
        return self._children[rank]

    def level(self, rank: int) -> int:
        return self._levels[rank]

    def maxlevel(self) -> int:
        return max(self._levels)
