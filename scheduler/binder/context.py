"""What the binder's cycles share: the cluster cache, the service, the writers.

kube-scheduler hands its plugins a framework handle; the binder's three parts (the
scheduling cycle, the binding cycle, the reconcile from the leader) get this one
object instead of reaching into each other. ``state`` is replaced wholesale when
the binder reconciles (start or takeover), so every part reads it from here and
never keeps its own reference. Only the loop thread touches the context: bind
workers write to the API and hand their results back through the loop's inbox.
"""

from __future__ import annotations

import errno
import logging
import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.cluster_state import ClusterState, PodInfo
from fluxnode.scheduler.binder.config import BinderConfig
from fluxnode.scheduler.binder.metrics import BinderMetrics
from fluxnode.scheduler.binder.node_drain import NodeDrains
from fluxnode.scheduler.binder.queue import Reservations
from fluxnode.scheduler.binder.sched_client import SchedClient

log = logging.getLogger("fluxnode.binder")


@dataclass
class BinderContext:
    config: BinderConfig
    owner: str  # the `owner` label of every allocation this binder makes ("binder:<schedulerName>")
    state: ClusterState
    sched: SchedClient
    writer: PodWriter
    pool: ThreadPoolExecutor  # bind workers; pod status writes go through it too
    metrics: BinderMetrics
    reservations: Reservations
    reported: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # pod uid -> (reason, message) last written
    sched_ok: bool = False  # the service answered last time (readiness)
    # (pod uid, (reason, message)) of condition writes that failed, from the writers: the
    # loop forgets them as reported, so the next cycle writes them again
    failed_reports: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    drains: NodeDrains = field(default_factory=NodeDrains)  # cordoned, NotReady -> drains
    # group key -> a FluxJob's ALLOCATED answer made before its pods existed (fluxjob_loop.py),
    # used by the scheduling cycle when the Job's pods are all there
    held: dict = field(default_factory=dict)

    def cancel(self, alloc_id: int, ranks: list[int] | None) -> None:
        """Cancel an allocation (or some of its ranks); one already gone is not an error."""
        payload: dict = {"id": alloc_id}
        if ranks is not None:
            payload["ranks"] = idset.encode(ranks)
        # SchedUnavailable goes up: the loop reconciles, which cancels again from sched.list
        # and the pods whatever was not delivered (the leader's allocations whose pods ended)
        try:
            self.sched.rpc("sched.cancel", payload)
        except RPCError as exc:
            if exc.errnum != errno.ENOENT:
                log.warning("cancel of allocation %d failed: %s", alloc_id, exc.errstr)

    def report(self, pods: list[PodInfo], reason: str, message: str) -> None:
        """Say on each pod why it is not scheduled, once per (reason, message)."""
        for pod in pods:
            if self.reported.get(pod.uid) == (reason, message):
                continue
            self.reported[pod.uid] = (reason, message)
            self.pool.submit(self._write_report, pod, reason, message)

    def _write_report(self, pod: PodInfo, reason: str, message: str) -> None:
        """(A writer thread.) A failed write is handed back to be written again later."""
        try:
            self.writer.not_scheduled(pod, reason, message)
        except Exception as exc:  # the API server away, 5xx, 409: the next cycle retries
            log.info("PodScheduled of %s not written (%s); will retry", pod.ref, exc)
            self.failed_reports.put((pod.uid, (reason, message)))

    def retry_failed_reports(self) -> None:
        """(The loop.) Forget the reports whose write failed, so they are made again."""
        while True:
            try:
                uid, said = self.failed_reports.get_nowait()
            except queue.Empty:
                return
            if self.reported.get(uid) == said:
                del self.reported[uid]
                self.state.changed = True
