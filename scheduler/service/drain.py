"""Drained nodes: taken out of scheduling by an administrator (or by a Kubernetes cordon),
with the running allocations left alone.

Flux's meaning (flux-resource(1)): while a node is drained nothing new is placed on it;
what already runs there keeps running; a drain survives an instance restart; a request
that would fit if the drained nodes were up is *busy*, not unsatisfiable. A drained node
is shown "draining" while allocations remain on it and "drained" once it is empty.

Drains are keyed by hostname, not by rank: in fluxnode a node's rank can change (rank 0
moves when its Node is deleted and the highest-ranked node takes its place), and the
drain belongs to the machine. `source` says who drained it: the binder drains cordoned
Kubernetes nodes with source "kubernetes" and undoes only those, so an operator's own
`fluxnode resource drain` is never lifted by an uncordon.

Modes of a drain of nodes already drained, as `flux resource drain`: the default fails
(EEXIST), ``update`` keeps the existing reason and timestamp, ``overwrite`` (``-f``)
replaces the reason, ``force-overwrite`` (``-ff``) the timestamp too. An undrain of a node
that is not drained fails unless ``force``.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from dataclasses import dataclass

MODES = ("fail", "update", "overwrite", "force-overwrite")
MAX_REASON = 256  # characters of a drain reason
MAX_SOURCE = 32  # characters of a drain source tag
OPERATOR = "operator"


class DrainError(ValueError):
    """A drain or undrain that cannot be done as asked; `errnum` is the errno to answer."""

    def __init__(self, errnum: int, message: str) -> None:
        super().__init__(message)
        self.errnum = errnum


@dataclass(frozen=True, slots=True)
class Drain:
    hostname: str
    reason: str
    timestamp: float
    source: str = OPERATOR


class DrainTable:
    """The drained nodes, by hostname. Changes are returned to the caller, which journals
    them before answering (a drain, like an allocation, is acknowledged only once kept)."""

    def __init__(self, drains: Iterable[Drain] = ()) -> None:
        self.by_host: dict[str, Drain] = {d.hostname: d for d in drains}

    def __contains__(self, hostname: str) -> bool:
        return hostname in self.by_host

    def get(self, hostname: str) -> Drain | None:
        return self.by_host.get(hostname)

    def drain(
        self, hosts: list[str], reason: str, mode: str, source: str, now: float
    ) -> list[Drain]:
        """Drain `hosts`; returns the records written (unchanged ones are not returned)."""
        check_text("reason", reason, MAX_REASON)
        check_text("source", source, MAX_SOURCE)
        if mode not in MODES:
            raise DrainError(errno.EINVAL, f"mode: unknown {mode!r} (one of {', '.join(MODES)})")
        already = [h for h in hosts if h in self.by_host]
        if already and mode == "fail":
            raise DrainError(
                errno.EEXIST,
                f"{', '.join(already)} already drained (use --force to overwrite the reason, "
                "--update to keep it)",
            )
        written = []
        for host in hosts:
            old = self.by_host.get(host)
            if old is not None and mode == "update":
                continue
            # overwrite keeps when the node was drained; force-overwrite restarts the clock. The
            # one who overwrites owns the drain from then on.
            stamp = old.timestamp if old is not None and mode == "overwrite" else now
            new = Drain(host, reason, stamp, source)
            if new != old:
                self.by_host[host] = new
                written.append(new)
        return written

    def undrain(
        self, hosts: list[str], force: bool, source: str | None
    ) -> tuple[list[str], list[str]]:
        """Undrain `hosts`: returns (undrained, kept). With `source`, only drains made by
        that source are lifted; the others are kept (reported, not an error)."""
        missing = [h for h in hosts if h not in self.by_host]
        if missing and not force:
            raise DrainError(errno.EINVAL, f"{', '.join(missing)} not drained")
        undrained, kept = [], []
        for host in hosts:
            old = self.by_host.get(host)
            if old is None:
                continue
            if source is not None and old.source != source:
                kept.append(host)
                continue
            del self.by_host[host]
            undrained.append(host)
        return undrained, kept


def check_text(name: str, value: object, limit: int) -> None:
    if not isinstance(value, str):
        raise DrainError(errno.EINVAL, f"{name}: must be a string")
    if len(value) > limit:
        raise DrainError(errno.EINVAL, f"{name}: at most {limit} characters, not {len(value)}")
