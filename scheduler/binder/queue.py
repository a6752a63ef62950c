"""The order in which waiting workloads are tried, and who holds the reservation.

Kubernetes users expect pod priority to win and, among equals, the oldest to go
first. A workload that cannot run now must not be starved by a stream of smaller
ones, so the first `reserve_depth` blocked ones are asked for with
``allocate_orelse_reserve``: the graph scheduler books their resources at the
earliest time they free up, and later ones may only backfill around that
booking. Reservations are recomputed every pass (as Fluxion's queue manager
does): last pass's are replaced by this pass's. The replacement is one step on the
leader: last pass's ids travel as ``cancel`` with the pass's first ``sched.alloc``,
which cancels them before matching anything (so every placement is as if they were
cancelled first) and makes the new one in the same call when the head is in it. A
reader of the leader (``sched.list``, ``fluxnode resource``, the fault checker) then
never sees the head without its reservation between the two, as it did when the cancels
went out, one RPC each, before the walk. (The first round trip holds up to
``alloc_batch`` workloads; a head behind more than that, or behind a Job asked alone, is
reserved again a round trip or more after the cancel, a gap as before.) A pass that asks
nothing sends the cancels after its walk.

`SchedulingQueue` holds the complete pod groups; workload_queue.py merges them with the
waiting Jobs by the same key (`workload_key`).
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


def epoch_seconds(stamp: str | datetime) -> float:
    """A time as Kubernetes writes it (RFC 3339; the official client's models give a
    datetime) as seconds since the Unix epoch: rfc3339's inverse. ValueError when it is
    not one."""
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


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
        offset = epoch_seconds(stamp) - created
    except ValueError:
        return 0
    return round(offset * 1e6) if -STAMP_SLACK <= offset < 1 else 0


def creation_time(pod: dict) -> float:
    """A pod's metadata.creationTimestamp as epoch seconds (0 when absent)."""
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    return epoch_seconds(stamp) if stamp else 0.0


def priority(pod: dict) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    """Sort key: higher priority first, then older first (creationTimestamp has 1 s
    resolution; within a second, a Job's submission stamp), then the name (a FluxJob
    record's namespace/name)."""

    neg_priority: int
    created: float
    within: int
    name: str


def workload_key(priority: int, created: float, name: str, within: int = 0) -> QueueKey:
    """A workload's place in the queue, Job or pod group: higher priority first, then older
    first (within one creationTimestamp second, by `within`, the webhook's stamp on a Job:
    see `submitted`; a group has none, 0), then the name. No arrival order at this binder:
    a restarted or new leader must find the same order from the objects alone (issue 30,
    "order by priority, then creation time")."""
    return QueueKey(-priority, created, within, name)


@dataclass
class SchedulingQueue:
    """Pending groups by QueueKey; sorting is cached until the queue changes."""

    reserve_depth: int = 1
    _entries: dict[GroupKey, QueueKey] = field(default_factory=dict)
    _ordered: list[GroupKey] | None = None

    def push(self, key: GroupKey, priority: int, created: float, name: str = "") -> None:
        """Queue a complete group; `name` breaks ties (its record's namespace/name)."""
        entry = workload_key(priority, created, name or str(key))
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

    def entries(self) -> list[tuple[GroupKey, QueueKey]]:
        """The groups in order, each with its key (to merge with the Jobs)."""
        return [(k, self._entries[k]) for k in self.ordered()]


@dataclass
class Reservations:
    """Allocation ids of the reservations made in the current pass (a Job's or a group's),
    and last pass's, which this pass's first request cancels (`replaced`)."""

    depth: int = 1
    held: dict[GroupKey, int] = field(default_factory=dict)
    # when each reservation starts (epoch seconds), None when no start is known
    starts: dict[GroupKey, float | None] = field(default_factory=dict)
    # last pass's reservations, still on the leader until this pass's first sched.alloc
    # carries them as its `cancel` (or, when the pass asks nothing, sched.cancel after it)
    replaced: list[int] = field(default_factory=list)

    def op_for_blocked(self) -> str:
        """The sched.alloc op for the next workload that could not be allocated right now."""
        return "allocate_orelse_reserve" if len(self.held) < self.depth else "allocate"

    def hold(self, key: GroupKey, alloc_id: int, start: float | None = None) -> None:
        self.held[key] = alloc_id
        self.starts[key] = start

    def new_pass(self) -> None:
        """A pass starts: it makes its own reservations; last pass's become `replaced`
        (added to any a failed pass did not get to send)."""
        self.replaced.extend(self.held.values())
        self.held.clear()
        self.starts.clear()

    def take_replaced(self) -> list[int]:
        """The ids to cancel with the request about to be sent, once: whatever becomes of
        that request, they are not sent again (its answer lost, the binder reconciles from
        sched.list, which cancels what is still there)."""
        ids, self.replaced = self.replaced, []
        return ids

    def release_all(self) -> list[int]:
        """Forget every reservation, those still to cancel too, and return their ids (the
        reconcile cancels the leader's from its list instead)."""
        ids = [*self.replaced, *self.held.values()]
        self.replaced = []
        self.held.clear()
        self.starts.clear()
        return ids


def reserved_reason(start: float | None) -> str:
    """What a reserved workload's record says (a Job's or a group's): from when its
    resources are booked, or that nothing tells when."""
    if start is None:
        return ("reserved: its resources are booked for it, but something holding them has "
                "no walltime (spec.activeDeadlineSeconds), so no start time is known")
    return (f"reserved: its resources are booked for it from {rfc3339(start)}; workloads "
            "after it may use them only if they end by then")
