"""Everything the binder knows about the cluster, owned by one thread.

Informer events are applied here (and nowhere else), so "which pods exist,
which groups are complete, which allocation holds which pod, what other
schedulers put on each node" has one answer. The state performs no I/O: it
returns the work to do (allocations to cancel, nodes whose outside usage must
be re-pinned) and the binder loop does it.

Our pods are those with ``spec.schedulerName`` equal to the binder's name.
Allocations are keyed by pod UID, never by name, so a recreated pod or group
never inherits a stale allocation. A pod's share is freed when it succeeds,
fails or is deleted; because a partial cancel frees a whole rank of an
allocation, a rank is released once the last pod of that allocation on it ends. A running
Job's allocation also keeps the free slots its later pods will take (job_slots.py: its
ledger in `job_slots`), each a member of its rank's share until released; a Job that grew
while it runs holds a second allocation in the same ledger (`grow_slots`), each slot a member
of its own allocation's share.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from fluxnode.agent.kube.node_affinity import NodeTraits
from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.admission import held_by_others
from fluxnode.scheduler.binder.job_slots import JobSlots
from fluxnode.scheduler.binder.pod_affinity import Occupants
from fluxnode.scheduler.binder.pod_requests import (
    MIB,
    ZERO,
    PodRequestError,
    PodRequests,
    pod_requests,
    resource_list,
)
from fluxnode.scheduler.binder.podgroup import (
    GroupKey,
    JobSizeLookup,
    PodGroupDirectory,
    PodGroupError,
    group_of,
    is_declared_group,
    record_name,
)
from fluxnode.scheduler.binder.queue import SchedulingQueue, creation_time, priority

log = logging.getLogger("fluxnode.binder.state")

ALLOCATION_ANNOTATION = "fluxnode.io/allocation"
RANK_ANNOTATION = "fluxnode.io/rank"
CORES_ANNOTATION = "fluxnode.io/cores"
GPUS_ANNOTATION = "fluxnode.io/gpus"
GROUP_ANNOTATION = "fluxnode.io/group"
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(slots=True)
class PodInfo:
    """The few fields of a pod the binder uses, extracted once per event."""

    uid: str
    namespace: str
    name: str
    scheduler: str
    node: str
    phase: str
    deleting: bool
    priority: int
    created: float
    allocation: str | None
    raw: dict
    seen: int = 0  # arrival order at this binder (a rebuilt cache applies pods in it)

    @classmethod
    def from_pod(cls, pod: dict) -> PodInfo:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        return cls(
            uid=meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}",
            namespace=meta.get("namespace") or "default",
            name=meta.get("name") or "",
            scheduler=spec.get("schedulerName") or "default-scheduler",
            node=spec.get("nodeName") or "",
            phase=(pod.get("status") or {}).get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            priority=priority(pod),
            created=creation_time(pod),
            allocation=(meta.get("annotations") or {}).get(ALLOCATION_ANNOTATION),
            raw=pod,
        )

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class NodeInfo:
    name: str
    usable: bool
    reason: str
    allocatable: PodRequests
    traits: NodeTraits = field(default_factory=lambda: NodeTraits(""))  # labels, hard taints


@dataclass
class Group:
    """Pods placed together. `pending` are ours, unbound and not yet placed."""

    key: GroupKey
    size: int = 1
    pending: dict[str, PodInfo] = field(default_factory=dict)
    placed: set[str] = field(default_factory=set)
    problem: str | None = None  # malformed pod declaration, reported instead of placing
    declared: bool = False  # its size is the user's: it may not have more members
    waiting: str = ""  # cannot be sized yet (its PodGroup does not exist), and why
    unsatisfiable: str | None = None
    unsatisfiable_generation: int = -1
    since: float = field(default_factory=time.monotonic)  # when the group was first seen

    @property
    def ready(self) -> bool:
        """All of the group exists (or, once placed, the missing ones came back)."""
        if self.problem or self.waiting or not self.pending or self.excess:
            return False
        if self.placed:
            return True
        return len(self.pending) >= self.size

    @property
    def excess(self) -> int:
        """Members beyond a declared size (the webhook refuses them, but two replicas may
        admit two pods at once: group_members.py); such a group is not placed."""
        if not self.declared:
            return 0
        return max(0, len(self.pending) + len(self.placed) - self.size)

    def priority(self) -> int:
        return max(p.priority for p in self.pending.values())

    def created(self) -> float:
        """The group's creation time in the queue's order: its oldest pending member's
        creationTimestamp (docs/workloads.md, "The queue")."""
        return min(p.created for p in self.pending.values())

    def queue_name(self) -> str:
        """What breaks a tie of priority and creation time: a declared group's FluxJob record
        name, else its first pending pod's name (a group of one, a Job's pods), each with its
        namespace."""
        if is_declared_group(self.key):
            return f"{self.key.namespace}/{record_name(self.key)}"
        return f"{self.key.namespace}/{min(p.name for p in self.pending.values())}"


@dataclass(frozen=True, slots=True)
class Share:
    """What a pod we bound runs on, as its Binding's annotations say (the truth a leader
    that lost its journal is re-synced from)."""

    rank: int
    cores: frozenset[int]
    gpus: frozenset[int]

    @classmethod
    def of(cls, info: PodInfo) -> Share | None:
        """The share of a bound pod carrying our annotations; None for any other pod (or
        annotations that do not parse: such a pod is counted as outside usage)."""
        if not info.node or info.allocation is None:
            return None
        ann = (info.raw.get("metadata") or {}).get("annotations") or {}
        try:
            return cls(
                int(ann[RANK_ANNOTATION]),
                frozenset(idset.decode(ann.get(CORES_ANNOTATION) or "")),
                frozenset(idset.decode(ann.get(GPUS_ANNOTATION) or "")),
            )
        except (KeyError, ValueError, idset.IdsetError):
            return None


@dataclass
class GroupAllocation:
    """One sched allocation: which of our pods it holds, on which rank."""

    id: int
    group: GroupKey
    pods: dict[str, int]  # pod uid -> rank
    # rank -> uids not yet ended, and the kept free slots of a Job's ledger (job_slots.py)
    live: dict[int, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.live:
            for uid, rank in self.pods.items():
                self.live.setdefault(rank, set()).add(uid)


@dataclass(frozen=True, slots=True)
class OutsideUsage:
    """What is not ours to place on a node: the graph's capacity minus (min(capacity,
    allocatable) minus other schedulers' live pods' requests)."""

    cores: int
    gpus: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What the graph holds for a node (from sched.resource-status)."""

    rank: int
    cores: int
    gpus: int
    memory_mib: int


class ClusterState:
    def __init__(
        self, scheduler_name: str = "fluxnode", job_size_lookup: JobSizeLookup | None = None,
        podgroups: PodGroupDirectory | None = None,
    ):
        self.scheduler_name = scheduler_name
        self.job_size_lookup = job_size_lookup
        self.podgroups = podgroups  # PodGroup objects that size groups (podgroup_directory.py)
        self.pods: dict[str, PodInfo] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.groups: dict[GroupKey, Group] = {}
        self.queue = SchedulingQueue()
        self.allocations: dict[int, GroupAllocation] = {}
        self.pod_allocation: dict[str, int] = {}
        self.job_slots: dict[GroupKey, JobSlots] = {}  # running Jobs' slot ledgers
        self.foreign: dict[str, dict[str, PodRequests]] = {}  # node -> uid -> requests
        self.capacity: dict[str, NodeCapacity] = {}
        self.outside: dict[str, tuple[int | None, OutsideUsage]] = {}  # node -> (alloc id, usage)
        self.to_cancel: list[tuple[int, list[int] | None]] = []
        self.running: dict[str, Share] = {}  # our bound, live pods -> what they run on
        self.running_on: dict[int, set[str]] = {}  # rank -> uids in `running`
        self.dirty_nodes: set[str] = set()
        self.node_generation = 0  # bumps when nodes, capacity or outside usage change
        self.with_pending: set[GroupKey] = set()  # groups that have unplaced pods
        # pod uid -> the groups it is pending in: a bound pod's events (one per pod in a
        # burst) find nothing to drop without sizing its group again (`group_of`)
        self._pending_in: dict[str, set[GroupKey]] = {}
        self.changed = True  # something happened that may let a group run
        self._usable: tuple[int, list[str]] = (-1, [])
        # nodes Kubernetes will not schedule on -> why ("cordoned", "NotReady"): apply_node
        self._unschedulable: dict[str, str] = {}
        self._arrivals = 0
        # pods on nodes, for rules between pods (pod_affinity.py): bound ones by their
        # nodeName, ours placed but not bound yet by their allocation's rank
        self.occupants = Occupants()
        self.rules_waiting = False  # a group waits for pods to leave (the cycle sets it)
        self._rank_names: dict[int, str] = {}
        self._largest: tuple[tuple[int, int], int] = ((-1, -1), 0)

    def rebuilt(self) -> ClusterState:
        """The same pods and nodes with no allocation knowledge: what a new leader starts
        from before adopting the service's allocations (a standby's view of allocations,
        cancels and outside usage is stale by construction)."""
        fresh = ClusterState(self.scheduler_name, self.job_size_lookup, self.podgroups)
        fresh.nodes = dict(self.nodes)
        fresh._unschedulable = dict(self._unschedulable)
        fresh.capacity = dict(self.capacity)
        fresh._rank_names = dict(self._rank_names)
        fresh.sync_pods([p.raw for p in sorted(self.pods.values(), key=lambda p: p.seen)])
        return fresh

    # -- pods -------------------------------------------------------------------

    def is_ours(self, pod: PodInfo) -> bool:
        return pod.scheduler == self.scheduler_name

    def sync_pods(self, items: list[dict]) -> None:
        """A full list: apply everything, and forget pods that vanished while we were not
        watching."""
        seen = set()
        for obj in items:
            info = PodInfo.from_pod(obj)
            seen.add(info.uid)
            self.apply_pod("MODIFIED", obj, info)
        for uid in [uid for uid in self.pods if uid not in seen]:
            self.apply_pod("DELETED", self.pods[uid].raw)

    def apply_pod(self, kind: str, obj: dict, info: PodInfo | None = None) -> None:
        info = info or PodInfo.from_pod(obj)
        old = self.pods.get(info.uid)
        if old is not None:
            info.seen = old.seen
        else:
            self._arrivals += 1
            info.seen = self._arrivals
        gone = kind == "DELETED" or info.terminal
        if gone:
            self.pods.pop(info.uid, None)
        else:
            self.pods[info.uid] = info
        self._track_share(info.uid, old, None if gone else info)
        self._track_occupant(info, gone)
        # Other schedulers' pods (and ours that something else bound) consume outside usage.
        self._account_foreign(old, None if gone else info)
        if self.is_ours(info) or info.uid in self.pod_allocation:
            self._apply_own(info, gone)

    def _track_occupant(self, info: PodInfo, gone: bool) -> None:
        """Keep `occupants` in step: a pod occupies its nodeName; ours placed and not bound
        yet keep the node their allocation gave them (`_placed_pod`)."""
        occ = self.occupants
        if info.node and not gone:
            if occ.occupy(info.uid, info.node, info.raw) and self.rules_waiting:
                self.changed = True  # relabelled: a group waiting on pods may fit
        elif info.uid not in occ.node_of:
            return  # pending and not placed (most events of a burst): nothing to do
        elif gone:
            terms = occ.vacate_terms(info.uid)
            if terms or self.rules_waiting:
                self.changed = True  # a group kept off its node may fit now
        elif info.uid in self.pod_allocation:
            occ.occupy(info.uid, occ.node_of[info.uid], info.raw)  # its labels changed
        else:
            occ.vacate(info.uid)

    def _track_share(self, uid: str, old: PodInfo | None, new: PodInfo | None) -> None:
        """Keep `running` (what our bound pods run on, by id) in step with the pods."""
        if (
            new is not None and old is not None and old.node == new.node
            and old.allocation == new.allocation and uid in self.running
        ):
            return  # a status change: same share (parsed once per binding, not per event)
        share = self.running.pop(uid, None)
        if share is not None:
            self.running_on.get(share.rank, set()).discard(uid)
        share = self._share_of(new) if new is not None and self.is_ours(new) else None
        if share is not None:
            self.running[new.uid] = share
            self.running_on.setdefault(share.rank, set()).add(new.uid)

    def _share_of(self, info: PodInfo) -> Share | None:
        """The pod's share, on its node's rank *now*: the Binding's rank annotation is the rank
        the node had when the pod was bound, and ranks move when rank 0's node goes away (the
        highest-ranked node takes rank 0). The node name is the truth; the graph says its rank."""
        share = Share.of(info)
        cap = self.capacity.get(info.node) if share is not None else None
        if cap is not None and cap.rank != share.rank:
            share = replace(share, rank=cap.rank)
        return share

    def in_use(self, rank: int) -> tuple[set[int], set[int]]:
        """The core and GPU ids our running pods use on `rank`."""
        cores: set[int] = set()
        gpus: set[int] = set()
        for uid in self.running_on.get(rank, ()):
            share = self.running[uid]
            cores |= share.cores
            gpus |= share.gpus
        return cores, gpus

    def _account_foreign(self, old: PodInfo | None, new: PodInfo | None) -> None:
        if old is not None and old.node and old.uid in self.foreign.get(old.node, {}):
            del self.foreign[old.node][old.uid]
            self.dirty_nodes.add(old.node)
            self.changed = True
        if (
            new is not None
            and new.node
            and new.uid not in self.pod_allocation
            and not self._placing(new)
        ):
            try:
                req = pod_requests(new.raw)
            except PodRequestError as exc:
                log.warning("%s; counted as requesting nothing", exc)
                req = ZERO
            self.foreign.setdefault(new.node, {})[new.uid] = req
            self.dirty_nodes.add(new.node)

    def _placing(self, info: PodInfo) -> bool:
        return info.uid in self.pod_allocation

    def _apply_own(self, info: PodInfo, gone: bool) -> None:
        alloc_id = self.pod_allocation.get(info.uid)
        if gone:
            if alloc_id is not None:
                self._end_pod(info.uid, alloc_id, info.phase == "Succeeded")
            self._drop_pending(info)
            return
        if alloc_id is not None or info.node:
            self._drop_pending(info)  # placed by us, or bound by someone else
            return
        if held_by_others(info.raw):
            self._drop_pending(info)  # another controller's gate: not ready to place yet
            return
        try:
            ident = group_of(info.raw, self.job_size_lookup, self.podgroups)
            problem = None
        except PodGroupError as exc:
            ident, problem = None, str(exc)
        key = ident.key if ident else GroupKey(info.namespace, "pod", info.uid)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(key)
        if ident is not None:
            # a PodGroup object's minMember is the size as it is now (it may shrink)
            group.size = ident.size if ident.podgroup else max(group.size, ident.size)
            group.declared = group.declared or ident.declared
            group.waiting = ident.waiting
        group.problem = problem
        is_new = info.uid not in group.pending
        group.pending[info.uid] = info
        self._pending_in.setdefault(info.uid, set()).add(key)
        if is_new:
            self.changed = True
        self._requeue(group)

    def _drop_pending(self, info: PodInfo) -> None:
        for key in sorted(self._pending_in.pop(info.uid, ()), key=str):
            group = self.groups.get(key)
            if group is not None and info.uid in group.pending:
                group.pending.pop(info.uid)
                self._requeue(group)

    def _requeue(self, group: Group) -> None:
        if group.pending:
            self.with_pending.add(group.key)
        else:
            self.with_pending.discard(group.key)
        if group.ready or (group.pending and not group.problem and group.key in self.job_slots):
            self.queue.push(group.key, group.priority(), group.created(), group.queue_name())
        else:
            self.queue.remove(group.key)
        if not group.pending and not group.placed:
            self.groups.pop(group.key, None)
            self.queue.remove(group.key)
            self.with_pending.discard(group.key)

    def regroup(self, key_kind: str, namespace: str | None, name: str | None) -> None:
        """A PodGroup object (or its whole kind, name None) changed: size the groups it
        names again from their pending pods."""
        for group in list(self.groups.values()):
            named = (group.key.namespace, group.key.name) == (namespace, name)
            if group.key.kind != key_kind or (name is not None and not named):
                continue
            for info in list(group.pending.values()):
                self._apply_own(info, False)
            self.changed = True

    def largest_memory(self, nodes: list[str]) -> int:
        """The largest allocatable memory among `nodes` (cached per node generation)."""
        key = (self.node_generation, hash(tuple(nodes)))
        if self._largest[0] != key:
            self._largest = (
                key,
                max(
                    (self.nodes[n].allocatable.memory_bytes for n in nodes if n in self.nodes),
                    default=0,
                ),
            )
        return self._largest[1]

    def _end_pod(self, uid: str, alloc_id: int, succeeded: bool = False) -> None:
        """Our placed pod ended: release its rank once no pod of the allocation remains there
        (a running Job's ledger keeps its slot instead: job_slots.py)."""
        del self.pod_allocation[uid]
        pod = self.pods.get(uid)
        if pod is None or not pod.node:
            self.occupants.vacate(uid)
        alloc = self.allocations.get(alloc_id)
        if alloc is None:
            return
        group = self.groups.get(alloc.group)
        if group is not None:
            group.placed.discard(uid)
        rank = alloc.pods.get(uid)
        slots = self.job_slots.get(alloc.group)
        if slots is not None and alloc_id in slots.allocs and rank in alloc.live:
            n = slots.ended(uid, succeeded)
            if n is not None:  # kept for the Job's next pod
                alloc.live[rank].add(slots.token(n))
                self.changed = True
        self._drop_member(alloc, rank, uid)
        if group is not None:
            self._requeue(group)

    def _drop_member(self, alloc: GroupAllocation, rank: int | None, member: str) -> None:
        """`member` (a pod's uid, a kept slot's token) no longer holds `rank`'s share: cancel
        that share when it was the last one there, the allocation when it was the last one."""
        members = alloc.live.get(rank)
        if members is None or member not in members:
            return
        members.discard(member)
        if not members:
            del alloc.live[rank]
            if alloc.live:
                self.to_cancel.append((alloc.id, [rank]))
            else:
                self.to_cancel.append((alloc.id, None))
                del self.allocations[alloc.id]
                slots = self.job_slots.get(alloc.group)
                if slots is not None and alloc.id in slots.allocs and slots.dropped(alloc.id):
                    del self.job_slots[alloc.group]
            self.changed = True

    # -- a running Job's slots (job_slots.py) -----------------------------------------

    def release_slots(self, key: GroupKey, needed: int | None) -> None:
        """Give back the Job's free slots beyond `needed` (None: all of them, and forget its
        ledger: pods that end from now on free their shares at once)."""
        slots = self.job_slots.get(key)
        if slots is None:
            return
        released = slots.surplus(0 if needed is None else needed)
        if needed is None:
            del self.job_slots[key]
        for n in released:  # through the allocation the slot belongs to
            alloc = self.allocations.get(slots.alloc_of(n))
            if alloc is not None:
                self._drop_member(alloc, slots.rank(n), slots.token(n))

    def slotted(self, key: GroupKey, uid: str, n: int) -> None:
        """The Job's pending pod `uid` takes slot `n` of its ledger (`JobSlots.take`)."""
        slots = self.job_slots[key]
        alloc = self.allocations[slots.alloc_of(n)]
        rank = slots.rank(n)
        members = alloc.live.setdefault(rank, set())
        members.discard(slots.token(n))
        members.add(uid)
        alloc.pods[uid] = rank
        group = self.groups.get(key)
        self._placed_pod(group, uid, alloc.id)
        if group is not None:
            self._requeue(group)

    def grow_slots(self, key: GroupKey, answer: dict, kinds: list[dict]) -> bool:
        """A running Job's growth was allocated (`answer`, for the slot `kinds` asked): its
        slots join the Job's ledger, each kept free as a member of its rank's share of the new
        allocation, for the Job's waiting pods. False: the Job has no ledger now (it ended,
        or its allocation went meanwhile); the caller cancels the answer."""
        slots = self.job_slots.get(key)
        if slots is None:
            return False
        live: dict[int, set[str]] = {}
        for n in slots.extend(answer["id"], kinds, answer["slots"]):
            live.setdefault(slots.rank(n), set()).add(slots.token(n))
        slots.asking = 0
        self.allocations[answer["id"]] = GroupAllocation(answer["id"], key, {}, live)
        group = self.groups.get(key)
        if group is not None:
            self._requeue(group)
        self.changed = True
        return True

    # -- placements ---------------------------------------------------------------

    def placed(self, alloc: GroupAllocation) -> None:
        """An allocation was made for some of a group's pending pods."""
        self.allocations[alloc.id] = alloc
        group = self.groups.get(alloc.group)
        for uid in alloc.pods:
            self._placed_pod(group, uid, alloc.id)
        if group is not None:
            group.unsatisfiable = None
            self._requeue(group)

    def _placed_pod(self, group: Group | None, uid: str, alloc_id: int) -> None:
        self.pod_allocation[uid] = alloc_id
        self._occupy_placed(uid, alloc_id)
        if group is not None:
            group.pending.pop(uid, None)
            keys = self._pending_in.get(uid)
            if keys is not None:
                keys.discard(group.key)
                if not keys:
                    del self._pending_in[uid]
            group.placed.add(uid)

    def unplace(self, uid: str) -> None:
        """Binding the pod failed: drop it from its allocation and queue it again."""
        alloc_id = self.pod_allocation.get(uid)
        if alloc_id is None:
            return
        self._end_pod(uid, alloc_id)
        pod = self.pods.get(uid)
        if pod is not None and not pod.node:
            self._apply_own(pod, gone=False)

    def adopt(self, alloc: GroupAllocation, slots: JobSlots | None = None) -> None:
        """Rebuild an allocation after a restart (with a running Job's ledger, whose free
        slots stay kept); pods that ended meanwhile are released."""
        group = self.groups.get(alloc.group)
        if group is None:
            group = self.groups[alloc.group] = Group(alloc.group, size=len(alloc.pods))
        self.allocations[alloc.id] = alloc
        if slots is not None:  # a Job's second allocation (it grew) joins its first's ledger
            ledger = self.job_slots.setdefault(alloc.group, slots)
            numbers = ledger.join(slots) if ledger is not slots else range(len(slots.slots))
            for n in numbers:
                if ledger.slots[n].kept and ledger.slots[n].pod is None:
                    alloc.live.setdefault(ledger.rank(n), set()).add(ledger.token(n))
        for uid in list(alloc.pods):
            pod = self.pods.get(uid)
            self.pod_allocation[uid] = alloc.id
            self._occupy_placed(uid, alloc.id)
            group.placed.add(uid)
            if pod is None:
                self._end_pod(uid, alloc.id)
            else:
                if pod.node and uid in self.foreign.get(pod.node, {}):
                    del self.foreign[pod.node][uid]
                    self.dirty_nodes.add(pod.node)
                self._drop_pending(pod)
        if slots is not None and alloc.group in self.groups:
            self._requeue(self.groups[alloc.group])  # its waiting pods may take the free slots

    def _occupy_placed(self, uid: str, alloc_id: int) -> None:
        """Our pod placed and not bound yet occupies its allocation's node from now on: a
        group asked after it in the same pass must see it (pod_affinity.py)."""
        pod = self.pods.get(uid)
        alloc = self.allocations.get(alloc_id)
        if pod is None or pod.node or alloc is None:
            return
        name = self._rank_names.get(alloc.pods.get(uid, -1))
        if name is not None:
            self.occupants.occupy(uid, name, pod.raw)

    # -- nodes ------------------------------------------------------------------

    def sync_nodes(self, items: list[dict]) -> None:
        seen = {(o.get("metadata") or {}).get("name") for o in items}
        for obj in items:
            self.apply_node("MODIFIED", obj)
        for name in [n for n in self.nodes if n not in seen]:
            self.apply_node("DELETED", {"metadata": {"name": name}})

    def apply_node(self, kind: str, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        old = self.nodes.get(name)
        if kind == "DELETED":
            self.nodes.pop(name, None)
            new = None
        else:
            new = self.nodes[name] = node_info(obj)
        if new is not None and new.reason in UNSCHEDULABLE:
            self._unschedulable[name] = new.reason
        else:
            self._unschedulable.pop(name, None)
        if (old is None) != (new is None) or (
            old is not None
            and new is not None
            and (old.usable, old.allocatable, old.traits)
            != (new.usable, new.allocatable, new.traits)
        ):
            self.node_generation += 1
            self.dirty_nodes.add(name)
            self.changed = True

    def unschedulable_nodes(self) -> dict[str, str]:
        """Nodes Kubernetes will not schedule on, and why: cordoned (spec.unschedulable) or
        NotReady (drained in the leader: node_drain.py). Kept as nodes change: every cycle
        asks, and a cluster has thousands of nodes."""
        return dict(self._unschedulable)

    def usable_nodes(self) -> list[str]:
        """Nodes fluxnode may place on: known to the graph, Ready, schedulable, outside usage
        pinned."""
        if self._usable[0] == self.node_generation:
            return self._usable[1]
        out = []
        for name, node in self.nodes.items():
            if not node.usable or name not in self.capacity:
                continue
            pinned = self.outside.get(name)
            if pinned is None or (pinned[0] is None and pinned[1] != OutsideUsage(0, 0, 0)):
                continue  # outside usage not accounted in the graph yet
            out.append(name)
        self._usable = (self.node_generation, out)
        return self._usable[1]

    def outside_usage(self, name: str) -> OutsideUsage | None:
        """What the graph must hold back on `name`, or None if the node is unknown to either
        side."""
        node = self.nodes.get(name)
        cap = self.capacity.get(name)
        if node is None or cap is None:
            return None
        used = ZERO
        for req in self.foreign.get(name, {}).values():
            used = used + req
        # Ours to place is min(discovered, allocatable) minus what others' live pods request,
        # per resource (whole cores, MiB; rounded down): the kubelet admits no more than
        # allocatable, and a Node that advertises more than the broker found cannot lend us
        # hardware another pod uses (found by the parallel capacity branch).
        alloc = node.allocatable
        free_milli = min(cap.cores * 1000, alloc.millicpu) - used.millicpu
        free_gpus = min(cap.gpus, alloc.gpus) - used.gpus
        free_bytes = min(cap.memory_mib * MIB, alloc.memory_bytes) - used.memory_bytes
        return OutsideUsage(
            cap.cores - max(0, free_milli) // 1000,
            cap.gpus - max(0, free_gpus),
            cap.memory_mib - max(0, free_bytes) // MIB,
        )

    def set_capacity(self, capacity: dict[str, NodeCapacity]) -> None:
        if capacity != self.capacity:
            self.dirty_nodes.update(set(capacity) ^ set(self.capacity))
            self.dirty_nodes.update(n for n in capacity if self.capacity.get(n) != capacity[n])
            moved = any(
                n in self.capacity and self.capacity[n].rank != c.rank for n, c in capacity.items()
            )
            self.capacity = capacity
            self._rank_names = {c.rank: n for n, c in capacity.items()}
            if moved:  # a node's rank changed (rank 0 moved): re-key what our pods run on
                for uid in list(self.running):
                    pod = self.pods.get(uid)
                    self._track_share(uid, None, None)
                    if pod is not None:
                        self._track_share(uid, None, pod)
            self.node_generation += 1
            self.changed = True


# the reasons of node_info that Kubernetes itself reads as "schedule nothing new here"
UNSCHEDULABLE = ("cordoned", "NotReady")


def node_info(obj: dict) -> NodeInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta.get("name") or ""
    reason = ""
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if spec.get("unschedulable"):
        reason = "cordoned"
    elif not ready:
        reason = "NotReady"
    try:
        allocatable = resource_list(
            status.get("allocatable") or status.get("capacity"), f"node {name} status.allocatable"
        )
    except PodRequestError as exc:
        log.warning("%s; node not used", exc)
        allocatable, reason = ZERO, "bad allocatable"
    return NodeInfo(name, not reason, reason, allocatable, NodeTraits.from_node(obj))
