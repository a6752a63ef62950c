"""TBON tree shapes, built the way flux-core's broker topology plugins build them.

Every rank has one parent except rank 0 (the leader). Supported specs
(``tbon.topo``, see flux-config-tbon(5)):

* ``kary:K``   -- complete K-ary tree, parent(r) = (r - 1) // K; ``kary:0`` is flat
                  (rank 0 is the parent of every other rank).
* ``binomial`` -- binomial tree: with k the smallest power so that 2**k >= size,
                  rank r's children are r + 2**j for j below r's order.
* ``mincrit[:K]`` -- at most three levels: K routers under rank 0, leaves spread
                  round-robin over the routers (K chosen for fanout <= 1024 if omitted).
* ``custom``   -- explicit parents (rank -> parent rank); ranks not mentioned hang
                  off rank 0, as in Flux when bootstrap.hosts has no ``parent`` key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Topology", "TopologyError", "SCHEMES", "validate_spec"]

SCHEMES = ("kary", "binomial", "mincrit", "custom")


class TopologyError(ValueError):
    """A topology spec or parent assignment that does not describe a tree rooted at rank 0."""


def _parse_k(spec: str, arg: str, scheme: str) -> int:
    if not arg.isascii() or not arg.isdigit():
        raise TopologyError(f"invalid topology {spec!r}: {scheme} k value must be an integer >= 0")
    if len(arg.lstrip("0")) > 9:  # int() refuses 4300+ digits; no fanout is that wide
        raise TopologyError(f"invalid topology {spec[:40]!r}: {scheme} k value is too large")
    return int(arg)


def validate_spec(spec: str) -> None:
    """Raise TopologyError if `spec` is not a known topology URI (size-independent check)."""
    if not isinstance(spec, str) or spec == "":
        raise TopologyError(
            f"invalid topology {spec!r}: expected e.g. 'kary:2', 'binomial' or 'custom'"
        )
    scheme, sep, arg = spec.partition(":")
    if scheme not in SCHEMES:
        raise TopologyError(
            f"invalid topology {spec!r}: unknown scheme {scheme!r} (known: {', '.join(SCHEMES)})"
        )
    if scheme == "kary":
        if not sep:
            raise TopologyError(f"invalid topology {spec!r}: kary needs a fanout, e.g. 'kary:2'")
        _parse_k(spec, arg, scheme)
    elif scheme == "mincrit":
        if arg:
            _parse_k(spec, arg, scheme)
    elif arg:
        raise TopologyError(f"invalid topology {spec!r}: {scheme} takes no argument")


def _mincrit_choose_k(size: int, max_fanout: int = 1024) -> int:
    k = 0
    if size > max_fanout + 1:
        k = 2
        while -(-(size - 1 - k) // k) > max_fanout:
            k += 1
    return k


@dataclass(frozen=True)
class Topology:
    """A rooted tree over ranks 0..size-1; `parents[r]` is r's parent (None for rank 0)."""

    spec: str
    parents: tuple[int | None, ...]
    _children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _levels: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = len(self.parents)
        if size < 1:
            raise TopologyError(f"invalid topology size {size}: must be >= 1")
        if self.parents[0] is not None:
            raise TopologyError(f"rank 0 may not have a parent (got {self.parents[0]})")
        children: list[list[int]] = [[] for _ in range(size)]
        for rank in range(1, size):
            parent = self.parents[rank]
            if not isinstance(parent, int) or isinstance(parent, bool) or not 0 <= parent < size:
                raise TopologyError(
                    f"rank {rank}: parent {parent} is not a rank of this instance (size {size})"
                )
            if parent == rank:
                raise TopologyError(f"rank {rank}: a rank cannot be its own parent")
            children[parent].append(rank)
        levels = [-1] * size
        levels[0] = 0
        for rank in range(1, size):
            path = []
            r: int | None = rank
            while r is not None and levels[r] < 0:
                if r in path:
                    cycle = path[path.index(r):] + [r]
                    raise TopologyError(
                        f"parent cycle: {' -> '.join(map(str, cycle))} never reaches rank 0"
                    )
                path.append(r)
                r = self.parents[r]
            base = levels[r] if r is not None else 0
            for depth, p in enumerate(reversed(path), start=1):
                levels[p] = base + depth
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))
        object.__setattr__(self, "_levels", tuple(levels))

    @classmethod
    def from_spec(cls, spec: str, size: int, parents: Mapping[int, int] | None = None) -> Topology:
        """Build the tree for `spec` and `size`; `parents` (rank -> parent) only with ``custom``."""
        validate_spec(spec)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise TopologyError(f"invalid topology size {size!r}: must be an integer >= 1")
        scheme, _, arg = spec.partition(":")
        if parents and scheme != "custom":
            raise TopologyError(f"topology {spec!r} does not take explicit parents (use 'custom')")
        table: list[int | None] = [None] + [0] * (size - 1)
        if scheme == "kary":
            k = int(arg)
            if k > 0:
                for r in range(1, size):
                    table[r] = (r - 1) // k
        elif scheme == "mincrit":
            k = int(arg) if arg else _mincrit_choose_k(size)
            if k > 0:
                for r in range(k + 1, size):
                    table[r] = (r - k - 1) % k + 1
        elif scheme == "binomial":
            order = 0
            while (1 << order) < size:
                order += 1
            stack = [(0, order)]
            while stack:
                root, k = stack.pop()
                for j in range(k):
                    child = root + (1 << j)
                    if child < size:
                        table[child] = root
                        stack.append((child, j))
        else:
            for rank, parent in (parents or {}).items():
                if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < size:
                    raise TopologyError(f"rank {rank} is not a rank of this instance (size {size})")
                if rank == 0:
                    raise TopologyError(
                        f"rank 0 may not have a parent in a tree topology (got {parent})"
                    )
                table[rank] = parent
        return cls(spec, tuple(table))

    @property
    def size(self) -> int:
        return len(self.parents)

    def _check(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size:
            raise TopologyError(f"rank {rank!r} is not a rank of this instance (size {self.size})")

    def parent(self, rank: int) -> int | None:
        self._check(rank)
        return self.parents[rank]

    def children(self, rank: int) -> list[int]:
        self._check(rank)
        return list(self._children[rank])

    def level(self, rank: int) -> int:
        self._check(rank)
        return self._levels[rank]

    @property
    def maxlevel(self) -> int:
        return max(self._levels)

    def subtree(self, rank: int) -> list[int]:
        """`rank` and all its descendants, sorted."""
        self._check(rank)
        out: list[int] = []
        stack = [rank]
        while stack:
            r = stack.pop()
            out.append(r)
            stack.extend(self._children[r])
        return sorted(out)

    def ancestors(self, rank: int) -> list[int]:
        """Ranks from `rank`'s parent up to rank 0."""
        self._check(rank)
        out: list[int] = []
        p = self.parents[rank]
        while p is not None:
            out.append(p)
            p = self.parents[p]
        return out

    def child_route(self, rank: int, target: int) -> int | None:
        """The child of `rank` through which `target` is reached, or None if not below `rank`."""
        self._check(rank)
        self._check(target)
        r: int | None = target
        while r is not None:
            p = self.parents[r]
            if p == rank:
                return r
            r = p
        return None

    def json_subtree(self, rank: int = 0) -> dict:
        """``{"rank", "size", "children": [...]}`` as flux-core's topology_get_json_subtree_at."""
        self._check(rank)
        # without recursion: a kary:1 chain of 1,000+ ranks exceeded Python's stack
        order = [rank]
        for r in order:
            order.extend(self._children[r])
        nodes: dict[int, dict] = {}
        for r in reversed(order):
            kids = [nodes.pop(c) for c in self._children[r]]
            nodes[r] = {"rank": r, "size": 1 + sum(k["size"] for k in kids), "children": kids}
        return nodes[rank]
