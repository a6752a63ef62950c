"""FluxJob records of gated pod groups: `kubectl get fluxjobs -A` shows them beside Jobs.

Plain pods opted in with ``fluxnode.io/queue`` and a declared group (a group label or
Volcano's annotation; podgroup.py) are gated by the webhook and placed as one by the
scheduling cycle. This module gives each such group a FluxJob (fluxjob.py
`FluxJob.from_group`), written by the leader after every scheduling cycle from what that
cycle left: the members this replica's pod informer sees (group_members.py), the group in
the cluster cache (its place in the scheduling queue, whether it is placed) and the last
reason its pods were told (``BinderContext.reported``). Status, from the group's live pods:

- **Queued**: not placed; POSITION is its place in the one queue of Jobs and groups
  (workload_queue.py; numbered by the scheduling cycle's last walk; absent while it is
  incomplete, its PodGroup is missing, or it has too many members), REASON the message its
  pods were last given, or what it waits for;
- **Reserved**: the head of the queue (the first workload that does not fit, workload_queue.py):
  its resources are booked for it, START is when (its pods' activeDeadlineSeconds are its
  walltime, walltime.py), or empty when no start is known;
- **Admitted**: placed, or some of its pods bound, not all; **Running**: as many pods bound
  as its size;
- **Finished** / **Failed** once no member is live: all that ended Succeeded, or not.

PODS is bound/size, NODES the bound pods' nodes. The record is named after the group
(podgroup.py `record_name`) and labelled ``fluxnode.io/podgroup`` so a new leader finds the
records of groups whose pods went while it was not leading, and deletes them; a record owned by its
PodGroup object is also collected with that object. When the FluxJob CRD is not installed
the groups are placed all the same (logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.api_client import status_message
from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.binder.admission import QUEUE_LABEL
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.fluxjob import API_VERSION, FluxJob, FluxJobError, WorkloadRef
from fluxnode.scheduler.binder.group_members import GroupMembers, Member
from fluxnode.scheduler.binder.podgroup import GroupKey, PodGroupError, group_of, record_name
from fluxnode.scheduler.binder.queue import reserved_reason, rfc3339
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder")

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
RECORD_LABEL = "fluxnode.io/podgroup"  # on a group's record: the group's key kind


@dataclass(frozen=True)
class GroupView:
    """A group's status as this cycle leaves it (see the module's docstring)."""

    phase: str
    bound: int
    nodes: str
    position: int | None
    reason: str
    start: str = ""


@dataclass
class Record:
    record: FluxJob
    created: bool = False
    written: dict | None = None


def view(members: list[Member], size: int, placed: bool, position: int | None,
         reason: str, reserved: tuple[float | None] | None = None) -> GroupView:
    """The status of a group of `size` from its members (pure: the records' phases);
    `reserved`: (its reservation's start or None) when it is the queue's reserved head."""
    live = [m for m in members if m.live]
    bound = [m for m in live if m.node]
    nodes = hostlist.encode(sorted({m.node for m in bound}))
    if not live:
        ok = all(m.phase == "Succeeded" for m in members)
        return GroupView("Finished" if ok else "Failed", 0, "", None, "")
    if len(bound) >= size:
        return GroupView("Running", len(bound), nodes, None, "")
    if bound or placed:
        return GroupView("Admitted", len(bound), nodes, None, "")
    if reserved is not None:
        (start,) = reserved
        return GroupView("Reserved", 0, "", position, reserved_reason(start),
                         rfc3339(start) if start is not None else "")
    return GroupView("Queued", 0, "", position, reason)


class PodGroupRecords:
    def __init__(self, ctx: BinderContext, members: GroupMembers, custom: CustomObjectsApi,
                 positions: Callable[[], dict[GroupKey, int]]):
        self.ctx, self.members, self.custom = ctx, members, custom
        self.positions = positions  # the last walk's POSITIONs (scheduling_cycle.py)
        self.records: dict[GroupKey, Record] = {}
        self._swept = False  # records left by a former leader checked
        self._no_crd_logged = False

    def reconciled(self) -> None:
        """This replica (again) leads: what it wrote as a former leader may be stale."""
        self.records.clear()
        self._swept = False

    def run(self) -> None:
        """After a scheduling cycle (leader only): create, update and delete records."""
        groups = {k: ms for k, ms in self.members.snapshot().items() if self._gated(ms)}
        if not groups and not self.records and self._swept:
            return
        if not self._swept:
            self._sweep(groups)
        order = self.positions()
        for key, members in groups.items():
            self._update(key, members, order.get(key))
        for key in [k for k in self.records if k not in groups]:
            self._delete(key, self.records.pop(key).record)

    def _gated(self, members: list[Member]) -> bool:
        """Pods opted in with the queue label and placed by this binder."""
        return any(
            ((m.raw.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
            and (m.raw.get("spec") or {}).get("schedulerName") == self.ctx.state.scheduler_name
            for m in members)

    def _update(self, key: GroupKey, members: list[Member], position: int | None) -> None:
        state = self.ctx.state
        sample = min(members, key=lambda m: m.name).raw
        try:
            ident = group_of(sample, podgroups=state.podgroups)
        except PodGroupError as exc:
            ident, problem = None, str(exc)
        else:
            problem = ""
        size = ident.size if ident is not None else 1
        group = state.groups.get(key)
        tracked = self.records.get(key)
        if tracked is None:
            tracked = self._create(key, members, ident, size)
            if tracked is None:
                return
        workload = self._workload(key, ident)
        spec = tracked.record.spec
        if (spec.pods, spec.workload) != (size, workload):  # its PodGroup came, or changed
            tracked.record.spec = replace(spec, pods=size, workload=workload)
            self._write_spec(tracked)
        live_pending = sorted((m for m in members if m.live and not m.node), key=lambda m: m.name)
        reason = problem or (ident.waiting if ident is not None else "")
        if not reason and group is not None and group.excess:
            reason = (f"group {key.namespace}/{key.name} has {size + group.excess} pods but "
                      f"its size is {size}")
        if not reason:
            said = [self.ctx.reported.get(m.uid) for m in live_pending]
            reason = next((s[1] for s in said if s is not None), "")
        live = sum(1 for m in members if m.live)
        if not reason and live < size:
            reason = f"waiting for group {key.namespace}/{key.name}: {live} of {size} pods exist"
        reservations = self.ctx.reservations
        reserved = (reservations.starts.get(key),) if key in reservations.held else None
        now = view(members, size, bool(group is not None and group.placed), position, reason,
                   reserved)
        record = tracked.record
        status = record.status
        status.phase, status.position, status.bound = now.phase, now.position, now.bound
        status.nodes, status.reason, status.start = now.nodes, now.reason, now.start
        self._write_status(key, tracked)

    def _create(self, key: GroupKey, members: list[Member], ident, size: int) -> Record | None:
        sample = min(members, key=lambda m: m.name).raw
        queue = ((sample.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or ""
        try:
            record = FluxJob.from_group(key.namespace, record_name(key), queue,
                                        self._workload(key, ident), size,
                                        [m.raw for m in members])
        except FluxJobError as exc:
            log.warning("no record for %s: %s", key, exc)
            return None
        body = record.to_object()
        body["metadata"]["labels"][RECORD_LABEL] = key.kind
        tracked = Record(record)
        try:
            kube_raw.call(self.custom.create_namespaced_custom_object, GROUP, VERSION,
                          key.namespace, PLURAL, body)
            tracked.created = True
        except ApiException as exc:
            if exc.status == 409:
                tracked.created = True  # a former leader's
            elif exc.status == 404:
                if not self._no_crd_logged:
                    log.warning("the FluxJob CRD is not installed: pod groups are placed "
                                "without their records (kubectl apply -k daemonset/workloads/)")
                    self._no_crd_logged = True
            else:
                log.warning("cannot create FluxJob %s/%s: %s", key.namespace, record.name,
                            status_message(exc))
                return None
        self.records[key] = tracked
        return tracked

    @staticmethod
    def _workload(key: GroupKey, ident) -> WorkloadRef:
        """The PodGroup object that sizes the group, else the group as fluxnode names it."""
        obj = ident.podgroup if ident is not None else None
        if obj is not None:
            return WorkloadRef(obj.kind.api_version, obj.kind.kind, obj.name, obj.uid)
        return WorkloadRef(API_VERSION, "PodGroup", key.name)

    def _write_spec(self, tracked: Record) -> None:
        """The size and workload now (a PodGroup created after the record sizes it and owns
        it from then on), as a merge patch of the record."""
        if not tracked.created:
            return
        body = tracked.record.to_object()
        patch = {"metadata": {"ownerReferences": body["metadata"].get("ownerReferences")},
                 "spec": body["spec"]}
        try:
            kube_raw.call(self.custom.patch_namespaced_custom_object, GROUP, VERSION,
                          tracked.record.namespace, PLURAL, tracked.record.name, patch)
        except ApiException as exc:
            log.warning("cannot update FluxJob %s/%s: %s", tracked.record.namespace,
                        tracked.record.name, status_message(exc))

    def _write_status(self, key: GroupKey, tracked: Record) -> None:
        record = tracked.record
        body = record.status_patch()
        if not tracked.created or body == tracked.written:
            return
        old = (tracked.written or {}).get("status") or {}
        patch = {"status": {**{k: None for k in old}, **body["status"]}}
        try:
            kube_raw.call(self.custom.patch_namespaced_custom_object_status, GROUP, VERSION,
                          record.namespace, PLURAL, record.name, patch)
            tracked.written = body
        except ApiException as exc:
            if exc.status == 404:  # collected with its PodGroup, or deleted: made again
                self.records.pop(key, None)
            log.warning("cannot write the status of FluxJob %s/%s: %s", record.namespace,
                        record.name, status_message(exc))

    def _delete(self, key: GroupKey, record: FluxJob) -> None:
        try:
            kube_raw.call(self.custom.delete_namespaced_custom_object, GROUP, VERSION,
                          record.namespace, PLURAL, record.name)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete FluxJob %s/%s: %s", record.namespace, record.name,
                            status_message(exc))

    def _sweep(self, groups: dict[GroupKey, list[Member]]) -> None:
        """Delete the group records whose pods all went while this replica did not lead."""
        try:
            listed = kube_raw.call(self.custom.list_cluster_custom_object, GROUP, VERSION,
                                   PLURAL, label_selector=RECORD_LABEL)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot list pod group records: %s", status_message(exc))
                return
            listed = {}
        names = {(k.namespace, record_name(k)) for k in groups}
        for obj in (listed or {}).get("items") or []:
            meta = obj.get("metadata") or {}
            where = (meta.get("namespace") or "", meta.get("name") or "")
            if where not in names:
                try:
                    kube_raw.call(self.custom.delete_namespaced_custom_object, GROUP, VERSION,
                                  where[0], PLURAL, where[1])
                except ApiException as exc:
                    if exc.status != 404:
                        log.warning("cannot delete FluxJob %s/%s: %s", *where,
                                    status_message(exc))
        self._swept = True
