"""The FluxJob loop: opted-in Jobs admitted as a whole (issue 30, "Workloads, not pods").

The admission webhook stores a Job labelled ``fluxnode.io/queue`` suspended, so the Job
controller creates none of its pods. The binder's loop (leader only, before each scheduling
cycle) then takes each such Job through these steps:

1. **Queued**: it writes the Job's FluxJob (fluxjob.py; named as the Job, owned by it) and
   asks the leader's scheduler for all of its pods' slots in one request
   (`SchedulingCycle.ask_whole`), for the Job's walltime (walltime.py; none: until
   cancelled). While they do not fit, the FluxJob stays Queued with the reason
   (``busy: ...``, or ``unsatisfiable: ...`` in the words pods are told) and its position
   among the waiting; it is asked again whenever the cluster changes.

   **Order and reservation** (as Fluxion's queue manager with reservation depth 1, i.e.
   EASY backfill): waiting Jobs are asked in order of priority (their pods'
   PriorityClass, which the binder watches), then creationTimestamp, then name
   (`queue.workload_key`); POSITION is that order. Until one is reserved, each is asked
   with ``allocate_orelse_reserve``: the first that does not fit (the head) is
   **Reserved**, its resources booked from the earliest time the walltimes of what holds
   them end; its FluxJob says that START (RFC 3339 UTC), or, when something it waits
   for has no walltime, that no start is known. Jobs after it are asked with plain
   ``allocate``, so the planner lets them start only where they end before the head's
   start or use what the head does not need. The reservation is cancelled and made again
   on every pass (as queue.py does for pod groups): the head of the next pass may differ.

   **Queue limits** (queue_limits.py, a ConfigMap the binder watches): a Job that would
   take its queue's admitted Jobs past a limit stays Queued saying so and is not asked.
2. **Admitted**: the allocation is held for the Job's group (``BinderContext.held``, keyed
   as podgroup.py keys a Job's pods) and the Job is unsuspended. Its pods, once all there,
   are bound into that allocation by the scheduling cycle (an Indexed Job's index i into
   slot i); nothing is asked again.
3. **Running** once all its pods are bound; pods that end free their share as any group's.
4. **Finished** (or **Failed**) when the Job has the Complete (Failed) condition; what is
   still held is given back.

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

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.api_client import status_message
from fluxnode.agent.kube.node_affinity import NodeAffinityError, pod_placement
from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.fluxjob import FluxJob, FluxJobError, PriorityClasses
from fluxnode.scheduler.binder.fluxjob_writer import FluxJobWriter
from fluxnode.scheduler.binder.podgroup import JOB_UID_LABELS, GroupKey
from fluxnode.scheduler.binder.queue import (
    creation_time,
    rfc3339,
    submitted,
    workload_key,
)
from fluxnode.scheduler.binder.queue_limits import Ask, QueueLimits, QueueLimitsError
from fluxnode.scheduler.binder.scheduling_cycle import SchedulingCycle
from fluxnode.scheduler.binder.walltime import job_walltime
from kubernetes.client import BatchV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder")

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"


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


def _ask(record: FluxJob) -> Ask:
    """What a Job holds once admitted, as queue limits count it: every pod's graph slot
    (whole cores, GPUs) and its memory request."""
    pods, slot = record.spec.pods, record.spec.slot
    return Ask(pods * slot.cores, pods * slot.gpus, pods * record.spec.requests.memory_bytes)



def _request(template: dict, slot, pods: int, duration: int | None) -> tuple | None:
    """What decides whether a Job's whole request fits: where its pods may go, their slot,
    how many, for how long. Two Jobs with equal requests get equal answers from one state
    of the cluster, so within a pass a Job whose equal was refused is not asked again: the
    cluster changing between two asks (a pod ending, the leader's graph filling in after a
    restart) must not admit a Job before an equal one queued ahead of it (the workload fault
    checker's `order`). None when the template's placement cannot be read (never shared)."""
    try:
        return pod_placement(template), slot, pods, duration
    except NodeAffinityError:
        return None


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
        # Jobs admitted, their resume patches not yet sent, in admission order (_queue_resume)
        self._lane: deque[tuple[Tracked, str, str, dict]] = deque()
        self._lane_lock = threading.Lock()
        self._lane_busy = False
        # this pass's refused requests (`_request`) -> the reason an equal later Job is given
        self._refused: dict[tuple, str] = {}
        self.reservation: int | None = None  # the head's reservation made this pass
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
            return
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        job = next((labels[k] for k in JOB_UID_LABELS if labels.get(k)), None)
        if job is None:
            return
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
        self.reservation = None
        for tracked in self.jobs.values():
            if tracked.allocation not in self.ctx.state.allocations:
                tracked.allocation = None
            tracked.quiet = False
        self._visit.update(dict.fromkeys(self.jobs))
        self.dirty = True

    # -- the loop's step (leader only) ------------------------------------------------

    def run(self) -> None:
        self.writer.retry()
        if not (self.dirty or self.ctx.state.changed):
            return
        self.dirty = False
        if self.reservation is not None:  # made again below, for this pass's head
            self.ctx.cancel(self.reservation, None)
            self.reservation = None
        touched, self._touched = self._touched, set()
        self._refused = {}
        waiting: list[Tracked] = []
        used: dict[str, Ask] = {}  # queue -> what its admitted Jobs hold
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
                pods = self._bound.get(tracked.job["metadata"].get("uid")) or {}
                phase = "Running" if len(pods) >= tracked.record.spec.pods else "Admitted"
                self._status(tracked, phase, bound=len(pods),
                             nodes=hostlist.encode(sorted(set(pods.values()))),
                             allocation=tracked.allocation)
                tracked.quiet = True
        for tracked in visit:  # (kept until here: a pass that fails visits them again)
            if tracked.quiet:
                self._visit.pop(self._id(tracked.job), None)
            else:
                self._visit[self._id(tracked.job)] = None
        waiting.sort(key=self._order)
        self._holding = None  # the groups with allocations, looked at once per pass
        for position, tracked in enumerate(waiting, 1):
            self._queued(tracked, position, used)

    def _holds(self, tracked: Tracked, used: dict[str, Ask]) -> None:
        """Count what an admitted Job holds against its queue's limit (a queue without
        one is never asked about it: `QueueLimits.held`)."""
        queue = tracked.record.spec.queue
        if queue in self.limits.limits:
            used[queue] = used.get(queue, Ask()) + _ask(tracked.record)

    @staticmethod
    def _order(tracked: Tracked):
        meta, created = tracked.job["metadata"], creation_time(tracked.job)
        return workload_key(tracked.record.spec.priority, created,
                            f"{meta.get('namespace') or 'default'}/{meta['name']}",
                            submitted(tracked.job, created))

    def _queued(self, tracked: Tracked, position: int, used: dict[str, Ask]) -> None:
        """A suspended Job: give back what it holds, or ask for its whole set (reserving
        it when it is the first that does not fit)."""
        ctx, key = self.ctx, tracked.key
        if tracked.allocation is not None:  # suspended again by its owner
            self._release(tracked)
            self._holding = None
        if self._holding is None:
            self._holding = {a.group for a in ctx.state.allocations.values()}
        if key in self._holding:
            self._status(tracked, "Queued", position=position,
                         reason="waiting for its pods to end")
            return  # its pods still hold their shares
        spec = tracked.record.spec
        ask = _ask(tracked.record)
        held = self.limits.held(spec.queue, used.get(spec.queue, Ask()), ask)
        if held is not None:
            self._status(tracked, "Queued", position=position, reason=held)
            return
        template = (tracked.job.get("spec") or {}).get("template") or {}
        duration = job_walltime(tracked.job.get("spec") or {})
        request = _request(template, spec.slot, spec.pods, duration)
        if request is not None and request in self._refused:  # an equal Job refused before
            self._status(tracked, "Queued", position=position, reason=self._refused[request])
            return
        op = "allocate" if self.reservation is not None else "allocate_orelse_reserve"
        answer = self.scheduling.ask_whole(key, template, spec.slot, spec.pods, op=op,
                                           duration=duration)
        if isinstance(answer, str):
            if request is not None:
                self._refused[request] = answer
            self._status(tracked, "Queued", position=position, reason=answer)
            return
        if answer.get("status") == "RESERVED":
            self.reservation = answer["id"]
            if request is not None:
                meta = tracked.job["metadata"]
                self._refused[request] = (
                    f"busy: asks what Job {meta.get('namespace') or 'default'}/{meta['name']}"
                    ", before it in the queue, asks, which does not fit now; will retry when "
                    "resources free up")
            start = answer.get("start")
            if start is None:
                self._status(tracked, "Reserved", position=position,
                             reason="reserved: its resources are booked for it, but something "
                             "holding them has no walltime (spec.activeDeadlineSeconds), so "
                             "no start time is known")
            else:
                self._status(tracked, "Reserved", position=position, start=rfc3339(start),
                             reason=f"reserved: its resources are booked for it from "
                             f"{rfc3339(start)}; Jobs after it may use them only if they end "
                             "by then")
            return
        used[spec.queue] = used.get(spec.queue, Ask()) + ask
        # Held from now on. The patch that resumes the Job is a bind worker's: on the loop it
        # was a round trip per Job that held up every other decision (bench/workloads.py:
        # ~30% of the loop's time at 500 Jobs); the outcome comes back through `resumed`.
        ctx.held[key] = answer
        tracked.allocation, tracked.resuming = answer["id"], True
        self._queue_resume(tracked, tracked.job["metadata"]["name"], key.namespace, answer)

    def _queue_resume(self, tracked: Tracked, name: str, namespace: str, answer: dict) -> None:
        """Resume Jobs in the order the queue admitted them, one patch at a time: two bind
        workers patching two Jobs at once could land them in either order, and the API
        server (so every watcher, and the workload fault checker's `order`) would see a
        Job resumed before one ahead of it. One lane on the bind workers: a worker drains
        the Jobs waiting, in order, while the loop goes on."""
        with self._lane_lock:
            self._lane.append((tracked, name, namespace, answer))
            if self._lane_busy:
                return
            self._lane_busy = True
        self.ctx.pool.submit(self._drain_lane)

    def _drain_lane(self) -> None:
        """(A bind worker.) Resume the queued Jobs in order until none is left."""
        while True:
            with self._lane_lock:
                if not self._lane:
                    self._lane_busy = False
                    return
                item = self._lane.popleft()
            self._resume(*item)

    def _resume(self, tracked: Tracked, name: str, namespace: str, answer: dict) -> None:
        """(A bind worker.) Patch the Job's ``spec.suspend`` to false; the outcome goes to
        the loop."""
        job, error = None, None
        try:
            job = kube_raw.call(self.batch.patch_namespaced_job, name, namespace,
                                {"spec": {"suspend": False}})
        except ApiException as exc:
            error = status_message(exc)
        except Exception as exc:  # no answer: the loop must still hear of it
            error = f"{type(exc).__name__}: {exc}"
        self.post(("fluxjob", tracked, job, error, answer))

    def resumed(self, tracked: Tracked, job: dict | None, error: str | None,
                answer: dict) -> None:
        """(The loop.) A Job's unsuspension came back: Admitted, or its allocation given
        back and the Job Queued again (asked anew on the next pass)."""
        tracked.resuming = False
        self.dirty = True
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
                allocation: int | None = None, start: str = "") -> None:
        record = tracked.record
        record.status.phase, record.status.position = phase, position
        record.status.start = start
        record.status.bound, record.status.nodes = bound, nodes
        record.status.reason, record.status.allocation = reason, allocation
        body = record.status_patch()
        if not tracked.created or body == tracked.written:
            return
        # written by a worker; a count of pods still being bound settles (fluxjob_writer)
        self.writer.status((record.namespace, record.name), body,
                           settle=phase == "Admitted" and bound > 0)
        tracked.written = body
