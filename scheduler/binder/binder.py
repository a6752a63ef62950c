"""The binder: places Kubernetes pods through the lead broker's graph scheduler.

Informers feed pod and node events into one inbox; a single loop thread owns
the ClusterState, asks the scheduler service for each complete group in queue
order (one allocation per group, all or nothing; up to ``alloc_batch`` groups
per ``sched.alloc`` round trip, which the service answers in order and stops
after a reservation, so batching never changes an outcome) and hands the
bindings to a thread pool in chunks. Only the replica holding the Lease runs
the loop; standbys keep their informers warm so a takeover is quick.

Design choices (also in README.md, "Scheduling pods with fluxnode"):
- A group is one jobspec of N slots, one per pod; every pod gets at least one
  whole core (cpu rounds up), its GPUs and its memory (MiB, rounded up). A
  heterogeneous group has one slot kind per distinct shape; the service matches
  the kinds in turn within one call (all or nothing) and says where each kind
  landed, so every pod gets exactly its shape. The service's graph is flat per
  node (see live_graph), so each slot is node-local and the graph alone enforces
  cores, GPUs and memory.
- Other schedulers' pods and the gap between a node's capacity and its
  allocatable (cores, GPUs, memory) are held in the graph by one pinned
  allocation per node ("outside usage"), re-pinned whenever they change.
- If a binding fails, Kubernetes cannot unbind the pods already bound: they
  keep their share; the failed pods' ranks are freed and those pods are
  queued again (as an all-or-nothing increment of the same group).
- On start (and on takeover) allocations are rebuilt from ``sched.list``
  (labels name group and pod UIDs; ``kinds`` where each slot kind landed) and the
  pods' nodeName/annotations, so unbound pods get exactly their planned share.
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import os
import queue as queue_mod
import socket
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import click
from fluxnode.agent.broker.client import RPCError
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.binder.cluster_state import (
    ClusterState,
    Group,
    GroupAllocation,
    NodeCapacity,
    OutsideUsage,
    PodInfo,
)
from fluxnode.scheduler.binder.node_affinity import (
    NodeAffinityError,
    PodPlacement,
    eligible_nodes,
    explain,
    pod_placement,
)
from fluxnode.scheduler.binder.pod_requests import PodRequestError, pod_requests
from fluxnode.scheduler.binder.podgroup import GroupKey, job_size
from fluxnode.scheduler.binder.queue import Reservations
from fluxnode.scheduler.binder.sched_client import SchedClient, SchedUnavailable
from fluxnode.scheduler.binder.slot_assignment import AssignmentError, PodSlot, assign, assign_kinds
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec, slot_labels

log = logging.getLogger("fluxnode.binder")

MIB = 1024 * 1024
BIND_RETRY_MIN, BIND_RETRY_MAX = 0.5, 60.0  # backoff for a pod whose binding failed
RESULTS_PER_WAKEUP = 8  # binding results a worker hands to the loop at once
BINDS_PER_CHUNK_MIN = 4  # a worker woken for fewer bindings costs more in wake-ups than it saves


@dataclass
class BinderConfig:
    scheduler_name: str = "fluxnode"
    uri: str | None = None  # None: find rank 0 through the agents' rank map (rank_configmap)
    rank_configmap: str = "fluxnode/fluxnode-ranks"
    broker_port: int = 8050
    curve_cert: str | None = None
    policy: str = "first"
    bind_workers: int = 16
    reserve_depth: int = 1
    queue_depth: int = 32  # busy attempts per cycle before waiting for a change (a batch is finished)
    alloc_batch: int = 64  # groups asked for in one sched.alloc round trip
    resync: float = 5.0
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_name: str = "fluxnode-binder"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    http_host: str = "0.0.0.0"
    http_port: int | None = 10259
    watch_timeout: int = 300
    rpc_timeout: float = 10.0  # a sched.* answer slower than this means the leader is gone
    report_delay: float = 1.0  # an incomplete group says it waits only after this long


@dataclass
class Candidates:
    """The nodes groups may use in this cycle and what is derived from them, computed
    once per change (a reservation excludes nodes), not once per group: a cluster has
    thousands of nodes and a burst thousands of groups."""

    names: list[str]
    hostlist: str
    largest_memory: int  # bytes
    excluded: int  # how many nodes were excluded when this was computed
    tainted: bool = False  # some candidate has a NoSchedule/NoExecute taint
    # distinct pod placement rules -> (eligible names, their hostlist, why others were not)
    eligible: dict = field(default_factory=dict)


@dataclass
class Attempt:
    """A group ready to be asked for: the sched.alloc payload and what its answer is for."""

    group: Group
    pods: list[PodInfo]
    shapes: dict[str, tuple[int, int, int]]
    usable: list[str]
    payload: dict
    labels: dict[str, tuple[int, int, int]]  # slot label -> pod shape


@dataclass
class PodResult:
    uid: str
    alloc_id: int
    ok: bool
    status: int = 0
    message: str = ""
    created: float = 0.0
    finished: float = 0.0  # when the Binding was accepted (epoch seconds)


class Binder:
    def __init__(self, api_client, config: BinderConfig):
        from fluxnode.scheduler.binder.binding import PodWriter
        from fluxnode.scheduler.binder.metrics import BinderMetrics
        from kubernetes.client import BatchV1Api, CoordinationV1Api, CoreV1Api

        self.config = config
        # The client re-reads proxy settings from the environment on every request (a
        # quarter of its CPU per call); resolve them once.
        api_client.configuration.proxy = api_client.configuration.proxy
        self.identity = config.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.owner = f"binder:{config.scheduler_name}"
        self.core = CoreV1Api(api_client)
        self.batch = BatchV1Api(api_client)
        self.coordination = CoordinationV1Api(api_client)
        # every write comes from a bind worker: one pooled connection each
        self.writer = PodWriter(kube_raw.RawApi(api_client, connections=config.bind_workers),
                                config.scheduler_name, self.identity)
        self.metrics = BinderMetrics()
        self.state = ClusterState(config.scheduler_name, self._job_size)
        if config.uri:
            self.sched = SchedClient(config.uri, config.curve_cert, config.rpc_timeout)
        else:
            from fluxnode.scheduler.binder.leader_locator import LeaderLocator

            namespace, _, name = config.rank_configmap.partition("/")
            self.sched = SchedClient(
                LeaderLocator(self.core, namespace, name, config.broker_port), config.curve_cert, config.rpc_timeout
            )
        self.reservations = Reservations(config.reserve_depth)
        self.inbox: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.pool = ThreadPoolExecutor(max_workers=config.bind_workers, thread_name_prefix="bind")
        self.stop_event = threading.Event()
        self.leading = threading.Event()
        self.reconciled = False
        self.sched_ok = False
        self.last_loop = time.monotonic()
        self.reported: dict[str, tuple[str, str]] = {}  # pod uid -> (reason, message) last written
        self.inflight: dict[str, int] = {}  # pod uid -> alloc id, binding submitted
        self._binds_running = threading.Condition()
        self._nbinds = 0  # bindings submitted and not finished (counted by the workers)
        self.retry_outside: set[str] = set()
        self.retry_after: dict[str, tuple[float, float]] = {}  # pod uid -> (monotonic time, delay) after a failed bind
        self._job_sizes: dict[tuple[str, str], int | None] = {}
        self._hostlist_cache: tuple[tuple[str, ...], str] = ((), "")
        self.informers: list = []
        self.elector = None
        self.health = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> Binder:
        from fluxnode.agent.kube.health import HealthServer, problem_probe
        from fluxnode.agent.kube.informer import Informer
        from fluxnode.agent.kube.leader_election import LeaderElector

        self.informers = [
            Informer("pods", self.core.list_pod_for_all_namespaces, self._enqueue("pod"), watch_timeout=self.config.watch_timeout).start(),
            Informer("nodes", self.core.list_node, self._enqueue("node"), watch_timeout=self.config.watch_timeout).start(),
        ]
        if self.config.http_port is not None:
            self.health = HealthServer(
                self.config.http_host, self.config.http_port, problem_probe(self._live), problem_probe(self._ready),
                self.metrics.registry,
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
        if self._thread is not None:
            self._thread.join(10)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.sched.close()
        if self.health is not None:
            self.health.stop()

    def wait(self) -> None:
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(1)

    def _leading_started(self) -> None:
        self.leading.set()
        self.metrics.leader.set(1)
        self.inbox.put(("wake",))

    def _leading_stopped(self) -> None:
        self.leading.clear()
        self.metrics.leader.set(0)
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
        if self.leading.is_set() and not self.sched_ok:
            return "scheduler service not reachable"
        return None

    def _enqueue(self, what: str):
        def handler(kind: str, obj) -> None:
            self.inbox.put((what, kind, obj))

        return handler

    def _job_size(self, namespace: str, name: str) -> int | None:
        key = (namespace, name)
        if key not in self._job_sizes:
            try:
                self._job_sizes[key] = job_size(kube_raw.call(self.batch.read_namespaced_job, name, namespace))
            except Exception as exc:
                log.info("job %s/%s size unknown (%s); group size from annotations or 1", namespace, name, exc)
                self._job_sizes[key] = None
        return self._job_sizes[key]

    # -- loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        next_resync = time.monotonic() + self.config.resync
        while not self.stop_event.is_set():
            timeout = max(0.0, next_resync - time.monotonic())
            try:
                item = self.inbox.get(timeout=timeout)
                self._handle(item)
                while True:
                    self._handle(self.inbox.get_nowait())
            except queue_mod.Empty:
                pass
            if self.stop_event.is_set():
                break
            self.last_loop = time.monotonic()
            if time.monotonic() >= next_resync:
                next_resync = time.monotonic() + self.config.resync
                self.state.changed = True
                if self.reconciled:
                    self._refresh_capacity()
            if not self.leading.is_set():
                self.reconciled = False
                continue
            try:
                if not self.reconciled:
                    if not all(i.synced.is_set() for i in self.informers):
                        continue
                    self._reconcile()
                    self.reconciled = True
                self._cycle()
            except SchedUnavailable as exc:
                self.sched_ok = False
                log.warning("scheduler service unavailable: %s", exc)
                # an answer may have been lost (e.g. the leader restarted): rebuild from
                # sched.list once it is back, so nothing is left allocated twice
                self.reconciled = False
                self.state.changed = True
                self.stop_event.wait(0.5)
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                self.state.changed = True
                self.stop_event.wait(0.5)
        self._update_gauges()

    def _handle(self, item: tuple) -> None:
        try:
            self._apply(item)
        except Exception:  # one bad object must not stop the binder
            log.exception("cannot apply %s event; skipped", item[0])

    def _apply(self, item: tuple) -> None:
        what = item[0]
        if what == "pod":
            kind, obj = item[1], item[2]
            if kind == "SYNC":
                self.state.sync_pods(obj)
            else:
                self.state.apply_pod(kind, obj)
                if kind == "DELETED":
                    uid = (obj.get("metadata") or {}).get("uid")
                    self.reported.pop(uid, None)
                    self.retry_after.pop(uid, None)
        elif what == "node":
            kind, obj = item[1], item[2]
            if kind == "SYNC":
                self.state.sync_nodes(obj)
            else:
                self.state.apply_node(kind, obj)
        elif what == "bound":
            for result in item[1]:
                self._bound(result)

    # -- reconcile ----------------------------------------------------------------

    def _refresh_capacity(self) -> None:
        status = self.sched.rpc("sched.resource-status", {})
        self.sched_ok = True
        capacity = {
            n["hostname"]: NodeCapacity(n["rank"], n["cores"], n["gpus"], n.get("memory_mib", 0))
            for n in status.get("nodes", [])
            if n.get("status", "up") == "up"
        }
        self.state.set_capacity(capacity)

    def _reconcile(self) -> None:
        """Rebuild our allocations from the service and the pods (start or takeover)."""
        with self._binds_running:  # let bindings in flight land before rebuilding from the API
            self._binds_running.wait_for(lambda: self._nbinds == 0, timeout=30)
        self.state = self.state.rebuilt()
        self.inflight.clear()
        self.reservations.release_all()
        self._refresh_capacity()
        answer = self.sched.rpc("sched.list", {"labels": {"owner": self.owner}})
        self.state.outside.clear()
        self.state.node_generation += 1
        self.state.dirty_nodes.update(self.state.nodes)
        pending_binds: list[tuple[int, str, dict, PodSlot]] = []
        for a in answer.get("allocations", []):
            labels = a.get("labels") or {}
            if a["status"] != "ALLOCATED" or labels.get("kind") != "group":
                self._cancel(a["id"], None)
                continue
            if a["id"] in self.state.allocations:
                continue
            self._rebuild(a, pending_binds)
        self.state.changed = True
        log.info("reconciled: %d allocations adopted, %d pods to bind", len(self.state.allocations), len(pending_binds))
        self._submit_binds([(self.state.pods[uid], slot, alloc_id, group)
                            for alloc_id, uid, group, slot in pending_binds if uid in self.state.pods])

    def _rebuild(self, a: dict, pending_binds: list) -> dict | None:
        """Adopt one of our group allocations: bound pods keep their node and cores, the
        unbound ones get what is left. A heterogeneous group's allocation says where each
        slot kind landed (`kinds`, kept by the service across restarts), so its unbound
        pods get exactly their planned share (`assign_kinds`); only an allocation without
        it (an older service) is split first-fit over the per-node totals."""
        labels = a["labels"]
        key = GroupKey.parse(labels["group"])
        uids = list(labels.get("pods") or [])
        by_host = {n["hostname"]: n for n in a["nodes"]}
        pods: dict[str, int] = {}
        unbound: dict[str, tuple[int, int, int]] = {}
        free_nodes = {n["rank"]: dict(n) for n in a["nodes"]}
        kinds = kind_shares(a.get("kinds"))
        for uid in uids:
            pod = self.state.pods.get(uid)
            if pod is None:
                continue
            shape = self._pod_shape(pod)
            if pod.node:
                node = by_host.get(pod.node)
                if node is None:
                    continue  # bound elsewhere by someone else: counted as outside usage
                rank = node["rank"]
                pods[uid] = rank
                annotations = pod.raw.get("metadata", {}).get("annotations", {})
                used = (set(idset.decode(annotations.get("fluxnode.io/cores") or "")),
                        set(idset.decode(annotations.get("fluxnode.io/gpus") or "")))
                take_share(free_nodes[rank], used, shape[2])
                if kinds is not None:
                    share = kinds.get(shape, {}).get(rank) or next((k[rank] for k in kinds.values() if rank in k), None)
                    if share is not None:
                        take_share(share, used, shape[2])
            else:
                unbound[uid] = shape
        if unbound:
            try:
                slots = None
                if kinds is not None:
                    try:
                        slots = assign_kinds(unbound, {shape: list(per_rank.values()) for shape, per_rank in kinds.items()})
                    except AssignmentError:  # pods that match no kind (changed requests): the totals may still do
                        slots = None
                if slots is None:
                    slots = assign(unbound, list(free_nodes.values()))
            except AssignmentError as exc:
                log.warning("allocation %d of %s: cannot split what is left among its %d unbound pods (%s); "
                            "they are asked for again", a["id"], key, len(unbound), exc)
                slots = {}
            for uid, slot in slots.items():
                pods[uid] = slot.rank
                pending_binds.append((a["id"], uid, str(key), slot))
        live_ranks = set(pods.values())
        dead_ranks = [n["rank"] for n in a["nodes"] if n["rank"] not in live_ranks]
        if not pods:
            self._cancel(a["id"], None)
            return None
        if dead_ranks:
            self._cancel(a["id"], dead_ranks)
        alloc = GroupAllocation(a["id"], key, pods)
        self.state.adopt(alloc)
        return pods

    # -- cycle --------------------------------------------------------------------

    def _cancel(self, alloc_id: int, ranks: list[int] | None) -> None:
        payload: dict = {"id": alloc_id}
        if ranks is not None:
            payload["ranks"] = idset.encode(ranks)
        try:
            self.sched.rpc("sched.cancel", payload)
        except RPCError as exc:
            if exc.errnum != errno.ENOENT:
                log.warning("cancel of allocation %d failed: %s", alloc_id, exc.errstr)

    def _flush_cancels(self) -> None:
        while self.state.to_cancel:
            alloc_id, ranks = self.state.to_cancel[0]
            self._cancel(alloc_id, ranks)
            self.state.to_cancel.pop(0)

    def _pin_outside(self) -> None:
        dirty = self.state.dirty_nodes | self.retry_outside
        self.state.dirty_nodes = set()
        self.retry_outside = set()
        for name in sorted(dirty):
            usage = self.state.outside_usage(name)
            old = self.state.outside.get(name)
            if old is not None and old[1] == usage and (old[0] is not None or usage == OutsideUsage(0, 0, 0)):
                continue
            if old is not None and old[0] is not None:
                self._cancel(old[0], None)
            self.state.outside.pop(name, None)
            self.state.node_generation += 1
            if usage is None:
                continue
            if usage == OutsideUsage(0, 0, 0):
                self.state.outside[name] = (None, usage)
                continue
            spec = build_jobspec(
                [SlotKind(usage.cores, usage.gpus, usage.memory_mib, 1)],
                constraints={"hostlist": [name]},
                name=f"outside-usage-{name}",
            )
            try:
                answer = self.sched.rpc(
                    "sched.alloc",
                    {"jobspec": spec, "policy": "first", "op": "allocate",
                     "labels": {"owner": self.owner, "kind": "outside", "node": name}},
                )
                self.state.outside[name] = (answer["id"], usage)
            except RPCError as exc:
                # Our accounting cannot hold what is already there (e.g. rounding): keep the
                # node out of our placements until it can.
                log.warning("node %s: cannot hold outside usage %s: %s; node not used until it fits", name, usage, exc.errstr)
                self.state.outside[name] = (None, usage)
                self.retry_outside.add(name)
            self.state.changed = True

    def _cycle(self) -> None:
        self._flush_cancels()
        self._pin_outside()
        self._update_gauges()
        if not self.state.changed:
            return
        self.state.changed = False
        for alloc_id in self.reservations.release_all():
            self._cancel(alloc_id, None)
        usable = self.state.usable_nodes()
        excluded: set[str] = set()
        candidates: Candidates | None = None
        busy = 0
        todo = deque(self.state.queue.ordered())
        while todo and busy < self.config.queue_depth:
            batch: list[Attempt] = []
            while todo and len(batch) < self.config.alloc_batch:
                group = self.state.groups.get(todo.popleft())
                if group is None or not group.ready:
                    continue
                if group.unsatisfiable and group.unsatisfiable_generation == self.state.node_generation:
                    continue
                if candidates is None or candidates.excluded != len(excluded):
                    candidates = self._candidates(usable, excluded)
                attempt = self._prepare(group, candidates)
                if isinstance(attempt, Attempt):
                    batch.append(attempt)
                elif attempt == "busy":
                    busy += 1
                    if busy >= self.config.queue_depth:
                        break
            if not batch:
                continue
            answers = self._request(batch)
            binds: list[tuple[PodInfo, PodSlot, int, str]] = []
            for attempt, answer in zip(batch, answers, strict=False):
                if self._finish(attempt, answer, excluded, binds) == "busy":
                    busy += 1
            self._submit_binds(binds)
            # the service stopped after a reservation: the rest are asked again (it
            # changed what they may use, and which op they get)
            todo.extendleft(reversed([a.group.key for a in batch[len(answers):]]))
        self._report_waiting()

    def _candidates(self, usable: list[str], excluded: set[str]) -> Candidates:
        names = [n for n in usable if n not in excluded] if excluded else usable
        most = self.state.largest_memory(names) if names else 0
        nodes = self.state.nodes
        tainted = any(nodes[n].traits.taints for n in names if n in nodes)
        return Candidates(names, self._hostlist(names) if names else "", most, len(excluded), tainted)

    def _eligible(self, candidates: Candidates, placements: list[PodPlacement]) -> tuple[list[str], str, str]:
        """The candidates every pod of a group may run on (nodeSelector, required node
        affinity, taints), their hostlist, and kube-scheduler's summary when there are none.
        Computed once per distinct set of rules per cycle change: the pods of a burst
        mostly share a template."""
        if not candidates.tainted and not any(p.restricts for p in placements):
            return candidates.names, candidates.hostlist, ""
        key = frozenset(placements)
        hit = candidates.eligible.get(key)
        if hit is None:
            nodes = [self.state.nodes[n].traits for n in candidates.names if n in self.state.nodes]
            names, excluded = eligible_nodes(key, nodes)
            hit = candidates.eligible[key] = (
                names, hostlist.encode(names) if names else "", explain(excluded, len(nodes)) if not names else "")
        return hit

    def _pod_shape(self, pod: PodInfo) -> tuple[int, int, int]:
        """(cores, GPUs, memory MiB) of a pod's slot; one core for an unparsable pod (reported at placement)."""
        try:
            req = pod_requests(pod.raw)
        except PodRequestError:
            return 1, 0, 0
        return max(1, req.cores), req.gpus, req.memory_mib

    def _prepare(self, group: Group, candidates: Candidates) -> Attempt | str:
        """What to ask the service for `group`, or the outcome when there is nothing to ask."""
        pods = sorted(group.pending.values(), key=lambda p: p.uid)
        now = time.monotonic()
        if any(self.retry_after.get(p.uid, (0.0, 0.0))[0] > now for p in pods):
            return "backoff"  # a binding failed recently; the resync tick retries it
        try:
            reqs = {p.uid: pod_requests(p.raw) for p in pods}
        except PodRequestError as exc:
            return self._unschedulable(group, pods, str(exc), f"{exc}; fix the pod spec")
        # Every pod gets exactly its own shape: a heterogeneous group is one jobspec with
        # one slot kind per distinct shape, matched kind by kind in one service call.
        shapes = {uid: (max(1, r.cores), r.gpus, r.memory_mib) for uid, r in reqs.items()}
        if not candidates.names:
            return self._waiting(group, pods, "busy: no usable node (cordoned, NotReady, unknown to the overlay, or full); will retry")
        try:
            placements = [pod_placement(p.raw) for p in pods]
        except NodeAffinityError as exc:
            return self._unschedulable(group, pods, str(exc), f"{exc}; fix the pod spec")
        names, hosts, why_none = self._eligible(candidates, placements)
        if not names:
            if candidates.excluded:  # reserved for another group now; may fit later
                return self._waiting(group, pods, f"busy: {why_none}; will retry")
            return self._unschedulable(group, pods, why_none)
        # The graph holds each node's capacity, of which the outside-usage pins keep back
        # what is not allocatable: a pod above every node's allocatable memory would wait
        # forever as "busy", so it is reported unschedulable here in Kubernetes' terms.
        biggest = max(r.memory_bytes for r in reqs.values())
        if biggest > candidates.largest_memory:
            return self._unschedulable(group, pods, f"a pod needs {biggest // MIB} MiB of memory but the largest "
                                                    f"usable node allocates {candidates.largest_memory // MIB} MiB")
        kinds = sorted(Counter(shapes.values()).items())
        slot_kinds = [SlotKind(c, g, m, n) for (c, g, m), n in kinds]
        spec = build_jobspec(slot_kinds, constraints={"hostlist": [hosts]}, name=str(group.key))
        payload = {
            "jobspec": spec,
            "policy": self.config.policy,
            "op": self.reservations.op_for_blocked(),
            "labels": {"owner": self.owner, "kind": "group", "group": str(group.key), "pods": [p.uid for p in pods]},
        }
        labels = {label: (k.cores, k.gpus, k.memory_mib) for label, k in slot_labels(slot_kinds).items()}
        return Attempt(group, pods, shapes, names, payload, labels)

    def _request(self, batch: list[Attempt]) -> list[dict | RPCError]:
        """Ask the service for `batch` in one round trip; one answer per request tried
        (the service stops after the first one reserved)."""
        t0 = time.perf_counter()
        try:
            if len(batch) == 1:
                try:
                    return [self.sched.rpc("sched.alloc", batch[0].payload)]
                except RPCError as exc:
                    return [exc]
            answers = self.sched.rpc("sched.alloc", {"requests": [a.payload for a in batch]})["answers"]
            return [RPCError(a["errnum"], a.get("errstr")) if "errnum" in a else a for a in answers]
        finally:
            self.metrics.attempt_duration.observe(time.perf_counter() - t0)

    def _finish(self, attempt: Attempt, answer: dict | RPCError, excluded: set[str],
                binds: list[tuple[PodInfo, PodSlot, int, str]]) -> str:
        """Act on the service's answer for one group; placed pods go to `binds`."""
        group, pods, shapes = attempt.group, attempt.pods, attempt.shapes
        if isinstance(answer, RPCError):
            if answer.errnum == errno.EBUSY:
                return self._waiting(group, pods, f"{answer.errstr}; will retry when resources free up")
            return self._unschedulable(group, pods, self._explain(shapes, attempt.usable) or answer.errstr)
        self.sched_ok = True
        if answer["status"] == "RESERVED":
            self.reservations.hold(group.key, answer["id"])
            excluded.update(n["hostname"] for n in answer["nodes"])
            return self._waiting(group, pods, "busy: resources reserved for this group; will bind when they free up",
                                 "reserved")
        try:
            if "kinds" in answer:
                slots = assign_kinds(shapes, {attempt.labels.get(k["label"]): k["nodes"] for k in answer["kinds"]})
            else:
                slots = assign(shapes, answer["nodes"])
        except AssignmentError as exc:
            self._cancel(answer["id"], None)
            return self._waiting(group, pods, f"busy: {exc}; will retry", "error")
        self.state.placed(GroupAllocation(answer["id"], group.key, {uid: s.rank for uid, s in slots.items()}))
        self.metrics.attempts.labels("scheduled").inc()
        binds.extend((pod, slots[pod.uid], answer["id"], str(group.key)) for pod in pods)
        return "scheduled"

    def _waiting(self, group: Group, pods: list[PodInfo], message: str, attempt: str = "busy") -> str:
        """The group cannot run now but may later: say so on its pods, count the attempt."""
        self._report(pods, "WaitingForResources", message, group)
        self.metrics.attempts.labels(attempt).inc()
        return "busy"

    def _unschedulable(self, group: Group, pods: list[PodInfo], reason: str, message: str | None = None) -> str:
        """The group can never run as the cluster is: remember why (until the nodes change)
        and say so on its pods."""
        group.unsatisfiable, group.unsatisfiable_generation = reason, self.state.node_generation
        if message is None:
            message = f"unsatisfiable: {reason.removeprefix('unsatisfiable: ')}; will not fit until the cluster changes"
        self._report(pods, "Unschedulable", message, group)
        self.metrics.attempts.labels("unschedulable").inc()
        return "unschedulable"

    def _hostlist(self, names: list[str]) -> str:
        """RFC 29 hostlist of `names`, cached: the usable set rarely changes between groups."""
        key = tuple(names)
        if self._hostlist_cache[0] != key:
            self._hostlist_cache = (key, hostlist.encode(names))
        return self._hostlist_cache[1]

    def _explain(self, shapes: dict[str, tuple[int, int, int]], usable: list[str]) -> str | None:
        """Why a group can never fit, in numbers a user can act on."""
        caps = [self.state.capacity[n] for n in usable if n in self.state.capacity]
        if not caps:
            return None
        big_c = max(c.cores for c in caps)
        big_g = max(c.gpus for c in caps)
        big_m = max(c.memory_mib for c in caps)
        for c, g, m in sorted(shapes.values(), reverse=True):
            if c > big_c:
                return f"a pod needs {c} cores but the largest usable node has {big_c}"
            if g > big_g:
                return f"a pod needs {g} GPUs but the largest usable node has {big_g}"
            if m > big_m:
                return f"a pod needs {m} MiB of memory but the largest usable node has {big_m} MiB in the graph"
        total_c = sum(c for c, _g, _m in shapes.values())
        total_g = sum(g for _c, g, _m in shapes.values())
        have_c = sum(c.cores for c in caps)
        have_g = sum(c.gpus for c in caps)
        if total_c > have_c:
            return f"the group needs {total_c} cores in {len(shapes)} pods but the {len(caps)} usable nodes have {have_c} in total"
        if total_g > have_g:
            return f"the group needs {total_g} GPUs but the {len(caps)} usable nodes have {have_g} in total"
        return None

    # -- binding ------------------------------------------------------------------

    def _submit_binds(self, binds: list[tuple[PodInfo, PodSlot, int, str]]) -> None:
        """Hand bindings to the pool in at most `bind_workers` chunks of at least
        BINDS_PER_CHUNK_MIN: one task per pod would cost a thread wake-up (and GIL
        hand-off) per pod for nothing."""
        if not binds:
            return
        for pod, _slot, alloc_id, _group in binds:
            self.inflight[pod.uid] = alloc_id
            self.reported.pop(pod.uid, None)
        with self._binds_running:
            self._nbinds += len(binds)
        chunks = min(-(-len(binds) // BINDS_PER_CHUNK_MIN), self.config.bind_workers)
        for i in range(chunks):
            self.pool.submit(self._bind_chunk, binds[i::chunks])

    def _bind_chunk(self, binds: list[tuple[PodInfo, PodSlot, int, str]]) -> None:
        """Bind pods one after another; results go to the loop a few at a time (each put
        wakes the loop thread, so one per pod costs more than the bookkeeping it carries)."""
        results: list[PodResult] = []
        try:
            for pod, slot, alloc_id, group in binds:
                results.append(self._bind_one(pod, slot, alloc_id, group))
                if len(results) >= RESULTS_PER_WAKEUP:
                    self._deliver(results)
                    results = []
        finally:
            self._deliver(results)

    def _deliver(self, results: list[PodResult]) -> None:
        if not results:
            return
        self.inbox.put(("bound", results))
        with self._binds_running:
            self._nbinds -= len(results)
            self._binds_running.notify_all()

    def _bind_one(self, pod: PodInfo, slot: PodSlot, alloc_id: int, group: str) -> PodResult:
        from fluxnode.scheduler.binder.binding import BindError

        try:
            self.writer.bind(pod, slot, alloc_id, group)
            return PodResult(pod.uid, alloc_id, True, created=pod.created, finished=time.time())
        except BindError as exc:
            return PodResult(pod.uid, alloc_id, False, exc.status, str(exc), pod.created)
        except Exception as exc:  # never lose a result
            return PodResult(pod.uid, alloc_id, False, 0, f"{type(exc).__name__}: {exc}", pod.created)

    def _bound(self, result: PodResult) -> None:
        self.inflight.pop(result.uid, None)
        if result.ok:
            self.retry_after.pop(result.uid, None)
            self.metrics.bindings.labels("bound").inc()
            if result.created:
                self.metrics.latency.observe(max(0.0, result.finished - result.created))
            return
        self.metrics.bindings.labels("failed").inc()
        delay = min(BIND_RETRY_MAX, max(BIND_RETRY_MIN, 2 * self.retry_after.get(result.uid, (0.0, 0.0))[1]))
        self.retry_after[result.uid] = (time.monotonic() + delay, delay)
        pod = self.state.pods.get(result.uid)
        log.warning("binding %s failed (HTTP %s): %s", pod.ref if pod else result.uid, result.status, result.message)
        if result.status == 409:
            # Already bound (a replayed bind after a restart, or someone else): it runs, so its
            # share stays held; the watch shows where. Never free what a running pod uses.
            return
        self.state.unplace(result.uid)
        if pod is not None and result.status != 404:
            self.pool.submit(self.writer.not_scheduled, pod, "WaitingForResources", f"binding failed: {result.message}; will retry")

    # -- reporting ----------------------------------------------------------------

    def _report(self, pods: list[PodInfo], reason: str, message: str, group: Group) -> None:
        for pod in pods:
            if self.reported.get(pod.uid) == (reason, message):
                continue
            self.reported[pod.uid] = (reason, message)
            self.pool.submit(self.writer.not_scheduled, pod, reason, message)

    def _report_waiting(self) -> None:
        """Pods of incomplete groups say what they wait for (once, after report_delay:
        a group whose pods are being created right now should not churn pod status)."""
        now = time.monotonic()
        for key in list(self.state.with_pending):
            group = self.state.groups.get(key)
            if group is None:
                continue
            if group.problem:
                self._report(list(group.pending.values()), "Unschedulable", group.problem, group)
                continue
            if group.placed or len(group.pending) >= group.size or now - group.since < self.config.report_delay:
                continue
            message = f"waiting for group {group.key.namespace}/{group.key.name}: {group.size} pods required"
            self._report(list(group.pending.values()), "WaitingForGroup", message, group)

    def _update_gauges(self) -> None:
        self.metrics.pending_groups.set(len(self.state.queue))
        self.metrics.pending_pods.set(sum(len(self.state.groups[k].pending) for k in self.state.with_pending if k in self.state.groups))


def kind_shares(kinds: list[dict] | None) -> dict[tuple[int, int, int], dict[int, dict]] | None:
    """A listed allocation's per-kind placement as pod shape -> rank -> that kind's share
    there (copies, to be taken from); None when there is none to use (one kind, an older
    service, or two kinds of one shape, which the binder never asks for)."""
    if not kinds or any(not isinstance(k.get("slot"), dict) for k in kinds):
        return None
    out: dict[tuple[int, int, int], dict[int, dict]] = {}
    for kind in kinds:
        slot = kind["slot"]
        shape = (int(slot.get("cores") or 0), int(slot.get("gpus") or 0), int(slot.get("memory_mib") or 0))
        if shape in out:
            return None
        out[shape] = {int(n["rank"]): dict(n) for n in kind.get("nodes") or []}
    return out


def take_share(node: dict, used: tuple[set[int], set[int]], memory_mib: int) -> None:
    """Take a bound pod's cores, GPUs (by id, from its annotations) and memory out of `node`."""
    cores, gpus = used
    node["cores"] = idset.encode(c for c in idset.decode(node.get("cores") or "") if c not in cores)
    node["gpus"] = idset.encode(g for g in idset.decode(node.get("gpus") or "") if g not in gpus)
    node["memory_mib"] = int(node.get("memory_mib") or 0) - memory_mib


# -- command line ----------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log collectors index without parsing rules."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("fluxnode")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def load_api_client(kubeconfig: str | None):
    from kubernetes import client, config

    if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    return client.ApiClient()


@click.command()
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig (default: $KUBECONFIG, else in-cluster).")
@click.option("--uri", envvar="FLUXNODE_URI", help="Lead broker URI: tcp://HOST:PORT or local://PATH (default: rank 0 from --rank-configmap).")
@click.option("--rank-configmap", default="fluxnode/fluxnode-ranks", show_default=True, help="NAMESPACE/NAME of the agents' rank map.")
@click.option("--broker-port", default=8050, show_default=True, type=click.IntRange(1, 65535))
@click.option("--curve-cert", type=click.Path(dir_okay=False), help="CURVE certificate for a tcp:// URI.")
@click.option("--scheduler-name", default="fluxnode", show_default=True, help="spec.schedulerName to serve.")
@click.option("--policy", default="first", show_default=True, help="Match policy for groups.")
@click.option("--bind-workers", default=16, show_default=True, type=click.IntRange(1, 256))
@click.option("--alloc-batch", default=64, show_default=True, type=click.IntRange(1, 1024), help="Groups asked for in one sched.alloc round trip.")
@click.option("--reserve-depth", default=1, show_default=True, type=click.IntRange(0, 64), help="Blocked groups that get a reservation.")
@click.option("--resync", default=5.0, show_default=True, type=click.FloatRange(0.1), help="Seconds between forced retries.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--lease-namespace", default="kube-system", show_default=True)
@click.option("--lease-name", default="fluxnode-binder", show_default=True)
@click.option("--lease-duration", default=15.0, show_default=True, type=float)
@click.option("--renew-deadline", default=10.0, show_default=True, type=float)
@click.option("--retry-period", default=2.0, show_default=True, type=float)
@click.option("--identity", default="", help="Leader election identity (default: hostname-pid).")
@click.option("--http-host", default="0.0.0.0", show_default=True)
@click.option("--http-port", default=10259, show_default=True, type=click.IntRange(0, 65535), help="Health and metrics port (0: any free port).")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"]))
def binder(kubeconfig, uri, rank_configmap, broker_port, curve_cert, scheduler_name, policy, bind_workers, alloc_batch, reserve_depth, resync, leader_elect,
           lease_namespace, lease_name, lease_duration, renew_deadline, retry_period, identity, http_host, http_port, log_level):
    """Place pods with spec.schedulerName through the lead broker's graph scheduler."""
    import signal

    from fluxnode.scheduler.policies.policy import POLICIES

    setup_logging(log_level)
    if policy not in POLICIES:
        raise click.ClickException(f"--policy: unknown {policy!r} (one of {', '.join(POLICIES)})")
    if not uri and "/" not in rank_configmap:
        raise click.ClickException(f"--rank-configmap: expected NAMESPACE/NAME, got {rank_configmap!r}")
    if not retry_period < renew_deadline < lease_duration:
        raise click.ClickException("need --retry-period < --renew-deadline < --lease-duration")
    try:
        api_client = load_api_client(kubeconfig)
    except Exception as exc:
        raise click.ClickException(f"cannot load Kubernetes configuration: {exc}") from None
    config = BinderConfig(
        scheduler_name=scheduler_name, uri=uri, rank_configmap=rank_configmap, broker_port=broker_port, curve_cert=curve_cert, policy=policy, bind_workers=bind_workers, alloc_batch=alloc_batch,
        reserve_depth=reserve_depth, resync=resync, leader_elect=leader_elect, lease_namespace=lease_namespace,
        lease_name=lease_name, identity=identity, lease_duration=lease_duration, renew_deadline=renew_deadline,
        retry_period=retry_period, http_host=http_host, http_port=http_port,
    )
    try:
        b = Binder(api_client, config).start()
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    if b.health is not None:
        log.info("binder %s serving /healthz /readyz /metrics on %s:%d", b.identity, http_host, b.health.port)
    signal.signal(signal.SIGTERM, lambda *_: b.stop_event.set())
    frozen = False
    try:
        while not b.stop_event.wait(1):
            if not frozen and b.reconciled:
                # Everything alive once started (imported modules, the client's thousands
                # of model classes, the first list of pods and nodes) is moved out of the
                # cyclic GC's sight: each full collection would walk it again, and those
                # took a quarter of the binder's CPU in a burst. Frozen objects are still
                # freed by reference counting when dropped.
                gc.freeze()
                frozen = True
    except KeyboardInterrupt:
        pass
    b.stop()
