"""Fan-out down the tree: which ranks a request targets, and which child carries which of them.

`fluxnode exec` (``rexec``) and `fluxnode archive extract` (``archive.extract``) both act on
a set of ranks the same way: a broker does its own part if its rank is a target and sends
one request to each child whose subtree holds targets, naming only those. Both parse the
target set and split it by child here, so the two agree on the syntax (an RFC 22 idset or
``all``, minus an optional exclude set), on the errors, and on what "below a child" means.

Subtrees come from the topology in `InstanceState`, which ``config.reload`` may replace;
`SubtreeSplit` caches them per topology object, so a tree of 5,000 ranks is walked once
per child, not once per request.
"""

from __future__ import annotations

import errno

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf import idset

MAX_IDSET = 1 << 20  # the largest idset a request may name (bounds the cost of decoding it)


def target_ranks(ranks: object, size: int, topic: str, *, exclude: object = None,
                 option: str = "--rank") -> set[int]:
    """The ranks `ranks` (an RFC 22 idset string or ``all``) names, minus `exclude`.

    Raises ServiceError naming `topic` and `option`: EINVAL for a malformed set or an empty
    result, EHOSTUNREACH for a rank the instance does not have."""
    if ranks == "all":
        targets = set(range(size))
    elif isinstance(ranks, str):
        try:
            targets = set(idset.decode(ranks, limit=MAX_IDSET))
        except ValueError as exc:
            raise ServiceError(errno.EINVAL, f"{topic}: {option} {ranks!r}: {exc}") from None
        missing = sorted(r for r in targets if r >= size)
        if missing:
            raise ServiceError(errno.EHOSTUNREACH, f"{topic}: {option}: no such rank "
                               f"{idset.encode(missing)} (instance size {size})")
    else:
        raise ServiceError(errno.EINVAL, f"{topic}: {option} must be an idset or 'all'")
    if exclude is not None:
        if not isinstance(exclude, str):
            raise ServiceError(errno.EINVAL, f"{topic}: --exclude must be an idset")
        try:
            targets -= set(idset.decode(exclude, limit=MAX_IDSET))
        except ValueError as exc:
            raise ServiceError(errno.EINVAL, f"{topic}: --exclude {exclude!r}: {exc}") from None
    if not targets:
        raise ServiceError(errno.EINVAL, f"{topic}: no targets (every rank is excluded)")
    return targets


class SubtreeSplit:
    """Which of a request's targets lie below each of this broker's children."""

    def __init__(self, state: InstanceState) -> None:
        self.state = state
        self._cache: tuple[object, dict[int, frozenset[int]]] = (None, {})

    def subtree(self, rank: int) -> frozenset[int]:
        """`rank` and every rank below it in the current topology."""
        topo = self.state.topology
        if self._cache[0] is not topo:
            self._cache = (topo, {})
        cache = self._cache[1]
        if rank not in cache:
            cache[rank] = frozenset(topo.subtree(rank))
        return cache[rank]

    def by_child(self, targets: set[int] | frozenset[int]) -> list[tuple[int, frozenset[int]]]:
        """(child, the targets in its subtree) for each child of this broker that has any."""
        out = []
        for child in self.state.topology.children(self.state.rank):
            below = self.subtree(child) & targets
            if below:
                out.append((child, below))
        return out
