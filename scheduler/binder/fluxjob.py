"""The FluxJob record: one workload in fluxnode's queue, as a typed model and as its object.

A FluxJob (``fluxnode.io/v1alpha1``, CRD in daemonset/workloads/fluxjob-crd.yaml) is what
``kubectl get fluxjobs -A`` shows of the queue (issue 30). The binder writes one for each
Job the webhook admitted, named as the Job, in its namespace, owned by it (so the garbage
collector removes it with the Job). `FluxJob.from_job` builds it from the Job as stored:

- **pods**: the Job's pod count (job_shape.py: parallelism capped by completions);
- **per-pod requests**: the template's effective requests, summed as Kubernetes sums a
  pod's (pod_requests.py), and the graph slot one pod takes (`PodRequests.slot`);
- **priority**: the value of the template's PriorityClass, else the cluster's
  globalDefault class, else 0, as the Priority admission plugin gives a pod. A class that
  does not exist leaves the record *not queued* (`FluxJob.unqueued` says why and what to do;
  no priority in its spec): the plugin would refuse every pod of the Job ("no PriorityClass
  with name X was found"), so the Job could never run, but the class may be created later
  (the binder watches them) and then the Job is queued as any other;
- **queue**: the ``fluxnode.io/queue`` label.

`FluxJob.from_group` builds the record of a gated pod group (podgroup_records.py): its
workload is the PodGroup object that sizes it (owned by it, so collected with it) or, with
no object, the group as fluxnode names it (kind PodGroup, apiVersion fluxnode.io/v1alpha1,
no uid: the binder deletes that record when the group's pods are gone); pods is the group's
size, the requests one member's (the first by name), the priority the highest of its pods'
(each resolved by the Priority admission plugin), the queue its pods' label.

The spec is what the workload asks for and never changes (but for a group's size and
workload, which follow its PodGroup object when one comes); the status (written through the
status subresource) is where it stands: PHASES, its position in the queue, pods bound of
pods (the Job's pods now: its parallelism may be raised or lowered while it runs), the
nodes, the start (a reservation's start time when it cannot start now), a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluxnode.scheduler.binder.admission import QUEUE_LABEL
from fluxnode.scheduler.binder.job_shape import JobShapeError, is_indexed, job_pod_count
from fluxnode.scheduler.binder.pod_requests import PodRequestError, PodRequests, pod_requests
from fluxnode.scheduler.jobspec.builder import SlotKind

API_VERSION = "fluxnode.io/v1alpha1"
KIND = "FluxJob"
PHASES = ("Queued", "Reserved", "Admitted", "Running", "Finished", "Failed")
# the classes every API server has (scheduling.k8s.io, SystemPriorityClasses)
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


class FluxJobError(ValueError):
    """A Job fluxnode cannot queue as it is; the message names the Job and the field."""


@dataclass(frozen=True)
class PriorityClasses:
    """PriorityClass name -> value, and the globalDefault class's value (if one exists)."""

    values: dict[str, int] = field(default_factory=dict)
    global_default: int | None = None

    @classmethod
    def from_objects(cls, objects: list[dict]) -> PriorityClasses:
        """From PriorityClass objects as the API lists them (scheduling.k8s.io/v1)."""
        values: dict[str, int] = {}
        default = None
        for obj in objects:
            name = (obj.get("metadata") or {}).get("name")
            if name and isinstance(obj.get("value"), int):
                values[name] = obj["value"]
                if obj.get("globalDefault"):
                    default = obj["value"]
        return cls(values, default)

    def value(self, name: str | None) -> int:
        if not name:
            return self.global_default or 0
        if name in SYSTEM_PRIORITIES:
            return SYSTEM_PRIORITIES[name]
        if name not in self.values:
            raise FluxJobError(f"no PriorityClass named {name!r}")
        return self.values[name]


@dataclass(frozen=True)
class WorkloadRef:
    """The object a FluxJob is the record of."""

    api_version: str
    kind: str
    name: str
    uid: str = ""


@dataclass(frozen=True)
class FluxJobSpec:
    queue: str
    workload: WorkloadRef
    pods: int
    indexed: bool
    priority_class: str
    priority: int | None  # None: its PriorityClass does not exist (`FluxJob.unqueued`)
    requests: PodRequests
    slot: SlotKind

    def to_object(self) -> dict:
        workload = {"apiVersion": self.workload.api_version, "kind": self.workload.kind,
                    "name": self.workload.name}
        if self.workload.uid:
            workload["uid"] = self.workload.uid
        return {
            "queue": self.queue, "workload": workload, "pods": self.pods,
            "indexed": self.indexed, "priorityClassName": self.priority_class,
            **({} if self.priority is None else {"priority": self.priority}),
            "podRequests": {"cpu": f"{self.requests.millicpu}m",
                            "memory": str(self.requests.memory_bytes),
                            "gpus": self.requests.gpus},
            "slot": {"cores": self.slot.cores, "gpus": self.slot.gpus,
                     "memoryMiB": self.slot.memory_mib},
        }


@dataclass
class FluxJobStatus:
    phase: str = "Queued"
    position: int | None = None
    bound: int = 0
    nodes: str = ""
    start: str = ""  # RFC 3339, when a reservation says when it starts
    reason: str = ""
    allocation: int | None = None
    # the workload's pods now, when not its spec's (a Job whose parallelism changed while it
    # runs): what PODS counts bound pods of
    pods: int | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise FluxJobError(f"status.phase: {self.phase!r} is not one of {', '.join(PHASES)}")

    def to_object(self, pods: int) -> dict:
        if self.pods is not None:
            pods = self.pods
        status: dict = {"phase": self.phase, "boundPods": self.bound,
                        "pods": f"{self.bound}/{pods}"}
        optional = {"position": self.position, "nodes": self.nodes, "start": self.start,
                    "reason": self.reason, "allocation": self.allocation}
        status.update({k: v for k, v in optional.items() if v not in (None, "")})
        return status


@dataclass
class FluxJob:
    namespace: str
    name: str
    spec: FluxJobSpec
    status: FluxJobStatus = field(default_factory=FluxJobStatus)
    # why the workload is not queued at all (not asked for, holding nothing, behind no one
    # and blocking no one), and what to do; "" when it is queued
    unqueued: str = ""

    @classmethod
    def from_job(cls, job: dict, priorities: PriorityClasses) -> FluxJob:
        """The record of an opted-in Job (see the module's docstring)."""
        meta = job.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        where = f"Job {namespace}/{name}"
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            raise FluxJobError(f"{where}: metadata.labels[{QUEUE_LABEL}] names no queue")
        spec = job.get("spec") or {}
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        try:
            pods = job_pod_count(spec)
            requests = pod_requests({"metadata": {"namespace": namespace, "name": name},
                                     "spec": pod_spec})
        except (JobShapeError, PodRequestError) as exc:
            raise FluxJobError(f"{where}: {exc}") from None
        priority_class = pod_spec.get("priorityClassName") or ""
        unqueued = ""
        try:
            priority: int | None = priorities.value(priority_class)
        except FluxJobError:
            priority = None
            unqueued = (
                f"not queued: its pods' PriorityClass {priority_class!r} does not exist "
                f"(Kubernetes would refuse them); create it and the Job is queued (kubectl "
                f"create priorityclass {priority_class} --value=N)")
        workload = WorkloadRef(job.get("apiVersion") or "batch/v1", "Job", name,
                               meta.get("uid") or "")
        return cls(namespace, name, FluxJobSpec(
            queue=queue, workload=workload, pods=pods, indexed=is_indexed(spec),
            priority_class=priority_class, priority=priority, requests=requests,
            slot=requests.slot()), FluxJobStatus(reason=unqueued), unqueued)

    def to_object(self) -> dict:
        """The FluxJob object to create (its status is written through /status)."""
        meta: dict = {"name": self.name, "namespace": self.namespace,
                      "labels": {QUEUE_LABEL: self.spec.queue}}
        ref = self.spec.workload
        if ref.uid:  # the garbage collector deletes the record with its Job
            meta["ownerReferences"] = [{"apiVersion": ref.api_version, "kind": ref.kind,
                                        "name": ref.name, "uid": ref.uid,
                                        "blockOwnerDeletion": False}]
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
                "spec": self.spec.to_object(),
                "status": self.status.to_object(self.spec.pods)}

    def status_patch(self) -> dict:
        """A merge patch of the status subresource with the current status."""
        return {"status": self.status.to_object(self.spec.pods)}

    @classmethod
    def from_group(cls, namespace: str, name: str, queue: str, workload: WorkloadRef,
                   size: int, pods: list[dict]) -> FluxJob:
        """The record of a gated pod group of `size` pods, `pods` its members so far (at
        least one; see the module's docstring). Raises FluxJobError naming a bad pod."""
        if not pods:
            raise FluxJobError(f"pod group {namespace}/{workload.name}: no pods")
        first = min(pods, key=lambda p: (p.get("metadata") or {}).get("name") or "")
        pod_spec = first.get("spec") or {}
        try:
            requests = pod_requests(first)
        except PodRequestError as exc:
            raise FluxJobError(f"pod group {namespace}/{workload.name}: {exc}") from None
        priority = max(int((p.get("spec") or {}).get("priority") or 0) for p in pods)
        return cls(namespace, name, FluxJobSpec(
            queue=queue, workload=workload, pods=size, indexed=False,
            priority_class=pod_spec.get("priorityClassName") or "", priority=priority,
            requests=requests, slot=requests.slot()))
