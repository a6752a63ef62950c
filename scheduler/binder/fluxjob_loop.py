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
from dataclasses import dataclass
from datetime import UTC, datetime

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.api_client import status_message
from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.fluxjob import FluxJob, FluxJobError, PriorityClasses
from fluxnode.scheduler.binder.podgroup import JOB_UID_LABELS, GroupKey
from fluxnode.scheduler.binder.queue import creation_time, workload_key
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
    created: bool = False  # its FluxJob exists
    written: dict | None = None  # the status last written
    allocation: int | None = None  # the leader's allocation id while the Job holds one
    unusable: str = ""  # why no FluxJob can be made (reported once)

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


def rfc3339(epoch: float) -> str:
    """Seconds since the Unix epoch as Kubernetes writes times (RFC 3339, UTC, seconds)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _older(new: dict, old: dict) -> bool:
    """`new` is an earlier version of `old` (the API emulator's and etcd's resourceVersions
    grow; one that is not a number is never called older)."""
    try:
        return int(new["metadata"]["resourceVersion"]) < int(old["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


class FluxJobLoop:
    def __init__(self, ctx: BinderContext, scheduling: SchedulingCycle, batch: BatchV1Api,
                 custom: CustomObjectsApi):
        self.ctx, self.scheduling = ctx, scheduling
        self.batch, self.custom = batch, custom
        self.jobs: dict[tuple[str, str], Tracked] = {}
        self.dirty = False
        self._no_crd_logged = False
        self.priority_classes: dict[str, dict] = {}  # name -> PriorityClass (the informer's)
        self.limits = QueueLimits()
        self.reservation: int | None = None  # the head's reservation made this pass

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
            elif not _older(obj, tracked.job):  # not an event from before our own patch
                tracked.job = obj
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
        self.dirty = True

    # -- the loop's step (leader only) ------------------------------------------------

    def run(self) -> None:
        if not (self.dirty or self.ctx.state.changed):
            return
        self.dirty = False
        if self.reservation is not None:  # made again below, for this pass's head
            self.ctx.cancel(self.reservation, None)
            self.reservation = None
        bound = self._bound_pods()
        waiting: list[Tracked] = []
        used: dict[str, Ask] = {}  # queue -> what its admitted Jobs hold
        for tracked in list(self.jobs.values()):
            if tracked.record is None and not self._record(tracked):
                continue
            ended = _condition(tracked.job)
            if ended is not None:
                self._release(tracked)
                self._status(tracked, "Finished" if ended == "Complete" else "Failed")
            elif (tracked.job.get("spec") or {}).get("suspend"):
                waiting.append(tracked)
            else:
                queue = tracked.record.spec.queue
                used[queue] = used.get(queue, Ask()) + _ask(tracked.record)
                count, nodes = bound.get(tracked.job["metadata"].get("uid"), (0, set()))
                phase = "Running" if count >= tracked.record.spec.pods else "Admitted"
                self._status(tracked, phase, bound=count, nodes=hostlist.encode(sorted(nodes)),
                             allocation=tracked.allocation)
        waiting.sort(key=self._order)
        for position, tracked in enumerate(waiting, 1):
            self._queued(tracked, position, used)

    @staticmethod
    def _order(tracked: Tracked):
        meta = tracked.job["metadata"]
        return workload_key(tracked.record.spec.priority, creation_time(tracked.job),
                            f"{meta.get('namespace') or 'default'}/{meta['name']}")

    def _queued(self, tracked: Tracked, position: int, used: dict[str, Ask]) -> None:
        """A suspended Job: give back what it holds, or ask for its whole set (reserving
        it when it is the first that does not fit)."""
        ctx, key = self.ctx, tracked.key
        if tracked.allocation is not None:  # suspended again by its owner
            self._release(tracked)
        if any(a.group == key for a in ctx.state.allocations.values()):
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
        op = "allocate" if self.reservation is not None else "allocate_orelse_reserve"
        answer = self.scheduling.ask_whole(key, template, spec.slot, spec.pods, op=op,
                                           duration=job_walltime(tracked.job.get("spec") or {}))
        if isinstance(answer, str):
            self._status(tracked, "Queued", position=position, reason=answer)
            return
        if answer.get("status") == "RESERVED":
            self.reservation = answer["id"]
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
        try:
            # the Job as patched: the loop must not take it for suspended again before the
            # informer brings the patch back
            tracked.job = kube_raw.call(self.batch.patch_namespaced_job,
                                        tracked.job["metadata"]["name"], key.namespace,
                                        {"spec": {"suspend": False}}) or tracked.job
        except ApiException as exc:
            ctx.cancel(answer["id"], None)
            self._status(tracked, "Queued", position=position,
                         reason=f"cannot resume the Job: {status_message(exc)}")
            return
        used[spec.queue] = used.get(spec.queue, Ask()) + ask
        ctx.held[key] = answer
        tracked.allocation = answer["id"]
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
        self._release(tracked)
        if tracked.created:
            meta = tracked.job["metadata"]
            try:
                kube_raw.call(self.custom.delete_namespaced_custom_object, GROUP, VERSION,
                              meta.get("namespace") or "default", PLURAL, meta["name"])
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("cannot delete FluxJob %s/%s: %s", meta.get("namespace"),
                                meta["name"], status_message(exc))
        self.dirty = True

    # -- the record -------------------------------------------------------------------

    def _record(self, tracked: Tracked) -> bool:
        try:
            tracked.record = FluxJob.from_job(
                tracked.job, PriorityClasses.from_objects(list(self.priority_classes.values())))
        except FluxJobError as exc:
            if tracked.unusable != str(exc):
                tracked.unusable = str(exc)
                log.warning("not queued: %s", exc)
            return False
        try:
            kube_raw.call(self.custom.create_namespaced_custom_object, GROUP, VERSION,
                          tracked.record.namespace, PLURAL, tracked.record.to_object())
            tracked.created = True
        except ApiException as exc:
            if exc.status == 409:
                tracked.created = True  # ours from before a restart or a takeover
            elif exc.status == 404:
                if not self._no_crd_logged:
                    log.warning("the FluxJob CRD is not installed: Jobs are admitted without "
                                "their records (kubectl apply -k daemonset/workloads/)")
                    self._no_crd_logged = True
            else:
                log.warning("cannot create FluxJob %s/%s: %s", tracked.record.namespace,
                            tracked.record.name, status_message(exc))
        return True

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
        # a merge patch: fields now unset are written as null so they go away
        old = (tracked.written or {}).get("status") or {}
        patch = {"status": {**{k: None for k in old}, **body["status"]}}
        try:
            kube_raw.call(self.custom.patch_namespaced_custom_object_status, GROUP, VERSION,
                          record.namespace, PLURAL, record.name, patch)
            tracked.written = body
        except ApiException as exc:
            log.warning("cannot write the status of FluxJob %s/%s: %s", record.namespace,
                        record.name, status_message(exc))
            self.dirty = True

    def _bound_pods(self) -> dict[str, tuple[int, set[str]]]:
        """Job uid -> (its live pods bound to a node, those nodes), from the pod cache."""
        out: dict[str, tuple[int, set[str]]] = {}
        if not self.jobs:
            return out
        for pod in self.ctx.state.pods.values():
            if not pod.node or pod.terminal:
                continue
            labels = (pod.raw.get("metadata") or {}).get("labels") or {}
            uid = next((labels[k] for k in JOB_UID_LABELS if labels.get(k)), None)
            if uid is not None:
                count, nodes = out.get(uid, (0, set()))
                nodes.add(pod.node)
                out[uid] = (count + 1, nodes)
        return out
