"""A running Job's slot ledger: which of its pods holds which slot of its allocation, and which
free slots the Job keeps for the pods it will still make (issue 30).

The FluxJob loop admits a Job with one allocation of N slots (N = min(parallelism,
completions)), made before its pods exist, and the scheduling cycle binds its first pods
into it (slot_assignment.py: an Indexed Job's index i into slot i). A Job's pods then come
and go while it runs: a failed pod is replaced (backoffLimit), and with completions above
parallelism a pod of the next index (or the next pod of a work queue) follows each that
succeeds. The Job keeps its one allocation for all of them; `JobSlots` is its record:

- **slots** are the allocation's slots in the service's order (slot i), each with the live
  pod in it (none: free), the completion index of the last pod that held it, and whether
  that pod succeeded (its index will not come back);
- **a pod that ends** leaves its slot free and still allocated (`ended`): the Job's next
  pod may take it;
- **a new pod** of the Job takes a free slot of its shape and is never asked for anew
  (`take`): a pod of completion index i takes the slot index i last held (a replacement
  goes back where its index ran), else slot i when no other index that may come back held
  it, else the lowest free slot no such index held, else the lowest free slot; a pod
  without an index takes the lowest free slot. With no free slot it waits (the pod it
  replaces is still terminating and holds it). A free slot on a node Kubernetes will not
  schedule on (cordoned, NotReady) is not taken: a pod whose only free slots are there is
  asked for anew as an ordinary group, on the usable nodes;
- **release**: the Job still needs `slots_needed` slots, min(parallelism, completions -
  succeeded) as the Job controller counts the pods it will still run (job_controller.go
  manageJob; a work queue, completions unset: parallelism until its first success, then
  none; a suspended or ended Job none). Free slots beyond that minus its live pods are
  released (`surplus`), keeping first the slots whose last pod did not succeed (its index
  comes back), then those on a node where the Job still runs a pod, then the lowest.

- **growth**: a Job whose `slots_needed` rises above the slots it keeps (its parallelism
  raised while it runs) is short by `missing`; the FluxJob loop asks for those slots as one
  unit at the Job's place in the queue (`asking` says how many wait there) and, once
  allocated, they are appended to the ledger (`extend`) as slots of a second allocation.
  Each slot names the allocation it belongs to (`Slot.alloc_id`): a pod is bound with it,
  and a slot given back is cancelled through it. The rules above apply to every slot alike
  (an Indexed Job raised from 2 to 4 gets slots 2 and 3, for indexes 2 and 3).

The ledger holds no I/O and no allocation itself: the cluster cache (cluster_state.py)
keeps each kept free slot as a member of its node's share of the allocation, so a node's
share is cancelled (a partial cancel of that rank) once no live pod and no kept slot of the
Job is left on it, as for any group. A binder that restarts rebuilds the ledger from the
leader's record of the allocations (their slots) and the running pods' Bindings
(`place_running`; a Job's second allocation is joined to its first: `join`);
which index last held a free slot is not known then, so a replacement of an index whose old
pod ended before the restart goes to slot i when free (where its index was first bound).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fluxnode.scheduler.binder.job_shape import JobShapeError, integer_field
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.slot_assignment import PodSlot, slots_by_shape
from fluxnode.scheduler.jobspec.builder import SlotKind

log = logging.getLogger("fluxnode.binder")

TOKEN_PREFIX = "slot:"  # a kept slot's member name in the allocation's share of a node


@dataclass(slots=True)
class Slot:
    """One slot of a Job's allocation."""

    share: PodSlot
    shape: SlotKind
    pod: str | None = None  # the live pod's uid in it; None: free
    index: int | None = None  # the completion index of the last pod that held it
    succeeded: bool = False  # that pod succeeded (its index will not come back)
    kept: bool = True  # still allocated (False: released to the leader)
    alloc_id: int = 0  # the allocation it belongs to (a Job that grew holds two)


@dataclass
class JobSlots:
    """The slot ledger of one running Job (see the module's docstring)."""

    alloc_id: int
    key: GroupKey
    slots: list[Slot] = field(default_factory=list)
    # what the Job's pods in this ledger completed: an Indexed Job's succeeded indexes, else
    # its succeeded pods' uids (`succeeded`, before the Job controller's status says so)
    done: set[int | str] = field(default_factory=set)
    _of_pod: dict[str, int] = field(default_factory=dict)  # live pod uid -> its slot
    _of_share: dict[PodSlot, int] = field(default_factory=dict)  # share -> slot number
    allocs: set[int] = field(default_factory=set)  # the allocations its slots belong to
    asking: int = 0  # slots more the Job waits for in the queue (growth), 0: none

    def __post_init__(self) -> None:
        self._of_share = {s.share: n for n, s in enumerate(self.slots)}
        self.allocs = {self.alloc_id}

    @classmethod
    def of_allocation(cls, alloc_id: int, key: GroupKey, kinds: list[dict],
                      listed: list[dict]) -> JobSlots:
        """The ledger of an allocation as the service answers or lists it (its slot kinds and
        slots in the service's order), every slot free."""
        shapes = slots_by_shape(kinds, listed)
        order = [PodSlot.of(s) for s in listed]
        shape_of = {share: shape for shape, shares in shapes.items() for share in shares}
        return cls(alloc_id, key, [Slot(share, shape_of[share], alloc_id=alloc_id)
                                   for share in order])

    def join(self, other: JobSlots) -> range:
        """Append `other`'s slots (another allocation of the same Job, as it is) to this
        ledger; returns their new numbers."""
        first = len(self.slots)
        for s in other.slots:
            n = len(self.slots)
            self.slots.append(s)
            self._of_share[s.share] = n
            if s.pod is not None:
                self._of_pod[s.pod] = n
        self.allocs |= other.allocs
        self.done |= other.done
        return range(first, len(self.slots))

    def extend(self, alloc_id: int, kinds: list[dict], listed: list[dict]) -> range:
        """The Job's growth was allocated (`alloc_id`, its kinds and slots as the service
        answered them): its slots join the ledger, free and kept; returns their numbers."""
        return self.join(JobSlots.of_allocation(alloc_id, self.key, kinds, listed))

    def dropped(self, alloc_id: int) -> bool:
        """The allocation `alloc_id` is gone (its last member ended or was released): its
        slots are no longer kept. True when none of the ledger's allocations is left."""
        self.allocs.discard(alloc_id)
        for s in self.slots:
            if s.alloc_id == alloc_id:
                s.kept = False
        return not self.allocs

    def held(self) -> int:
        """The slots the Job keeps (used or free): what its allocations still give it."""
        return sum(s.kept for s in self.slots)

    def missing(self, needed: int) -> int:
        """Slots the Job needs beyond those it keeps (its parallelism raised while it
        runs): the growth to ask for, 0 when none."""
        return max(0, needed - self.held())

    @staticmethod
    def token(n: int) -> str:
        return f"{TOKEN_PREFIX}{n}"

    def rank(self, n: int) -> int:
        return self.slots[n].share.rank

    def _put(self, n: int, uid: str, index: int | None) -> None:
        s = self.slots[n]
        s.pod, s.index, s.succeeded = uid, index, False
        self._of_pod[uid] = n

    def hold(self, uid: str, share: PodSlot, index: int | None) -> int | None:
        """The pod `uid` was bound into `share` (the slot with exactly its rank, cores and
        GPUs); returns that slot's number, None when the allocation has no such free slot."""
        n = self._of_share.get(share)
        if n is None or self.slots[n].pod is not None or not self.slots[n].kept:
            return None
        self._put(n, uid, index)
        return n

    def place_running(self, running: dict[str, tuple[str, frozenset[int], frozenset[int]]],
                      index: dict[str, int]) -> None:
        """Put the running pods (uid -> node, cores, GPUs their Bindings name) in the slots
        they run in: by node name, not rank (ranks move when rank 0's node goes), and by any
        core or GPU in common, so a slot whose ids a running pod uses is never free. A pod
        that matches no slot is left out (it is still the group's)."""
        for uid, (node, cores, gpus) in sorted(running.items()):
            for n, s in enumerate(self.slots):
                if s.pod is not None or s.share.hostname != node:
                    continue
                ids = s.share.ids()
                if ids[0] & cores or ids[1] & gpus:
                    self._put(n, uid, index.get(uid))
                    break

    def ended(self, uid: str, succeeded: bool) -> int | None:
        """The pod `uid` ended: its slot (returned) is free and kept."""
        n = self._of_pod.pop(uid, None)
        if n is None:
            return None
        s = self.slots[n]
        s.pod, s.succeeded = None, succeeded
        if succeeded:
            self.done.add(uid if s.index is None else s.index)
        return n

    def free(self) -> list[int]:
        """The kept slots no live pod holds."""
        return [n for n, s in enumerate(self.slots) if s.kept and s.pod is None]

    def live(self) -> int:
        return len(self._of_pod)

    @property
    def succeeded(self) -> int:
        """The Job's pods seen to succeed in this ledger (a lower bound of the Job's
        succeeded count, known before the Job controller writes it)."""
        return len(self.done)

    def take(self, shapes: dict[str, SlotKind], index: dict[str, int],
             usable: Callable[[str], bool] = lambda _node: True) -> dict[str, int]:
        """Free slots for new pods (uid -> shape; `index`: uid -> completion index), by the
        rule of the module's docstring, on nodes `usable` allows (a slot on a cordoned or
        NotReady node is not taken); returns uid -> slot number for the pods that got one.
        Pods with an index go first, in index order, then the others in uid order."""
        order = sorted(shapes, key=lambda u: (0, index[u], u) if u in index else (1, 0, u))
        out: dict[str, int] = {}
        for uid in order:
            i = index.get(uid)
            room = [n for n in self.free() if self.slots[n].shape == shapes[uid]
                    and usable(self.slots[n].share.hostname)]
            if not room:
                continue
            n = min(room, key=lambda n: (self._preference(n, i), n))
            self._put(n, uid, i)
            out[uid] = n
        return out

    def _preference(self, n: int, i: int | None) -> int:
        """Lower is better for a pod of index `i` (None: no index) in free slot `n`."""
        s = self.slots[n]
        other = s.index is not None and s.index != i and not s.succeeded  # may come back
        if i is not None and s.index == i:
            return 0
        if i is not None and n == i and not other:
            return 1
        return 3 if other else 2

    def surplus(self, needed: int) -> list[int]:
        """Release the free slots the Job no longer needs (see the module's docstring);
        returns their numbers (now not kept)."""
        free = self.free()
        keep = max(0, needed - self.live())
        if len(free) <= keep:
            return []
        running_on = {s.share.rank for s in self.slots if s.pod is not None}
        free.sort(key=lambda n: (self.slots[n].succeeded,
                                 self.slots[n].share.rank not in running_on, n))
        released = free[keep:]
        for n in released:
            self.slots[n].kept = False
        return sorted(released)

    def kept_ranks(self) -> Iterable[int]:
        """The ranks of the kept free slots."""
        return {self.slots[n].share.rank for n in self.free()}

    def alloc_of(self, n: int) -> int:
        return self.slots[n].alloc_id


def slots_needed(job: dict, seen: int = 0) -> int:
    """How many slots a running (not suspended, not ended) Job still needs: min(parallelism,
    completions - succeeded) from its spec and the status the Job controller writes, or
    `seen` succeeded (its ledger's count) when that is more (the status comes later); with
    completions unset (a work queue) parallelism until a pod succeeded, then none. A field
    that is not a count (the API server validates them) keeps every slot."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    try:
        parallelism = integer_field(spec.get("parallelism", 1), "spec.parallelism", 0)
        succeeded = max(seen, integer_field(status.get("succeeded", 0), "status.succeeded", 0))
        completions = spec.get("completions")
        if completions is None:
            return parallelism if succeeded == 0 else 0
        completions = integer_field(completions, "spec.completions", 0)
    except JobShapeError as exc:
        log.warning("Job %s/%s: %s; its free slots are kept",
                    (job.get("metadata") or {}).get("namespace"),
                    (job.get("metadata") or {}).get("name"), exc)
        return 1 << 30
    return max(0, min(parallelism, completions - succeeded))
