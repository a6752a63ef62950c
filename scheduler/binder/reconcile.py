"""The cache and its reconcile from the leader: state sync on start, takeover or leader restart.

kube-scheduler rebuilds its cache from the API server; the binder's allocations
live in the lead broker's scheduler service, so a new leader (or a binder that lost
an answer when the broker restarted) rebuilds them from ``sched.list``: each
allocation's labels name its group and pod UIDs, ``kinds`` where each slot kind
landed. Bound pods keep their node and the cores/GPUs their annotations name;
unbound pods get exactly their planned share of what is left and are bound again.
Allocations that are not ours to keep (reservations, outside-usage pins, groups
whose pods are gone) are cancelled; the outside-usage pins are made again by the
next scheduling cycle. Capacity comes from ``sched.resource-status`` here and on
every resync tick.
"""

from __future__ import annotations

import logging

from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binding_cycle import BindingCycle
from fluxnode.scheduler.binder.cluster_state import GroupAllocation, NodeCapacity, PodInfo
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.pod_requests import PodRequestError, pod_requests
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.slot_assignment import AssignmentError, PodSlot, assign, assign_kinds

log = logging.getLogger("fluxnode.binder")

BIND_DRAIN_TIMEOUT = 30.0  # how long a reconcile waits for bindings in flight to land


class Reconciler:
    def __init__(self, ctx: BinderContext, binding: BindingCycle):
        self.ctx = ctx
        self.binding = binding

    def refresh_capacity(self) -> None:
        """Each up node's rank, cores, GPUs and memory as the service's graph has them."""
        status = self.ctx.sched.rpc("sched.resource-status", {})
        self.ctx.sched_ok = True
        capacity = {
            n["hostname"]: NodeCapacity(n["rank"], n["cores"], n["gpus"], n.get("memory_mib", 0))
            for n in status.get("nodes", [])
            if n.get("status", "up") == "up"
        }
        self.ctx.state.set_capacity(capacity)

    def reconcile(self) -> None:
        """Rebuild our allocations from the service and the pods (start or takeover)."""
        ctx = self.ctx
        self.binding.wait_idle(
            BIND_DRAIN_TIMEOUT
        )  # let bindings in flight land before rebuilding from the API
        ctx.state = ctx.state.rebuilt()
        self.binding.inflight.clear()
        ctx.reservations.release_all()
        self.refresh_capacity()
        answer = ctx.sched.rpc("sched.list", {"labels": {"owner": ctx.owner}})
        ctx.state.outside.clear()
        ctx.state.node_generation += 1
        ctx.state.dirty_nodes.update(ctx.state.nodes)
        pending_binds: list[tuple[int, str, str, PodSlot]] = []
        for a in answer.get("allocations", []):
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

    def _rebuild(self, a: dict, pending_binds: list) -> dict | None:
        """Adopt one of our group allocations: bound pods keep their node and cores, the
        unbound ones get what is left. A heterogeneous group's allocation says where each
        slot kind landed (`kinds`, kept by the service across restarts), so its unbound
        pods get exactly their planned share (`assign_kinds`); only an allocation without
        it (an older service) is split first-fit over the per-node totals."""
        state = self.ctx.state
        labels = a["labels"]
        key = GroupKey.parse(labels["group"])
        uids = list(labels.get("pods") or [])
        by_host = {n["hostname"]: n for n in a["nodes"]}
        pods: dict[str, int] = {}
        unbound: dict[str, tuple[int, int, int]] = {}
        free_nodes = {n["rank"]: dict(n) for n in a["nodes"]}
        kinds = kind_shares(a.get("kinds"))
        for uid in uids:
            pod = state.pods.get(uid)
            if pod is None:
                continue
            shape = pod_shape(pod)
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
                    share = kinds.get(shape, {}).get(rank) or next(
                        (k[rank] for k in kinds.values() if rank in k), None
                    )
                    if share is not None:
                        take_share(share, used, shape[2])
            else:
                unbound[uid] = shape
        if unbound:
            try:
                slots = None
                if kinds is not None:
                    try:
                        slots = assign_kinds(
                            unbound,
                            {shape: list(per_rank.values()) for shape, per_rank in kinds.items()},
                        )
                    except (
                        AssignmentError
                    ):  # pods that match no kind (changed requests): the totals may still do
                        slots = None
                if slots is None:
                    slots = assign(unbound, list(free_nodes.values()))
            except AssignmentError as exc:
                log.warning(
                    "allocation %d of %s: cannot split what is left among its %d unbound pods "
                    "(%s); "
                    "they are asked for again",
                    a["id"],
                    key,
                    len(unbound),
                    exc,
                )
                slots = {}
            for uid, slot in slots.items():
                pods[uid] = slot.rank
                pending_binds.append((a["id"], uid, str(key), slot))
        live_ranks = set(pods.values())
        dead_ranks = [n["rank"] for n in a["nodes"] if n["rank"] not in live_ranks]
        if not pods:
            self.ctx.cancel(a["id"], None)
            return None
        if dead_ranks:
            self.ctx.cancel(a["id"], dead_ranks)
        state.adopt(GroupAllocation(a["id"], key, pods))
        return pods


def pod_shape(pod: PodInfo) -> tuple[int, int, int]:
    """(cores, GPUs, memory MiB) of a pod's slot; one core for an unparsable pod (reported at
    placement)."""
    try:
        req = pod_requests(pod.raw)
    except PodRequestError:
        return 1, 0, 0
    return max(1, req.cores), req.gpus, req.memory_mib


def kind_shares(kinds: list[dict] | None) -> dict[tuple[int, int, int], dict[int, dict]] | None:
    """A listed allocation's per-kind placement as pod shape -> rank -> that kind's share
    there (copies, to be taken from); None when there is none to use (one kind, an older
    service, or two kinds of one shape, which the binder never asks for)."""
    if not kinds or any(not isinstance(k.get("slot"), dict) for k in kinds):
        return None
    out: dict[tuple[int, int, int], dict[int, dict]] = {}
    for kind in kinds:
        slot = kind["slot"]
        shape = (
            int(slot.get("cores") or 0),
            int(slot.get("gpus") or 0),
            int(slot.get("memory_mib") or 0),
        )
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
