"""The cache and its reconcile from the leader: state sync on start, takeover or leader restart.

kube-scheduler rebuilds its cache from the API server; the binder's allocations
live in the lead broker's scheduler service, so a new leader (or a binder that lost
an answer when the broker restarted) rebuilds them from ``sched.list``: each
allocation's labels name its group and pod UIDs, ``kinds`` and ``slots`` each pod's
slot. Bound pods keep their node and the cores/GPUs their annotations name;
unbound pods get a slot of their shape that no bound pod uses and are bound again.
Allocations that are not ours to keep (reservations, outside-usage pins, groups
whose pods are gone) are cancelled; the outside-usage pins are made again by the
next scheduling cycle. Capacity comes from ``sched.resource-status`` here and on
every resync tick.

Adoption: a leader that comes back without our allocations (a new statedir: rank 0
moved, its journal lost or moved aside) would hand the cores of our running pods
out again. So every reconcile first re-registers each bound, running pod of ours
that no listed allocation covers with ``sched.adopt``, holding exactly the cores
and GPUs its Binding's annotations name, one allocation per old allocation id
with the labels a group allocation has (a later ``sched.list`` finds it); only
then does the scheduling cycle place new pods. The loop notices such a leader on
any failed call (an answer lost: reconcile) and on every resync tick, when the
leader's allocated R does not cover what our running pods use (`forgotten`).
A pod that cannot be adopted (another allocation holds its cores: EBUSY; a rank
outside the instance: EINVAL) is logged and counted as outside usage, never
retried in a loop.

A running Job that grew (its parallelism raised: fluxjob_loop.py) holds two allocations,
each labelled with the Job's group; each one some pod's Binding names is rebuilt and joined
into the Job's one slot ledger (`ClusterState.adopt`), the first's slots numbered first. A
growth none of whose pods is bound yet is cancelled like any unused FluxJob allocation: the
Job is then short of those slots again, and the FluxJob loop asks for them anew at its place
in the queue.
"""

from __future__ import annotations

import errno
import logging
from collections import defaultdict

from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import R_lite_ranks, RError
from fluxnode.scheduler.binder.binding_cycle import BindingCycle
from fluxnode.scheduler.binder.cluster_state import (
    GROUP_ANNOTATION,
    GroupAllocation,
    NodeCapacity,
    PodInfo,
    Share,
)
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.job_slots import JobSlots
from fluxnode.scheduler.binder.pod_requests import PodRequestError, pod_requests
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.slot_assignment import (
    AssignmentError,
    PodSlot,
    assign,
    indexes,
    slots_by_shape,
)
from fluxnode.scheduler.jobspec.builder import SlotKind

log = logging.getLogger("fluxnode.binder")

BIND_DRAIN_TIMEOUT = 30.0  # how long a reconcile waits for bindings in flight to land


class Reconciler:
    def __init__(self, ctx: BinderContext, binding: BindingCycle):
        self.ctx = ctx
        self.binding = binding
        self.status: dict = {}  # the last sched.resource-status answer
        self._nodes_version: str | None = None  # its node list's version (`refresh_capacity`)
        self.unadoptable: set[str] = set()  # pod uids the leader refused to adopt
        self.adopted = 0  # pods re-registered with a leader since start (for tests, metrics)

    def refresh_capacity(self, again: bool = False) -> None:
        """Each up node's rank, cores, GPUs and memory as the service's graph has them. The
        node list comes only when it changed since the last one read (the service's
        `nodes_since`: every resync read and rebuilt 5,000 nodes, ~70 ms of the loop's CPU
        in bench/workloads.py); `again`: whatever it is (a reconcile starts afresh)."""
        ask = {} if again or self._nodes_version is None else {"nodes_since": self._nodes_version}
        status = self.ctx.sched.rpc("sched.resource-status", ask)
        self.ctx.sched_ok = True
        self.status = status
        if "nodes" in status or not ask:
            capacity = {
                n["hostname"]: NodeCapacity(n["rank"], n["cores"], n["gpus"],
                                            n.get("memory_mib", 0))
                for n in status.get("nodes", [])
                if n.get("status", "up") == "up"
            }
            self.ctx.state.set_capacity(capacity)
            self._nodes_version = status.get("nodes_version")
        self.ctx.drains.observe(status)

    def reconcile(self) -> None:
        """Rebuild our allocations from the service and the pods (start or takeover)."""
        ctx = self.ctx
        self.binding.wait_idle(
            BIND_DRAIN_TIMEOUT
        )  # let bindings in flight land before rebuilding from the API
        ctx.state = ctx.state.rebuilt()
        self.binding.clear()
        ctx.reservations.release_all()
        self.refresh_capacity(again=True)
        answer = ctx.sched.rpc("sched.list", {"labels": {"owner": ctx.owner}})
        ctx.state.outside.clear()
        ctx.state.node_generation += 1
        ctx.state.dirty_nodes.update(ctx.state.nodes)
        pending_binds: list[tuple[int, str, str, PodSlot]] = []
        listed = [self._as_group(a) for a in answer.get("allocations", [])]
        listed += self._adopt_forgotten(listed)
        # by id: a Job that grew holds two allocations, and its ledger numbers the first's
        # slots first (index i's slot is slot i, as before the restart)
        for a in sorted(listed, key=lambda a: a["id"]):
            labels = a.get("labels") or {}
            if a["status"] != "ALLOCATED" or labels.get("kind") != "group":
                ctx.cancel(a["id"], None)
                continue
            if a["id"] in ctx.state.allocations:
                continue
            self._rebuild(a, pending_binds)
        ctx.state.changed = True
        log.info(
            "reconciled: %d allocations adopted, %d pods to bind",
            len(ctx.state.allocations),
            len(pending_binds),
        )
        self.binding.submit(
            [
                (ctx.state.pods[uid], slot, alloc_id, group)
                for alloc_id, uid, group, slot in pending_binds
                if uid in ctx.state.pods
            ]
        )

    def _as_group(self, a: dict) -> dict:
        """A FluxJob's allocation (made before its pods existed, so its labels name none) as
        a group's: its pods are ours whose Binding names it; one none took is cancelled."""
        labels = a.get("labels") or {}
        if labels.get("kind") != "fluxjob":
            return a
        mine = str(a["id"])
        pods = [uid for uid, p in self.ctx.state.pods.items() if p.allocation == mine]
        return {**a, "labels": {**labels, "kind": "group" if pods else "fluxjob", "pods": pods},
                "job": True}

    def forgotten(self) -> list[str]:
        """Our running pods whose cores or GPUs the leader's allocated R (from the last
        resource-status) does not hold: the leader restarted without them."""
        try:
            held = R_lite_ranks(self.status.get("allocated") or {"execution": {"R_lite": []}})
        except RError as exc:
            log.warning("sched.resource-status: allocated R unreadable (%s); not checked", exc)
            return []
        state = self.ctx.state
        out = []
        for uid, share in state.running.items():
            if uid in self.unadoptable:
                continue
            ids = held.get(share.rank, {})
            if not share.cores <= set(ids.get("core", ())) or not share.gpus <= set(
                ids.get("gpu", ())
            ):
                pod = state.pods.get(uid)
                out.append(pod.ref if pod else uid)
        return out

    def _adopt_forgotten(self, listed: list[dict]) -> list[dict]:
        """Re-register with the leader our running pods no listed allocation covers, with
        exactly the ids they run on; returns the new allocations (as sched.list lists them)."""
        covered = {
            uid
            for a in listed
            if a.get("status") == "ALLOCATED"
            for uid in (a.get("labels") or {}).get("pods") or []
        }
        state = self.ctx.state
        by_alloc: dict[tuple[str, str], list[str]] = defaultdict(list)
        for uid, _share in sorted(state.running.items()):
            pod = state.pods.get(uid)
            if uid in covered or uid in self.unadoptable or pod is None:
                continue
            ann = pod.raw.get("metadata", {}).get("annotations") or {}
            group = ann.get(GROUP_ANNOTATION) or str(GroupKey(pod.namespace, "pod", uid))
            by_alloc[(pod.allocation or "", group)].append(uid)
        adopted: list[dict] = []
        for (old_id, group), uids in by_alloc.items():
            a = self._adopt(group, uids)
            if a is None and len(uids) > 1:  # one pod's conflict must not cost the others
                found = [self._adopt(group, [uid]) for uid in uids]
                adopted += [x for x in found if x is not None]
            elif a is not None:
                adopted.append(a)
            log.info("adopted %d running pods of allocation %s (%s) into the leader",
                     len(uids), old_id, group)
        return adopted

    def _adopt(self, group: str, uids: list[str]) -> dict | None:
        """One sched.adopt for `uids` (our running pods of one group); None when refused."""
        state = self.ctx.state
        nodes: dict[int, dict] = {}
        for uid in uids:
            share: Share = state.running[uid]
            pod = state.pods[uid]
            node = nodes.setdefault(
                share.rank,
                {"rank": share.rank, "hostname": pod.node, "cores": set(), "gpus": set(),
                 "memory_mib": 0},
            )
            node["cores"] |= share.cores
            node["gpus"] |= share.gpus
            node["memory_mib"] += pod_shape(pod).memory_mib
        labels = {"owner": self.ctx.owner, "kind": "group", "group": group, "pods": uids}
        payload = {
            "nodes": [
                {"rank": n["rank"], "cores": idset.encode(sorted(n["cores"])),
                 "gpus": idset.encode(sorted(n["gpus"])), "memory_mib": n["memory_mib"]}
                for n in nodes.values()
            ],
            "labels": labels,
        }
        try:
            answer = self.ctx.sched.rpc("sched.adopt", payload)
        except RPCError as exc:
            if len(uids) > 1 and exc.errnum == errno.EBUSY:
                return None  # tried again pod by pod
            self.unadoptable.update(uids)
            refs = ", ".join(state.pods[u].ref for u in uids)
            log.error("the leader refused to adopt %s (%s); counted as outside usage, "
                      "their cores may be handed out again", refs, exc.errstr)
            return None
        self.adopted += len(uids)
        hostnames = {n["rank"]: n["hostname"] for n in nodes.values()}
        out = dict(answer)
        out["labels"] = labels
        out["nodes"] = [
            {**n, "hostname": n.get("hostname") or hostnames.get(n["rank"], "")}
            for n in answer.get("nodes") or []
        ]
        return out

    def _rebuild(self, a: dict, pending_binds: list) -> dict | None:
        """Adopt one of our group allocations: bound pods keep their node and cores, each
        unbound one gets a slot of its shape that no bound pod uses (the service keeps
        every slot through restarts). Pods without a slot (an adopted allocation holds
        only what its pods ran on) are asked for again."""
        state = self.ctx.state
        labels = a["labels"]
        key = GroupKey.parse(labels["group"])
        by_host = {n["hostname"]: n for n in a["nodes"]}
        free = slots_by_shape(a.get("kinds") or [], a.get("slots") or [])
        pods: dict[str, int] = {}
        unbound: dict[str, SlotKind] = {}
        for uid in labels.get("pods") or []:
            pod = state.pods.get(uid)
            if pod is None:
                continue
            if not pod.node:
                unbound[uid] = pod_shape(pod)
                continue
            node = by_host.get(pod.node)
            if node is None:
                continue  # bound elsewhere by someone else: counted as outside usage
            pods[uid] = node["rank"]
            share = state.running.get(uid)
            if share is not None:  # its slot is taken
                for shape, slots in free.items():
                    free[shape] = [s for s in slots if s.rank != share.rank
                                   or not s.ids()[0] & share.cores]
        if unbound:
            try:
                slots = assign(unbound, free,
                               indexes(state.pods[uid] for uid in unbound))
            except AssignmentError as exc:
                log.warning("allocation %d of %s: no slot for its %d unbound pods (%s); they "
                            "are asked for again", a["id"], key, len(unbound), exc)
                slots = {}
            for uid, slot in slots.items():
                pods[uid] = slot.rank
                pending_binds.append((a["id"], uid, str(key), slot))
        live_ranks = set(pods.values())
        slots = None
        if a.get("job") and pods:  # a running Job's: its ledger, free slots kept (job_slots.py)
            slots = JobSlots.of_allocation(a["id"], key, a.get("kinds") or [],
                                           a.get("slots") or [])
            running = {uid: state.running[uid] for uid in pods if uid in state.running}
            slots.place_running({u: (state.pods[u].node, s.cores, s.gpus)
                                 for u, s in running.items()},
                                indexes(state.pods[u] for u in running))
            live_ranks |= set(slots.kept_ranks())
        dead_ranks = [n["rank"] for n in a["nodes"] if n["rank"] not in live_ranks]
        if not pods:
            self.ctx.cancel(a["id"], None)
            return None
        if dead_ranks:
            self.ctx.cancel(a["id"], dead_ranks)
        state.adopt(GroupAllocation(a["id"], key, pods), slots)
        return pods


def pod_shape(pod: PodInfo) -> SlotKind:
    """A pod's slot; one core for an unparsable pod (reported at placement)."""
    try:
        return pod_requests(pod.raw).slot()
    except PodRequestError:
        return SlotKind(1)
