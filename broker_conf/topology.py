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

The shapes themselves are in topology_shapes.py: kary, binomial and mincrit answer by
arithmetic (no table, so a tree of 1,000,000 ranks costs nothing to build), custom by a
checked table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fluxnode.broker_conf.topology_shapes import (
    Binomial,
    Kary,
    Mincrit,
    Shape,
    Table,
    TopologyError,
)

__all__ = ["Topology", "TopologyError", "SCHEMES", "validate_spec"]

SCHEMES = ("kary", "binomial", "mincrit", "custom")


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
    """A rooted tree over ranks 0..size-1, built by `from_spec`."""

    spec: str
    shape: Shape

    @classmethod
    def from_spec(cls, spec: str, size: int, parents: Mapping[int, int] | None = None) -> Topology:
        """Build the tree for `spec` and `size`; `parents` (rank -> parent) only with ``custom``."""
        validate_spec(spec)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise TopologyError(f"invalid topology size {size!r}: must be an integer >= 1")
        scheme, _, arg = spec.partition(":")
        if parents and scheme != "custom":
            raise TopologyError(f"topology {spec!r} does not take explicit parents (use 'custom')")
        if scheme == "kary":
            return cls(spec, Kary(size, int(arg)))
        if scheme == "mincrit":
            return cls(spec, Mincrit(size, int(arg) if arg else _mincrit_choose_k(size)))
        if scheme == "binomial":
            return cls(spec, Binomial(size))
        table: list[int | None] = [None] + [0] * (size - 1)
        for rank, parent in (parents or {}).items():
            if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < size:
                raise TopologyError(f"rank {rank} is not a rank of this instance (size {size})")
            if rank == 0:
                raise TopologyError(
                    f"rank 0 may not have a parent in a tree topology (got {parent})"
                )
            table[rank] = parent
        return cls(spec, Table(table))

    @property
    def parents(self) -> tuple[int | None, ...]:
        """Every rank's parent (None for rank 0): a table of `size` entries, for small trees."""
        return tuple(self.shape.parent(r) for r in range(self.size))

    @property
    def size(self) -> int:
        return self.shape.size

    def _check(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size:
            raise TopologyError(f"rank {rank!r} is not a rank of this instance (size {self.size})")

    def parent(self, rank: int) -> int | None:
        self._check(rank)
        return self.shape.parent(rank)

    def children(self, rank: int) -> list[int]:
        self._check(rank)
        return list(self.shape.children(rank))

    def level(self, rank: int) -> int:
        self._check(rank)
        return self.shape.level(rank)

    @property
    def maxlevel(self) -> int:
        return self.shape.maxlevel()

    def subtree(self, rank: int) -> list[int]:
        """`rank` and all its descendants, sorted."""
        self._check(rank)
        return self.shape.subtree(rank)

    def ancestors(self, rank: int) -> list[int]:
        """Ranks from `rank`'s parent up to rank 0."""
        self._check(rank)
        out: list[int] = []
        p = self.shape.parent(rank)
        while p is not None:
            out.append(p)
            p = self.shape.parent(p)
        return out

    def child_route(self, rank: int, target: int) -> int | None:
        """The child of `rank` through which `target` is reached, or None if not below `rank`."""
        self._check(rank)
        self._check(target)
        return self.shape.child_route(rank, target)

    def json_subtree(self, rank: int = 0) -> dict:
        """``{"rank", "size", "children": [...]}`` as flux-core's topology_get_json_subtree_at."""
        self._check(rank)
        # without recursion: a kary:1 chain of 1,000+ ranks exceeded Python's stack
        order = [rank]
        for r in order:
            order.extend(self.shape.children(r))
        nodes: dict[int, dict] = {}
        for r in reversed(order):
            kids = [nodes.pop(c) for c in self.shape.children(r)]
            nodes[r] = {"rank": r, "size": 1 + sum(k["size"] for k in kids), "children": kids}
        return nodes[rank]
