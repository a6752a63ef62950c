"""The order in which pending groups (and waiting whole workloads) are tried, and who holds
the reservation.

Kubernetes users expect pod priority to win and, among equals, the oldest to go
first. A group that cannot run now must not be starved by a stream of smaller
groups, so the first `reserve_depth` blocked groups are asked for with
``allocate_orelse_reserve``: the graph scheduler books their resources at the
earliest time they free up, and later groups may only backfill around that
booking. Reservations are recomputed every cycle (as Fluxion's queue manager
does), so the binder drops last cycle's before walking the queue again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from fluxnode.scheduler.binder.podgroup import GroupKey

# on a Job: when the admission webhook saw it created, to the microsecond (`submitted`)
SUBMITTED_ANNOTATION = "fluxnode.io/submitted"
STAMP_SLACK = 5.0  # seconds a stamp may precede its object's creation second (webhook time)


def rfc3339(epoch: float) -> str:
    """Seconds since the Unix epoch as Kubernetes writes times (RFC 3339, UTC, whole
    seconds): creation_time's inverse, for the times the binder writes into objects."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(epoch: float) -> str:
    """Seconds since the Unix epoch as Kubernetes writes a MicroTime (RFC 3339, UTC,
    microseconds): the admission webhook's submission stamp."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def submitted(obj: dict, created: float) -> int:
    """Where, within its creation second, the admission webhook saw `obj` created: the
    microseconds from `created` (its creationTimestamp, whole seconds) to the webhook's
    stamp (annotation ``fluxnode.io/submitted``, admission.py). The stamp is taken before
    the object is stored, so it lies a little before its creationTimestamp's second ends;
    one anywhere else (absent, unreadable, edited later) counts as 0. Used only to order
    objects created in the same second, so an edited stamp can move an object no further
    than among those."""
    stamp = ((obj.get("metadata") or {}).get("annotations") or {}).get(SUBMITTED_ANNOTATION)
    if not stamp or not created:
        return 0
    try:
        offset = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() - created
    except ValueError:
        return 0
    return round(offset * 1e6) if -STAMP_SLACK <= offset < 1 else 0


def creation_time(pod: dict) -> float:
    """A pod's metadata.creationTimestamp as epoch seconds (0 when absent)."""
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return 0.0
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def priority(pod: dict) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    """Sort key: higher priority first, then older first (creationTimestamp has 1 s
    resolution), then the order the binder saw the pods arrive, then the name."""

    neg_priority: int
    created: float
    seen: int
    name: str


def workload_key(priority: int, created: float, name: str, within: int = 0) -> QueueKey:
    """A whole workload's place in the FluxJob loop's queue: higher priority first, then
    older first (within one creationTimestamp second, by `within`, the webhook's stamp: see
    `submitted`), then the name. No arrival order at this binder: a restarted or new leader
    must find the same order from the objects alone (issue 30, "order by priority, then
    creation time")."""
    return QueueKey(-priority, created, within, name)


@dataclass
class SchedulingQueue:
    """Pending groups by QueueKey; sorting is cached until the queue changes."""

    reserve_depth: int = 1
    _entries: dict[GroupKey, QueueKey] = field(default_factory=dict)
    _ordered: list[GroupKey] | None = None

    def push(self, key: GroupKey, priority: int, created: float, seen: int = 0) -> None:
        entry = QueueKey(-priority, created, seen, str(key))
        if self._entries.get(key) != entry:
            self._entries[key] = entry
            self._ordered = None

    def remove(self, key: GroupKey) -> None:
        if self._entries.pop(key, None) is not None:
            self._ordered = None

    def __contains__(self, key: GroupKey) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def ordered(self) -> list[GroupKey]:
        if self._ordered is None:
            self._ordered = sorted(self._entries, key=self._entries.__getitem__)
        return list(self._ordered)


@dataclass
class Reservations:
    """Allocation ids of the reservations made in the current cycle."""

    depth: int = 1
    held: dict[GroupKey, int] = field(default_factory=dict)

    def op_for_blocked(self) -> str:
        """The sched.alloc op for the next group that could not be allocated right now."""
        return "allocate_orelse_reserve" if len(self.held) < self.depth else "allocate"

    def hold(self, key: GroupKey, alloc_id: int) -> None:
        self.held[key] = alloc_id

    def release_all(self) -> list[int]:
        """Forget every reservation and return the ids to cancel."""
        ids = list(self.held.values())
        self.held.clear()
        return ids
