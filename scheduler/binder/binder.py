"""The binder: places Kubernetes pods through the lead broker's graph scheduler.

Split the way kube-scheduler is (design and user guide: docs/binder.md):
- this file: the lifecycle (informers, leader election, health) and the one loop
  thread that owns the cluster cache. Informers feed pod and node events into one
  inbox; the loop applies them, then runs a scheduling cycle. Only the replica
  holding the Lease runs cycles; standbys keep their informers warm so a takeover
  is quick.
- scheduling_cycle.py: the queue in order (workload_queue.py: the waiting Jobs and the
  complete groups as one), one ``sched.alloc`` per workload (groups batched), outside-usage
  pins, and why a group waits.
- binding_cycle.py: bind workers write the Bindings, results come back through
  the inbox.
- reconcile.py: on start, takeover or a lost answer (the leader restarted), the
  cache is rebuilt from ``sched.list`` and the pods.
- context.py: what these parts share.
- webhook.py: the admission webhook every replica serves (its server and certificates).
- fluxjob_loop.py: opted-in Jobs admitted as a whole (their FluxJobs, one request for all
  their pods, unsuspended when allocated), asked for in the scheduling cycle's walk.
- podgroup_directory.py / group_members.py: PodGroup objects (where their CRDs are
  installed) and the members of declared groups, kept on every replica for the webhook;
  podgroup_records.py: the FluxJob records of gated pod groups, after each cycle.
- resource_publisher.py: the leader's resource list into a ConfigMap for
  ``kubectl fluxnode resources``, after each cycle (rate limited).
"""

from __future__ import annotations

import logging
import os
import queue as queue_mod
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.backoff import Backoff
from fluxnode.agent.kube.health import HealthServer, problem_probe
from fluxnode.agent.kube.informer import Informer
from fluxnode.agent.kube.leader_election import LeaderElector
from fluxnode.scheduler.binder.admission import QUEUE_LABEL, Admission
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.binding_cycle import BindingCycle
from fluxnode.scheduler.binder.cluster_state import ClusterState
from fluxnode.scheduler.binder.config import BinderConfig
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.event_recorder import EventRecorder
from fluxnode.scheduler.binder.fluxjob_loop import FluxJobLoop
from fluxnode.scheduler.binder.group_members import GroupMembers
from fluxnode.scheduler.binder.http_writer import writer_for
from fluxnode.scheduler.binder.leader_locator import LeaderLocator
from fluxnode.scheduler.binder.metrics import BinderMetrics
from fluxnode.scheduler.binder.podgroup import job_size
from fluxnode.scheduler.binder.podgroup_directory import PodGroupWatch
from fluxnode.scheduler.binder.podgroup_records import PodGroupRecords
from fluxnode.scheduler.binder.queue import Reservations
from fluxnode.scheduler.binder.reconcile import Reconciler
from fluxnode.scheduler.binder.resource_publisher import ResourcePublisher
from fluxnode.scheduler.binder.sched_client import SchedClient, SchedUnavailable
from fluxnode.scheduler.binder.scheduling_cycle import SchedulingCycle
from fluxnode.scheduler.binder.webhook import Webhook
from kubernetes.client import (
    BatchV1Api,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    SchedulingV1Api,
)

log = logging.getLogger("fluxnode.binder")

RETRY_MIN, RETRY_MAX = 0.2, 5.0  # backoff of a failed loop step (well under the liveness limit)


class Binder:
    def __init__(self, api_client, config: BinderConfig):
        self.config = config
        # The client re-reads proxy settings from the environment on every request (a
        # quarter of its CPU per call); resolve them once.
        api_client.configuration.proxy = api_client.configuration.proxy
        self.identity = config.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.api_client = api_client
        self.core = CoreV1Api(api_client)
        self.batch = BatchV1Api(api_client)
        self.coordination = CoordinationV1Api(api_client)
        if config.uri:
            sched = SchedClient(config.uri, config.curve_cert, config.rpc_timeout)
        else:
            namespace, _, name = config.rank_configmap.partition("/")
            sched = SchedClient(
                LeaderLocator(self.core, namespace, name, config.broker_port),
                config.curve_cert,
                config.rpc_timeout,
            )
        self._job_sizes: dict[tuple[str, str], int | None] = {}
        self.inbox: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.members = GroupMembers()
        self.podgroups = PodGroupWatch(
            api_client, lambda kind, ns, name: self.inbox.put(("podgroup", kind, ns, name)),
            config.podgroup_discovery, config.watch_timeout)
        writer = writer_for(api_client, config.bind_workers)
        metrics = BinderMetrics()
        # Events posted by a thread of their own, off the bind workers (event_recorder.py)
        self.events = EventRecorder(writer, on_drop=metrics.events_dropped.inc)
        self.ctx = BinderContext(
            config=config,
            owner=f"binder:{config.scheduler_name}",
            state=ClusterState(config.scheduler_name, self._job_size, self.podgroups),
            sched=sched,
            # every write comes from a bind worker: one pooled connection each
            writer=PodWriter(writer, config.scheduler_name, self.identity, self.events),
            pool=ThreadPoolExecutor(max_workers=config.bind_workers, thread_name_prefix="bind"),
            metrics=metrics,
            reservations=Reservations(config.reserve_depth),
        )
        self.binding = BindingCycle(self.ctx, self.inbox)
        self.scheduling = SchedulingCycle(self.ctx, self.binding)
        self.reconciler = Reconciler(self.ctx, self.binding)
        self.fluxjobs = FluxJobLoop(self.ctx, self.scheduling, self.batch,
                                    CustomObjectsApi(api_client), self.inbox.put)
        self.scheduling.jobs = self.fluxjobs  # one queue: the Jobs walked with the groups
        self.group_records = PodGroupRecords(self.ctx, self.members,
                                             CustomObjectsApi(api_client),
                                             lambda: self.scheduling.positions)
        self.resources: ResourcePublisher | None = None
        if config.resources_configmap:
            cm_namespace, _, cm_name = config.resources_configmap.partition("/")
            self.resources = ResourcePublisher(
                sched.rpc,
                lambda body: kube_raw.call(self.core.patch_namespaced_config_map, cm_name,
                                           cm_namespace, body),
                self.identity, config.resources_interval, config.resources_refresh)
        self.stop_event = threading.Event()
        self.leading = threading.Event()
        self.reconciled = False
        self.last_loop = time.monotonic()
        self.informers: list[Informer] = []
        self.elector: LeaderElector | None = None
        self.health: HealthServer | None = None
        self.webhook: Webhook | None = None
        if config.webhook_port is not None:
            self.webhook = Webhook(api_client, config, self.ctx.metrics.registry, Admission(
                config.scheduler_name, self.members.live_count, self.podgroups))
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> ClusterState:
        """The cluster cache (replaced on every reconcile)."""
        return self.ctx.state

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> Binder:
        self.events.start()
        if self.webhook is not None:
            self.webhook.start()
        self.podgroups.start()
        self.informers = [
            Informer(
                "pods",
                self.core.list_pod_for_all_namespaces,
                self._pod_event,
                watch_timeout=self.config.watch_timeout,
            ).start(),
            Informer(
                "nodes",
                self.core.list_node,
                self._enqueue("node"),
                watch_timeout=self.config.watch_timeout,
            ).start(),
            Informer(
                "jobs",
                self.batch.list_job_for_all_namespaces,
                self._enqueue("job"),
                watch_timeout=self.config.watch_timeout,
                label_selector=QUEUE_LABEL,
            ).start(),
            # the FluxJob loop's order: the priority a Job's pods will get
            Informer(
                "priorityclasses",
                SchedulingV1Api(self.api_client).list_priority_class,
                self._enqueue("priorityclass"),
                watch_timeout=self.config.watch_timeout,
            ).start(),
        ]
        if self.config.queue_limits:  # queue_limits.py: one ConfigMap, watched by name
            namespace, _, name = self.config.queue_limits.partition("/")
            self.informers.append(Informer(
                "queue-limits",
                self.core.list_namespaced_config_map,
                self._enqueue("limits"),
                watch_timeout=self.config.watch_timeout,
                namespace=namespace,
                field_selector=f"metadata.name={name}",
            ).start())
        if self.config.http_port is not None:
            self.health = HealthServer(
                self.config.http_host,
                self.config.http_port,
                problem_probe(self._live),
                problem_probe(self._ready),
                self.ctx.metrics.registry,
            ).start()
        if self.config.leader_elect:
            self.elector = LeaderElector(
                self.coordination,
                self.config.lease_namespace,
                self.config.lease_name,
                self.identity,
                lease_duration=self.config.lease_duration,
                renew_deadline=self.config.renew_deadline,
                retry_period=self.config.retry_period,
                on_started=self._leading_started,
                on_stopped=self._leading_stopped,
            ).start()
        else:
            self._leading_started()
        self._thread = threading.Thread(target=self._loop, name="binder-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.inbox.put(("wake",))
        if self.elector is not None:
            self.elector.stop()
        for informer in self.informers:
            informer.stop()
        self.podgroups.stop()
        if self._thread is not None:
            self._thread.join(10)
        self.ctx.pool.shutdown(wait=True, cancel_futures=True)
        self.events.stop()
        close = getattr(self.ctx.writer.api, "close", None)
        if close is not None:
            close()
        self.ctx.sched.close()
        if self.health is not None:
            self.health.stop()
        if self.webhook is not None:
            self.webhook.stop()

    def wait(self) -> None:
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(1)

    def _leading_started(self) -> None:
        self.leading.set()
        self.ctx.metrics.leader.set(1)
        self.inbox.put(("wake",))

    def _leading_stopped(self) -> None:
        self.leading.clear()
        self.ctx.metrics.leader.set(0)
        self.inbox.put(("wake",))

    def _live(self) -> str | None:
        for informer in self.informers:
            if not informer.alive:
                return f"informer {informer.name} stopped"
        if self._thread is None or not self._thread.is_alive():
            return "scheduling loop stopped"
        if time.monotonic() - self.last_loop > max(60.0, 4 * self.config.resync):
            return "scheduling loop stuck"
        return None

    def _ready(self) -> str | None:
        for informer in self.informers:
            if not informer.synced.is_set():
                return f"informer {informer.name} not synced"
        if self.leading.is_set() and not self.ctx.sched_ok:
            return "scheduler service not reachable"
        if not self.podgroups.synced:
            return "PodGroup CRDs not discovered yet"
        if self.webhook is not None:
            return self.webhook.problem()
        return None

    def _pod_event(self, kind: str, obj) -> None:
        self.members.apply(kind, obj)  # first: the webhook counts from it (any thread)
        self.inbox.put(("pod", kind, obj))

    def _enqueue(self, what: str):
        def handler(kind: str, obj) -> None:
            self.inbox.put((what, kind, obj))

        return handler

    def _job_size(self, namespace: str, name: str) -> int | None:
        key = (namespace, name)
        if key not in self._job_sizes:
            tracked = self.fluxjobs.jobs.get(key)
            if tracked is not None:  # an opted-in Job: the Job informer has it, no GET
                self._job_sizes[key] = job_size(tracked.job)
                return self._job_sizes[key]
            try:
                self._job_sizes[key] = job_size(
                    kube_raw.call(self.batch.read_namespaced_job, name, namespace)
                )
            except Exception as exc:
                log.info(
                    "job %s/%s size unknown (%s); group size from annotations or 1",
                    namespace,
                    name,
                    exc,
                )
                self._job_sizes[key] = None
        return self._job_sizes[key]

    # -- loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        """The loop thread; with $FLUXNODE_BINDER_PROFILE set to a path, run under cProfile
        and its statistics written there when the loop ends (bench/workloads.py's
        --profile-loop: where the loop's CPU goes, with call counts)."""
        path = os.environ.get("FLUXNODE_BINDER_PROFILE")
        if not path:
            self._run_loop()
            return
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
        try:
            self._run_loop()
        finally:
            profile.disable()
            profile.dump_stats(path)

    def _run_loop(self) -> None:
        """Apply events, then one step; a failing step is retried after a capped, jittered
        backoff (reset by the next step that succeeds). Nothing a step raises ends the
        loop: the leader or the API server being away is the normal case to ride out, and
        a dead loop in a live process is the one failure a liveness probe sees late."""
        next_resync = time.monotonic() + self.config.resync
        backoff = Backoff(initial=RETRY_MIN, maximum=RETRY_MAX)
        retry_at: float | None = None  # a failed step is tried again then, events or not
        while not self.stop_event.is_set():
            wake = next_resync if retry_at is None else min(next_resync, retry_at)
            try:
                item = self.inbox.get(timeout=max(0.0, wake - time.monotonic()))
                self._handle(item)
                while True:
                    self._handle(self.inbox.get_nowait())
            except queue_mod.Empty:
                pass
            if self.stop_event.is_set():
                break
            now = self.last_loop = time.monotonic()
            resync = now >= next_resync
            if resync:
                next_resync = now + self.config.resync
            elif retry_at is not None and now < retry_at:
                continue  # backing off: events are applied, the step waits
            try:
                self._step(resync)
                backoff.reset()
                retry_at = None
            except SchedUnavailable as exc:
                self.ctx.sched_ok = False
                log.warning("scheduler service unavailable: %s", exc)
                # an answer may have been lost (e.g. the leader restarted): rebuild from
                # sched.list once it is back (re-adopting what it forgot), so nothing is left
                # allocated twice; cancels that could not be delivered are redone there too
                self.reconciled = False
                self.ctx.state.changed = True
                retry_at = time.monotonic() + backoff.next_delay()
            except Exception:  # the API server, a bug: never a dead loop
                log.exception("scheduling cycle failed; retrying")
                self.ctx.state.changed = True
                retry_at = time.monotonic() + backoff.next_delay()
        self.scheduling.update_gauges()

    def _step(self, resync: bool) -> None:
        """One round of the loop: on a resync tick refresh capacity (and check the leader
        still holds what our running pods use), reconcile when needed, then a cycle."""
        if resync:
            self.ctx.state.changed = True
            if self.reconciled:
                self.reconciler.refresh_capacity()
                forgotten = self.reconciler.forgotten()
                if forgotten:
                    log.warning(
                        "the leader does not hold what %d running pods use (e.g. %s): it "
                        "restarted without its journal? re-adopting them before placing more",
                        len(forgotten), forgotten[0],
                    )
                    self.reconciled = False
        if not self.leading.is_set():
            self.reconciled = False
            if self.resources is not None:
                self.resources.forget()
            return
        if not self.reconciled:
            if not all(i.synced.is_set() for i in self.informers):
                return
            if not self.podgroups.synced:
                return  # groups sized by PodGroups that are not listed yet would wait wrongly
            self.reconciler.reconcile()
            self.fluxjobs.reconciled()
            self.group_records.reconciled()
            self.reconciled = True
        self.fluxjobs.run()
        self.scheduling.run()
        self.group_records.run()
        if self.resources is not None:
            self.resources.run()

    def _handle(self, item: tuple) -> None:
        try:
            self._apply(item)
        except Exception:  # one bad object must not stop the binder
            log.exception("cannot apply %s event; skipped", item[0])

    def _apply(self, item: tuple) -> None:
        what = item[0]
        state = self.ctx.state
        if what == "pod":
            kind, obj = item[1], item[2]
            if kind == "SYNC":
                state.sync_pods(obj)
            else:
                state.apply_pod(kind, obj)
                if kind == "DELETED":
                    uid = (obj.get("metadata") or {}).get("uid")
                    self.ctx.reported.pop(uid, None)
                    self.binding.forget(uid)
            self.fluxjobs.pod(kind, obj)  # the bound pods of each opted-in Job
        elif what == "node":
            kind, obj = item[1], item[2]
            if kind == "SYNC":
                state.sync_nodes(obj)
            else:
                state.apply_node(kind, obj)
        elif what == "job":
            self.fluxjobs.apply(item[1], item[2])
        elif what == "podgroup":
            state.regroup(item[1].key_kind, item[2], item[3])
        elif what == "priorityclass":
            self.fluxjobs.apply_priority_class(item[1], item[2])
        elif what == "limits":
            self.fluxjobs.apply_limits(item[1], item[2])
        elif what == "bound":
            for result in item[1]:
                self.binding.bound(result)
        elif what == "fluxjob":  # a Job's unsuspension came back (fluxjob_loop.py)
            self.fluxjobs.resumed(*item[1:])
