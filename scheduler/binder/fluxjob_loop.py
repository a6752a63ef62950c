"""The FluxJob loop: opted-in Jobs admitted as a whole (issue 30, "Workloads, not pods").

The admission webhook stores a Job labelled ``fluxnode.io/queue`` suspended, so the Job
controller creates none of its pods. The binder (leader only) then takes each such Job
through these steps:

1. **Queued**: it writes the Job's FluxJob (fluxjob.py; named as the Job, owned by it) and
   asks the leader's scheduler for all of its pods' slots in one request
   (`SchedulingCycle.whole_request`; the walk sends several Jobs' requests, and the pod
   groups', in one round trip), for the Job's walltime (walltime.py; none: until
   cancelled). While they do not fit, the FluxJob stays Queued with the reason
   (``busy: ...``, or ``unsatisfiable: ...`` in the words pods are told) and its position
   among the waiting; it is asked again whenever the cluster changes.

   **One queue with the pod groups** (workload_queue.py): this loop only keeps the Jobs'
   records and says which wait (`queued`, in order of priority, their pods'
   PriorityClass, which the binder watches; then creationTimestamp; then namespace/name:
   `queue.workload_key`). The scheduling cycle merges them with the complete pod groups by
   the same key and walks both in one order, asking for a Job through `_queued` at its
   place; POSITION is that order. Until the pass has a reservation, each workload is asked
   with ``allocate_orelse_reserve``: the first that does not fit, Job or group (the head),
   is **Reserved**, its resources booked from the earliest time the walltimes of what holds
   them end; a Job's FluxJob says that START (RFC 3339 UTC), or, when something it waits
   for has no walltime, that no start is known. Everything after it is asked with plain
   ``allocate``, so the planner lets it start only where it ends before the head's start or
   uses what the head does not need (EASY backfill, as Fluxion's queue manager with
   reservation depth 1). The reservation is made again on every pass (the head of the
   next pass may differ), last pass's cancelled by the pass's first request in the same
   call (queue.py), so the leader does not show the head without one in between.

   **Queue limits** (queue_limits.py, a ConfigMap the binder watches): a Job that would
   take its queue's admitted Jobs past a limit stays Queued saying so and is not asked.
2. **Admitted**: the allocation is held for the Job's group (``BinderContext.held``, keyed
   as podgroup.py keys a Job's pods) and the Job is unsuspended. Its pods, once all there,
   are bound into that allocation by the scheduling cycle (an Indexed Job's index i into
   slot i); nothing is asked again.
3. **Running** once all its pods are bound. The Job keeps its one allocation while it runs
   (job_slots.py, its slot ledger): a pod that ends leaves its slot free and kept, and the
   Job's later pods (the replacement of a failed pod, the next index when completions
   exceed parallelism) are bound into free slots, a replacement into the slot its index
   had, never asked for anew. On each change of the Job or of its pods the free slots
   beyond what it still needs (min(parallelism, completions - succeeded)) are given back,
   a node's share once no slot the Job keeps or uses is on it (`_release_slots`).

   **Growth** (Kueue's elastic Jobs, as workload slices): a running Job whose parallelism
   is raised needs more slots than it keeps. The missing ones are one more workload in the
   queue, at the Job's own place (its priority and creation order: `_order`; its own key,
   `growth_key`, beside its pods' group): asked as one unit (all or nothing, the pods'
   shape, the Job's walltime left) with the same reservation and backfill rules
   (`_grow`); the pods it waits for say so. The FluxJob stays Running (its pods run)
   with the POSITION of the growth and a REASON starting ``scaling up:``; PODS counts the
   Job's pods now. Once allocated, the slots join the Job's ledger as a second allocation
   (`ClusterState.grow_slots`) and its waiting pods are bound into them; from then on they
   are kept and given back as any other slot, each through its own allocation. Lowering
   parallelism again while the growth waits drops it: it is computed anew on every pass
   from the Job and its ledger, and nothing is held while it waits (a reservation is made
   again each pass). The growth is counted from the Job's ledger, so it is asked once the
   Job's first pods are bound (raised while it is Admitted, its pods not yet made, the
   lowest indexes are bound into the allocation it was admitted with, which makes the
   ledger, and the others are its growth: scheduling_cycle.py `_prepare_held`).
4. **Finished** (or **Failed**) when the Job has the Complete (Failed) condition; what is
   still held is given back (the ledger's free slots, then each pod's share as it ends).

A Job its owner suspends again gives its allocation back (the Job controller deletes its
pods; an allocation not yet used is cancelled here) and is Queued again once none of it is
held. A deleted Job's FluxJob is deleted and its unused allocation cancelled. A binder that
takes over (reconcile) drops unused held allocations and the reservation (the leader's
record of them is cancelled there) and asks again for Jobs still suspended, in the same
order: order, limits and admission are computed from the objects, so a restart admits
nothing twice (an admitted Job is no longer suspended).

When the FluxJob CRD is not installed the Jobs are still admitted; only the records are
missing (logged once).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import orjson
from fluxnode.agent.broker.client import RPCError
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.api_client import status_message
from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.fluxjob import FluxJob, FluxJobError, PriorityClasses
from fluxnode.scheduler.binder.fluxjob_writer import FluxJobWriter
from fluxnode.scheduler.binder.http_writer import HttpWriter, Write
from fluxnode.scheduler.binder.job_shape import JobShapeError, job_pod_count
from fluxnode.scheduler.binder.job_slots import slots_needed
from fluxnode.scheduler.binder.podgroup import GroupKey, job_owner
from fluxnode.scheduler.binder.queue import (
    creation_time,
    reserved_reason,
    rfc3339,
    submitted,
    workload_key,
)
from fluxnode.scheduler.binder.queue_limits import Ask, QueueLimits, QueueLimitsError
from fluxnode.scheduler.binder.scheduling_cycle import SchedulingCycle, WholeRequest
from fluxnode.scheduler.binder.walltime import job_walltime, walltime_left
from fluxnode.scheduler.binder.workload_queue import JobAsk, QueuedJob
from kubernetes.client import BatchV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder")

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
RESUMES_PER_PIPELINE = 64  # Job resumes sent back to back on one connection (`_drain_resumes`)


@dataclass
class Tracked:
    """One opted-in Job and what the binder holds for it."""

    job: dict
    record: FluxJob | None = None
    created: bool = False  # its FluxJob's create was asked for (fluxjob_writer.py)
    written: dict | None = None  # the status last asked for
    allocation: int | None = None  # the leader's allocation id while the Job holds one
    unusable: str = ""  # why no FluxJob can be made (reported once)
    # admitted, running or ended, and its status written as of its Job and its pods: a pass
    # skips it until one of them changes (a burst runs a pass per handful of events)
    quiet: bool = False
    resuming: bool = False  # allocated, its unsuspension in flight (a worker's; `resumed`)

    @property
    def key(self) -> GroupKey:
        meta = self.job["metadata"]
        return GroupKey(meta.get("namespace") or "default", "job",
                        f"{meta['name']}.{meta.get('uid', '')}")


def _condition(job: dict) -> str | None:
    """"Complete" or "Failed" when the Job has ended, else None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c["type"]
    return None


def _ask(record: FluxJob, pods: int | None = None) -> Ask:
    """What a Job holds once admitted, as queue limits count it: every pod's graph slot
    (whole cores, GPUs) and its memory request (`pods` of them; None: the record's)."""
    pods, slot = record.spec.pods if pods is None else pods, record.spec.slot
    return Ask(pods * slot.cores, pods * slot.gpus, pods * record.spec.requests.memory_bytes)


def growth_key(key: GroupKey) -> GroupKey:
    """The queue's key of a running Job's growth (its own entry in the walk, beside its
    pods' group, which has the Job's key)."""
    return GroupKey(key.namespace, "job-growth", key.name)


def _older(new: dict, old: dict) -> bool:
    """`new` is an earlier version of `old` (the API emulator's and etcd's resourceVersions
    grow; one that is not a number is never called older)."""
    try:
        return int(new["metadata"]["resourceVersion"]) < int(old["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


class FluxJobLoop:
    def __init__(self, ctx: BinderContext, scheduling: SchedulingCycle, batch: BatchV1Api,
                 custom: CustomObjectsApi, post: Callable[[tuple], None]):
        self.ctx, self.scheduling = ctx, scheduling
        self.post = post  # hands a worker's outcome to the loop (the binder's inbox)
        self.batch, self.custom = batch, custom
        self.jobs: dict[tuple[str, str], Tracked] = {}
        self.dirty = False
        self._no_crd_logged = False
        self.priority_classes: dict[str, dict] = {}  # name -> PriorityClass (the informer's)
        self.limits = QueueLimits()
        self._used: dict[str, Ask] = {}  # queue -> what its admitted Jobs hold, this walk
        # Jobs to resume by chain (`_resume_in_order`), in the order admitted; the first of
        # each is being resumed by a worker
        self._resume_queues: dict[tuple, deque[tuple]] = {}
        self._resume_lock = threading.Lock()
        # Job uid -> pod uid -> node, of its live pods bound to a node (kept from the pod
        # events, not a scan of every pod per pass), and the Jobs whose pods changed since
        self._bound: dict[str, dict[str, str]] = {}
        self._touched: set[str] = set()
        # what a pass visits: the Jobs not quiet (in the order they came) and, by uid, those
        # whose pods changed; a walk of every tracked Job per pass was most of the loop's
        # CPU in bench/workloads.py's burst of 1,000 (a pass per handful of events)
        self._visit: dict[tuple[str, str], None] = {}
        self._holding: set[GroupKey] | None = None
        self._by_uid: dict[str, tuple[str, str]] = {}
        # Jobs whose slots to look at (`_release_slots`): their Job or their pods changed
        self._slots_due: set[tuple[str, str]] = set()
        # records are written by the bind workers, not on the loop thread (fluxjob_writer.py)
        self.writer = FluxJobWriter(ctx.writer, ctx.pool, self._delete_record, self._no_crd)

    # -- events (every replica) -----------------------------------------------------

    def apply(self, kind: str, obj) -> None:
        """A Job informer event (the informer lists only Jobs with the queue label)."""
        if kind == "SYNC":
            seen = {self._id(o) for o in obj}
            for key in [k for k in self.jobs if k not in seen]:
                self._gone(self.jobs.pop(key))
            for o in obj:
                self.apply("MODIFIED", o)
            return
        key = self._id(obj)
        if kind == "DELETED":
            tracked = self.jobs.pop(key, None)
            if tracked is not None:
                self._gone(tracked)
        else:
            tracked = self.jobs.get(key)
            if tracked is None or tracked.job["metadata"].get("uid") != obj["metadata"].get("uid"):
                self.jobs[key] = Tracked(obj)
                self._by_uid[obj["metadata"].get("uid", "")] = key
            elif not _older(obj, tracked.job):  # not an event from before our own patch
                tracked.job = obj
                tracked.quiet = False
            self._visit[key] = None
            self._slots_due.add(key)
        self.dirty = True

    def pod(self, kind: str, obj) -> None:
        """A pod informer event: the bound pods of each Job, by the Job's uid."""
        if kind == "SYNC":
            self._bound = {}
            for o in obj:
                self.pod("MODIFIED", o)
            for tracked in self.jobs.values():
                tracked.quiet = False
            self._visit.update(dict.fromkeys(self.jobs))
            self._slots_due.update(self.jobs)  # pods may have ended while not watched
            return
        meta = obj.get("metadata") or {}
        owner = job_owner(meta)  # a Job's pod names it as its controller (podgroup.py)
        if owner is None:
            return
        job = owner[1]
        uid = meta.get("uid") or ""
        node = (obj.get("spec") or {}).get("nodeName")
        pods = self._bound.get(job)
        if node and kind != "DELETED" and \
                (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            if pods is None:
                pods = self._bound[job] = {}
            if pods.get(uid) == node:
                return
            pods[uid] = node
        elif pods is not None and uid in pods:
            del pods[uid]
            if not pods:
                del self._bound[job]
        else:
            return
        self._touched.add(job)
        if job in self._by_uid:
            self._slots_due.add(self._by_uid[job])
        self.dirty = True

    def apply_priority_class(self, kind: str, obj) -> None:
        """A PriorityClass informer event: Jobs whose class was missing are recorded now."""
        if kind == "SYNC":
            self.priority_classes = {o["metadata"]["name"]: o for o in obj}
        elif kind == "DELETED":
            self.priority_classes.pop(obj["metadata"]["name"], None)
        else:
            self.priority_classes[obj["metadata"]["name"]] = obj
        self.dirty = True

    def apply_limits(self, kind: str, obj) -> None:
        """A queue-limits ConfigMap informer event (the informer lists that one name)."""
        if kind == "SYNC":
            obj = obj[0] if obj else None
        elif kind == "DELETED":
            obj = None
        try:
            self.limits = QueueLimits.from_configmap(obj)
        except QueueLimitsError as exc:
            log.warning("queue limits ignored (none apply): %s", exc)
            self.limits = QueueLimits()
        self.dirty = True

    @staticmethod
    def _id(job: dict) -> tuple[str, str]:
        meta = job.get("metadata") or {}
        return meta.get("namespace") or "default", meta.get("name") or ""

    def reconciled(self) -> None:
        """The cache was rebuilt from the leader: unused held allocations and reservations
        are gone (reconcile cancelled them)."""
        self.ctx.held.clear()
        for tracked in self.jobs.values():
            if tracked.allocation not in self.ctx.state.allocations:
                tracked.allocation = None
            tracked.quiet = False
        self._visit.update(dict.fromkeys(self.jobs))
        self._slots_due.update(self.jobs)
        # a Job deleted while no binder led: its kept slots go (its pods' shares as they end)
        tracked_keys = {t.key for t in self.jobs.values()}
        for key in [k for k in self.ctx.state.job_slots if k not in tracked_keys]:
            self.ctx.state.release_slots(key, None)
        self.dirty = True

    # -- the loop's step (leader only) ------------------------------------------------

    def run(self) -> None:
        """(Before each scheduling cycle.) Retry record writes; a change to the Jobs makes
        the cycle walk the queue, whose Jobs come from `queued`."""
        self.writer.retry()
        self._release_slots()
        if self.dirty:
            self.dirty = False
            self.ctx.state.changed = True

    def _release_slots(self) -> None:
        """(Before the scheduling cycle, which sends the cancels.) Give back the free slots
        of the running Jobs whose Job or pods changed beyond what each still needs
        (job_slots.py); a suspended or ended Job keeps none."""
        due, self._slots_due = self._slots_due, set()
        state = self.ctx.state
        for key in due:
            tracked = self.jobs.get(key)
            if tracked is None or tracked.key not in state.job_slots:
                continue
            job = tracked.job
            if _condition(job) is not None or (job.get("spec") or {}).get("suspend"):
                state.release_slots(tracked.key, None)
            else:
                slots = state.job_slots[tracked.key]
                state.release_slots(tracked.key, slots_needed(job, slots.succeeded))

    def queued(self) -> list[QueuedJob]:
        """(The scheduling cycle, once per walk: workload_queue.py `JobSource`.) Bring the
        Jobs' records up to date (ended, admitted, running) and return the waiting ones in
        order, each with the call that asks for it."""
        touched, self._touched = self._touched, set()
        waiting: list[Tracked] = []
        growing: list[tuple[Tracked, int]] = []  # running Jobs short of slots, how many
        self._used = used = {}  # queue -> what its admitted Jobs hold
        if self.limits.limits:  # every admitted Job counts against its queue's limit
            visit = list(self.jobs.values())
        else:
            keys = {**self._visit, **{self._by_uid[u]: None for u in touched if u in self._by_uid}}
            visit = [self.jobs[k] for k in keys if k in self.jobs]
        for tracked in visit:
            if tracked.quiet and tracked.job["metadata"].get("uid") not in touched:
                # settled, but still counted against its queue's limit (when it has one:
                # bench/workloads.py, no limits, spent half the loop's CPU summing these)
                if self.limits.limits and tracked.record is not None \
                        and _condition(tracked.job) is None \
                        and not (tracked.job.get("spec") or {}).get("suspend"):
                    self._holds(tracked, used)
                continue
            if (tracked.record is None or tracked.record.unqueued) and not self._record(tracked):
                continue
            if tracked.resuming:
                self._holds(tracked, used)  # allocated: counted against its queue
                continue  # still suspended until its patch lands: `resumed` goes on
            ended = _condition(tracked.job)
            if ended is not None:
                self._release(tracked)
                self._status(tracked, "Finished" if ended == "Complete" else "Failed")
                tracked.quiet = True
            elif (tracked.job.get("spec") or {}).get("suspend"):
                waiting.append(tracked)
            else:
                self._holds(tracked, used)
                missing = self._missing(tracked)
                if missing:  # grown while it runs: asked for at its place (`_grow`)
                    growing.append((tracked, missing))
                    continue
                self._running(tracked)
                tracked.quiet = True
        for tracked in visit:  # (kept until here: a pass that fails visits them again)
            # a Job being resumed is visited again when its outcome comes back (`resumed`):
            # kept, the Jobs waiting for their patch were walked on every pass (quadratic in
            # bench/workloads.py's burst, hundreds waiting at once)
            if tracked.quiet or tracked.resuming:
                self._visit.pop(self._id(tracked.job), None)
            else:
                self._visit[self._id(tracked.job)] = None
        self._holding = None  # the groups with allocations, looked at once per pass
        out = [QueuedJob(self._order(t), t.key, partial(self._queued, t),
                         alone=t.record.spec.queue in self.limits.limits) for t in waiting]
        out += [QueuedJob(self._order(t), growth_key(t.key), partial(self._grow, t, missing),
                          alone=t.record.spec.queue in self.limits.limits)
                for t, missing in growing]
        out.sort(key=lambda q: q.order)
        return out

    def _running(self, tracked: Tracked, **growth) -> None:
        """An admitted Job's record: Admitted until all its pods are bound, then Running
        (`growth`: the position and reason of the slots it waits for after it grew)."""
        pods = self._bound.get(tracked.job["metadata"].get("uid")) or {}
        try:
            now = job_pod_count(tracked.job.get("spec") or {})
        except JobShapeError:
            now = tracked.record.spec.pods
        phase = "Running" if len(pods) >= min(now, tracked.record.spec.pods) else "Admitted"
        self._status(tracked, phase, bound=len(pods),
                     nodes=hostlist.encode(sorted(set(pods.values()))),
                     allocation=tracked.allocation,
                     pods=None if now == tracked.record.spec.pods else now, **growth)

    # -- a running Job that grew (its parallelism raised) --------------------------------

    def _missing(self, tracked: Tracked) -> int:
        """Slots a running Job needs beyond those its ledger keeps (job_slots.py), and the
        ledger told so (its waiting pods say it); 0 without a ledger (its first pods not
        bound yet)."""
        slots = self.ctx.state.job_slots.get(tracked.key)
        if slots is None:
            return 0
        slots.asking = slots.missing(slots_needed(tracked.job, slots.succeeded))
        return slots.asking

    def _grow(self, tracked: Tracked, missing: int, position: int, op: str) -> JobAsk | None:
        """A running Job short of `missing` slots, at `position`: say what to ask for them as
        one unit (all or nothing, its pods' shape, the Job's walltime left), as `_queued`
        does for a whole Job; its running pods keep what they hold whatever the answer."""
        spec, key = tracked.record.spec, tracked.key
        said = f"scaling up: {missing} more pods wait for their slots"
        held = self.limits.held(spec.queue, self._used.get(spec.queue, Ask()),
                                _ask(tracked.record, missing))
        if held is not None:
            self._running(tracked, position=position, reason=f"{said}; {held}")
            return None
        template = (tracked.job.get("spec") or {}).get("template") or {}
        name = tracked.job["metadata"]["name"]
        request = self.scheduling.whole_request(
            key, template, spec.slot, missing, op=op,
            duration=walltime_left(tracked.job, time.time()),
            who=f"Job {key.namespace}/{name} (its growth)")
        if isinstance(request, str):
            self._running(tracked, position=position, reason=f"{said}; {request}")
            return None
        return JobAsk(growth_key(key), request.payload, request.who,
                      partial(self._grown, tracked, position, request, said))

    def _grown(self, tracked: Tracked, position: int, request: WholeRequest, said: str,
               reply: dict | RPCError) -> dict | None:
        """The service's reply for a Job's growth: still waiting (the reason, or reserved
        with its START), or the slots joined to its ledger for its waiting pods."""
        answer = self.scheduling.whole_answer(request, reply)
        if isinstance(answer, str):
            self._running(tracked, position=position, reason=f"{said}; {answer}")
            return None
        if answer.get("status") == "RESERVED":
            start = answer.get("start")
            self._running(tracked, position=position,
                          start=rfc3339(start) if start is not None else "",
                          reason=f"{said}; {reserved_reason(start)}")
            return answer
        key = tracked.key
        if not self.ctx.state.grow_slots(key, answer, request.payload["slots"]):
            self.ctx.cancel(answer["id"], None)  # its ledger went meanwhile
            return None
        nodes = hostlist.encode(sorted({n["hostname"] for n in answer.get("nodes") or []}))
        log.info("Job %s/%s grew by %d slots: allocation %d on %s", key.namespace,
                 tracked.job["metadata"]["name"], request.count, answer["id"], nodes)
        self._running(tracked)
        self._visit[self._id(tracked.job)] = None  # its record follows its pods again
        self.dirty = True
        return answer

    def _holds(self, tracked: Tracked, used: dict[str, Ask]) -> None:
        """Count what an admitted Job holds against its queue's limit (a queue without
        one is never asked about it: `QueueLimits.held`)."""
        queue = tracked.record.spec.queue
        if queue in self.limits.limits:
            slots = self.ctx.state.job_slots.get(tracked.key)  # with its growth, when it grew
            pods = max(tracked.record.spec.pods, slots.held() if slots is not None else 0)
            used[queue] = used.get(queue, Ask()) + _ask(tracked.record, pods)

    @staticmethod
    def _order(tracked: Tracked):
        meta, created = tracked.job["metadata"], creation_time(tracked.job)
        return workload_key(tracked.record.spec.priority, created,
                            f"{meta.get('namespace') or 'default'}/{meta['name']}",
                            submitted(tracked.job, created))

    def _queued(self, tracked: Tracked, position: int, op: str) -> JobAsk | None:
        """A suspended Job at `position` in the queue: give back what it holds, or say what
        to ask for its whole set with `op` (``allocate_orelse_reserve`` until the pass has
        its head); the walk asks it (with the workloads around it, in one round trip) and
        hands the reply to `_answered`. None: not asked (its record says why)."""
        ctx, key, used = self.ctx, tracked.key, self._used
        if tracked.allocation is not None:  # suspended again by its owner
            self._release(tracked)
            self._holding = None
        if self._holding is None:
            self._holding = {a.group for a in ctx.state.allocations.values()}
        if key in self._holding:
            self._status(tracked, "Queued", position=position,
                         reason="waiting for its pods to end")
            return None  # its pods still hold their shares
        spec = tracked.record.spec
        ask = _ask(tracked.record)
        held = self.limits.held(spec.queue, used.get(spec.queue, Ask()), ask)
        if held is not None:
            self._status(tracked, "Queued", position=position, reason=held)
            return None
        template = (tracked.job.get("spec") or {}).get("template") or {}
        # within the walk, a Job asking exactly what a workload before it asked without
        # getting it is told the same, not asked again (workload_queue.SameRequest)
        request = self.scheduling.whole_request(
            key, template, spec.slot, spec.pods, op=op,
            duration=job_walltime(tracked.job.get("spec") or {}),
            who=f"Job {key.namespace}/{tracked.job['metadata']['name']}")
        if isinstance(request, str):
            self._status(tracked, "Queued", position=position, reason=request)
            return None
        return JobAsk(key, request.payload, request.who,
                      partial(self._answered, tracked, position, request))

    def _answered(self, tracked: Tracked, position: int, request: WholeRequest,
                  reply: dict | RPCError) -> dict | None:
        """The service's reply for a Job `_queued` had asked: Queued with the reason,
        Reserved, or held and resumed. Returns the answer when allocated or reserved."""
        ctx, key, used = self.ctx, tracked.key, self._used
        spec = tracked.record.spec
        answer = self.scheduling.whole_answer(request, reply)
        if isinstance(answer, str):
            self._status(tracked, "Queued", position=position, reason=answer)
            return None
        if answer.get("status") == "RESERVED":
            start = answer.get("start")
            self._status(tracked, "Reserved", position=position,
                         start=rfc3339(start) if start is not None else "",
                         reason=reserved_reason(start))
            return answer
        used[spec.queue] = used.get(spec.queue, Ask()) + _ask(tracked.record)
        # Held from now on. The patch that resumes the Job is a bind worker's: on the loop it
        # was a round trip per Job that held up every other decision (bench/workloads.py:
        # ~30% of the loop's time at 500 Jobs); the outcome comes back through `resumed`.
        ctx.held[key] = answer
        tracked.allocation, tracked.resuming = answer["id"], True
        self._resume_in_order((tracked, tracked.job["metadata"]["name"], key.namespace, answer),
                              (spec.priority, spec.slot, spec.pods))
        return answer

    def _resume_in_order(self, item: tuple, chain: tuple) -> None:
        """Have a bind worker resume the Job after every Job of its `chain` (its priority
        and shape: Jobs that compete for the same place in the queue) admitted before it:
        a chain's patches are sent one after the other, so the API server (and its
        watchers: the Job controller, the fault checker's `order`) sees equal Jobs resumed in
        queue order. Patched by several workers at once, two equal Jobs of one pass landed
        in the workers' order; Jobs of different chains are still resumed in parallel (one
        chain for all would halve the admitted rate: bench/workloads.py)."""
        with self._resume_lock:
            queued = self._resume_queues.setdefault(chain, deque())
            queued.append(item)
            if len(queued) > 1:
                return  # the worker draining this chain takes it
        self.ctx.pool.submit(self._drain_resumes, chain)

    def _drain_resumes(self, chain: tuple) -> None:
        """(A bind worker.) Resume the chain's Jobs in order until none is left: those
        queued when it looks, up to RESUMES_PER_PIPELINE, pipelined on one connection
        (http_writer.py: applied in the order sent, without a round trip each; one at a
        time, a chain resumed one Job per round trip to a busy API server, which bounded
        bench/workloads.py's burst at 20-39 workloads/s), then the next."""
        while True:
            with self._resume_lock:
                items = list(itertools.islice(self._resume_queues[chain], RESUMES_PER_PIPELINE))
            self._resume(items)
            with self._resume_lock:
                queued = self._resume_queues[chain]
                for _ in items:
                    queued.popleft()
                if not queued:
                    del self._resume_queues[chain]
                    return

    def _resume(self, items: list[tuple]) -> None:
        """(A bind worker.) Patch each Job's ``spec.suspend`` to false, in order; each outcome
        goes to the loop. The patch means the same sent twice, so pipelining it is safe
        (http_writer.py); without the plain writer (an HTTP proxy) they go one by one."""
        api = self.ctx.writer.api
        if isinstance(api, HttpWriter):
            outcomes = api.pipeline([
                Write("PATCH", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                      {"spec": {"suspend": False}}, "application/merge-patch+json")
                for _tracked, name, namespace, _answer in items])
        else:
            outcomes = []
            for _tracked, name, namespace, _answer in items:
                try:
                    outcomes.append(kube_raw.call(self.batch.patch_namespaced_job, name,
                                                  namespace, {"spec": {"suspend": False}}))
                except Exception as exc:
                    outcomes.append(exc)
        for (tracked, _name, _namespace, answer), outcome in zip(items, outcomes, strict=True):
            job, error = None, None
            if isinstance(outcome, ApiException):
                error = status_message(outcome)
            elif isinstance(outcome, Exception):  # no answer: the loop must still hear of it
                error = f"{type(outcome).__name__}: {outcome}"
            else:
                try:
                    job = orjson.loads(outcome) if isinstance(outcome, bytes) else outcome
                except ValueError as exc:
                    error = f"the API server's answer is not JSON: {exc}"
            self.post(("fluxjob", tracked, job, error, answer))

    def resumed(self, tracked: Tracked, job: dict | None, error: str | None,
                answer: dict) -> None:
        """(The loop.) A Job's unsuspension came back: Admitted, or its allocation given
        back and the Job Queued again (asked anew on the next pass)."""
        tracked.resuming = False
        self.dirty = True
        self._visit[self._id(tracked.job)] = None
        if self.jobs.get(self._id(tracked.job)) is not tracked or \
                tracked.allocation != answer["id"]:
            return  # gone, replaced, or its allocation dropped meanwhile (reconcile)
        key = tracked.key
        if error is not None:
            self._release(tracked)
            self._status(tracked, "Queued", reason=f"cannot resume the Job: {error}")
            return
        # the Job as patched: the loop must not take it for suspended again before the
        # informer brings the patch back
        if job is not None and not _older(job, tracked.job):
            tracked.job = job
        nodes = hostlist.encode(sorted({n["hostname"] for n in answer.get("nodes") or []}))
        log.info("admitted Job %s/%s: allocation %d on %s", key.namespace,
                 tracked.job["metadata"]["name"], answer["id"], nodes)
        self._status(tracked, "Admitted", nodes=nodes, allocation=answer["id"])

    def _release(self, tracked: Tracked) -> None:
        """Cancel the allocation held for a Job whose pods have not taken it yet (pods that
        did free their shares as they end)."""
        if self.ctx.held.pop(tracked.key, None) is not None and tracked.allocation is not None:
            self.ctx.cancel(tracked.allocation, None)
        tracked.allocation = None

    def _gone(self, tracked: Tracked) -> None:
        self._by_uid.pop(tracked.job["metadata"].get("uid", ""), None)
        self._visit.pop(self._id(tracked.job), None)
        self._release(tracked)
        self.ctx.state.release_slots(tracked.key, None)
        if tracked.created:
            self.writer.delete(self._id(tracked.job))
        self.dirty = True

    def _delete_record(self, namespace: str, name: str) -> None:
        """(A writer thread.) Delete a FluxJob; ApiException for the writer (404 is fine)."""
        kube_raw.call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace,
                      PLURAL, name)

    def _no_crd(self) -> None:
        """(A writer thread.) A create found no FluxJob CRD: said once."""
        if not self._no_crd_logged:
            self._no_crd_logged = True
            log.warning("the FluxJob CRD is not installed: Jobs are admitted without "
                        "their records (kubectl apply -k daemonset/workloads/)")

    # -- the record -------------------------------------------------------------------

    def _record(self, tracked: Tracked) -> bool:
        """Make the Job's record; False when it is not queued (fluxjob.py `unqueued`: its
        record says why, with a Warning Event on the Job, until its PriorityClass exists)."""
        try:
            record = FluxJob.from_job(
                tracked.job, PriorityClasses.from_objects(list(self.priority_classes.values())))
        except FluxJobError as exc:
            if tracked.unusable != str(exc):
                tracked.unusable = str(exc)
                log.warning("not queued: %s", exc)
            return False
        if tracked.created and not record.unqueued:  # written without its priority: anew
            self.writer.delete((record.namespace, record.name))
            tracked.created, tracked.written = False, None
        if not tracked.created:
            self.writer.create((record.namespace, record.name), record.to_object())
            tracked.created = True
        tracked.record = record
        if not record.unqueued:
            return True
        self._status(tracked, "Queued", reason=record.unqueued)
        if tracked.unusable != record.unqueued:
            tracked.unusable = record.unqueued
            log.warning("Job %s/%s %s", record.namespace, record.name, record.unqueued)
            meta = tracked.job["metadata"]
            self.ctx.pool.submit(self.ctx.writer.object_event, {
                "apiVersion": "batch/v1", "kind": "Job", "namespace": record.namespace,
                "name": record.name, "uid": meta.get("uid") or ""},
                "Warning", "PriorityClassNotFound", record.unqueued, "Queueing")
        return False

    def _status(self, tracked: Tracked, phase: str, *, position: int | None = None,
                bound: int = 0, nodes: str = "", reason: str = "",
                allocation: int | None = None, start: str = "",
                pods: int | None = None) -> None:
        record = tracked.record
        record.status.phase, record.status.position = phase, position
        record.status.pods = pods
        record.status.start = start
        record.status.bound, record.status.nodes = bound, nodes
        record.status.reason, record.status.allocation = reason, allocation
        body = record.status_patch()
        if not tracked.created or body == tracked.written:
            return
        # written by a worker; Admitted, and each count of pods bound before Running, settles
        # (fluxjob_writer.py): a Job whose pods are bound at once gets Running written alone
        self.writer.status((record.namespace, record.name), body, settle=phase == "Admitted")
        tracked.written = body
