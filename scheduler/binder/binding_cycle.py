"""The binding cycle: bind workers write the placements the scheduling cycle decided.

As in kube-scheduler, binding runs apart from scheduling so a slow API server never
holds up the next decision: the loop hands a group's bindings to a thread pool in
chunks and carries on; each worker writes its chunk's Bindings (pipelined on its one
connection: one send, the answers read in order) and hands the results back through the
loop's inbox, where `bound` accounts for them on the loop thread (the only one that
touches the cluster cache).

A group is placed all or nothing by the service; Kubernetes cannot unbind, so when
one binding fails the pods already bound keep their share, the failed pods' ranks
are freed and those pods are queued again (an all-or-nothing increment of the same
group) after a per-pod backoff. A 409 means the pod is bound already (a replayed
bind after a restart, or someone else): its share stays held.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
from dataclasses import dataclass

from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binding import BindError
from fluxnode.scheduler.binder.cluster_state import PodInfo
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.slot_assignment import PodSlot

log = logging.getLogger("fluxnode.binder")

BIND_RETRY_MIN, BIND_RETRY_MAX = 0.5, 60.0  # backoff for a pod whose binding failed
# a worker woken for fewer bindings costs more in wake-ups than it saves; a chunk's Bindings
# are pipelined (one send, answers read in order), so a bigger chunk costs less per pod
BINDS_PER_CHUNK_MIN = 8

Bind = tuple[PodInfo, PodSlot, int, str]
"""One pod to bind: the pod, its share, its allocation id and its group (``ns/kind/name``)."""


@dataclass
class PodResult:
    uid: str
    alloc_id: int
    ok: bool
    status: int = 0
    message: str = ""
    created: float = 0.0
    finished: float = 0.0  # when the Binding was accepted (epoch seconds)


class BindingCycle:
    def __init__(self, ctx: BinderContext, inbox: queue_mod.SimpleQueue):
        self.ctx = ctx
        self.inbox = inbox  # results go back to the loop as ("bound", [PodResult, ...])
        self.inflight: dict[str, int] = {}  # pod uid -> alloc id, binding submitted
        self.binds: dict[str, Bind] = {}  # pod uid -> its binding, until it is settled
        # rank -> uid -> (cores, GPUs) idsets of the bindings in `binds`, decoded only when
        # asked (`in_flight_on`, for the ranks of a new allocation: rarely any in flight), not
        # for every pod bound
        self.binds_on: dict[int, dict[str, tuple[str, str]]] = {}
        self.rebind_at: dict[str, float] = {}  # uid -> when to retry a bind of unknown outcome
        self.retry_after: dict[
            str, tuple[float, float]
        ] = {}  # pod uid -> (monotonic time, delay) after a failed bind
        self._binds_running = threading.Condition()
        self._nbinds = 0  # bindings submitted and not finished (counted by the workers)

    def submit(self, binds: list[Bind]) -> None:
        """Hand bindings to the pool in at most `bind_workers` chunks of at least
        BINDS_PER_CHUNK_MIN: one task per pod would cost a thread wake-up (and GIL
        hand-off) per pod for nothing."""
        if not binds:
            return
        for bind in binds:
            pod, slot, alloc_id, _group = bind
            self.inflight[pod.uid] = alloc_id
            self.binds[pod.uid] = bind
            self.binds_on.setdefault(slot.rank, {})[pod.uid] = (slot.cores, slot.gpus)
            self.ctx.reported.pop(pod.uid, None)
        with self._binds_running:
            self._nbinds += len(binds)
        chunks = min(-(-len(binds) // BINDS_PER_CHUNK_MIN), self.ctx.config.bind_workers)
        for i in range(chunks):
            self.ctx.pool.submit(self._bind_chunk, binds[i::chunks])

    def in_flight_on(self, rank: int, cores: set[int], gpus: set[int]) -> None:
        """Add to `cores`/`gpus` the ids on `rank` of the bindings not settled yet."""
        for bind_cores, bind_gpus in self.binds_on.get(rank, {}).values():
            cores.update(idset.decode(bind_cores or ""))
            gpus.update(idset.decode(bind_gpus or ""))

    def clear(self) -> None:
        """Forget every binding not settled (a reconcile re-derives them from the leader)."""
        self.inflight.clear()
        self.binds.clear()
        self.binds_on.clear()
        self.rebind_at.clear()

    def _settled(self, uid: str) -> None:
        bind = self.binds.pop(uid, None)
        if bind is not None:
            self.binds_on.get(bind[1].rank, {}).pop(uid, None)
        self.rebind_at.pop(uid, None)

    def resubmit_due(self) -> None:
        """Bind again, as they were, the pods whose binding's outcome was unknown (no
        answer, 5xx, 429) once their backoff passed; a pod bound meanwhile (the first
        try went through) or gone is settled instead."""
        if not self.rebind_at:
            return
        now = time.monotonic()
        due = [uid for uid, at in self.rebind_at.items() if at <= now]
        again: list[Bind] = []
        for uid in due:
            del self.rebind_at[uid]
            pod = self.ctx.state.pods.get(uid)
            bind = self.binds.get(uid)
            if bind is None:
                continue
            if pod is None or pod.node:
                self._settled(uid)
                continue
            again.append((pod, *bind[1:]))
        self.submit(again)

    def wait_idle(self, timeout: float) -> None:
        """Let the bindings in flight land (before the cache is rebuilt from the API)."""
        with self._binds_running:
            self._binds_running.wait_for(lambda: self._nbinds == 0, timeout=timeout)

    def backing_off(self, pods: list[PodInfo]) -> bool:
        """Whether a binding of one of `pods` failed too recently to try again."""
        now = time.monotonic()
        return any(self.retry_after.get(p.uid, (0.0, 0.0))[0] > now for p in pods)

    def forget(self, uid: str) -> None:
        """The pod is gone: drop its retry backoff."""
        self.retry_after.pop(uid, None)

    def _bind_chunk(self, binds: list[Bind]) -> None:
        """Bind the chunk's pods (their Bindings pipelined on one connection:
        `PodWriter.bind_many`); the results go to the loop at once (each put wakes the loop
        thread, so one per pod costs more than the bookkeeping it carries). The bound pods'
        `Scheduled` events are written after the chunk's Bindings, as kube-scheduler's
        recorder writes them apart from binding: an event is best effort, and writing it
        between two Bindings only delays the next pod."""
        results: list[PodResult] = []
        bound: list[tuple[PodInfo, PodSlot, int]] = []
        try:
            try:
                outcomes = self.ctx.writer.bind_many(binds)
            except Exception as exc:  # never lose a result
                outcomes = [BindError(0, f"{type(exc).__name__}: {exc}")] * len(binds)
            finished = time.time()
            for (pod, slot, alloc_id, _group), error in zip(binds, outcomes, strict=True):
                if error is None:
                    results.append(PodResult(pod.uid, alloc_id, True, created=pod.created,
                                             finished=finished))
                    bound.append((pod, slot, alloc_id))
                else:
                    results.append(PodResult(pod.uid, alloc_id, False, error.status,
                                             str(error), pod.created))
        finally:
            self._deliver(results)
        self.ctx.writer.scheduled_many(bound)

    def _deliver(self, results: list[PodResult]) -> None:
        if not results:
            return
        self.inbox.put(("bound", results))
        with self._binds_running:
            self._nbinds -= len(results)
            self._binds_running.notify_all()

    def bound(self, result: PodResult) -> None:
        """Account for one binding's outcome (on the loop thread)."""
        ctx = self.ctx
        self.inflight.pop(result.uid, None)
        if result.ok:
            self._settled(result.uid)
            self.retry_after.pop(result.uid, None)
            ctx.metrics.bindings.labels("bound").inc()
            if result.created:
                ctx.metrics.latency.observe(max(0.0, result.finished - result.created))
            return
        ctx.metrics.bindings.labels("failed").inc()
        if result.uid not in self.binds:
            return  # from before a reconcile, which re-derived this pod's binding
        delay = min(
            BIND_RETRY_MAX, max(BIND_RETRY_MIN, 2 * self.retry_after.get(result.uid, (0.0, 0.0))[1])
        )
        self.retry_after[result.uid] = (time.monotonic() + delay, delay)
        pod = ctx.state.pods.get(result.uid)
        log.warning(
            "binding %s failed (HTTP %s): %s",
            pod.ref if pod else result.uid,
            result.status,
            result.message,
        )
        if result.status == 409:
            # Already bound (a replayed bind after a restart, or someone else): it runs, so its
            # share stays held; the watch shows where. Never free what a running pod uses.
            self._settled(result.uid)
            return
        if result.status == 0 or result.status == 429 or result.status >= 500:
            # No answer or the API server failing: the Binding may have been written. Its
            # share stays held and the same binding is tried again (a 409 then says it was).
            self.rebind_at[result.uid] = time.monotonic() + delay
            return
        self._settled(result.uid)
        ctx.state.unplace(result.uid)
        if pod is not None and result.status != 404:
            ctx.report(
                [pod], "WaitingForResources", f"binding failed: {result.message}; will retry"
            )
