"""Issue 30's promise for workloads, checked from outside the binder: a restart of either
binder replica or of the leader loses no opted-in Job, admits none twice and keeps the order.

The same stance as invariants.py (which this module extends, and whose checker still judges
cores): it reads only what an operator can read, the Jobs, FluxJobs and pods through the
API server, ``sched.list`` from the leader, and the API server's own write order of the
Jobs (the resourceVersion of the first version of each Job with ``spec.suspend`` false, as
a watch delivers it). `check_workloads` is a pure function of a `WorkloadSnapshot`, so
its tests (tests/testing/test_workload_invariants.py) feed it hand-made broken states.

What "admitted" means here: the Job's ``spec.suspend`` went from true (the webhook stores
an opted-in Job suspended) to false (the binder resumes it once its whole set is allocated).

Violation kinds:
  job-lost          a Job, due to be judged, without its FluxJob (or the FluxJob of another
                    Job: its ownerReference names another uid)
  job-failed        a FluxJob Failed though its Job did not fail
  job-unfinished    a Job Complete, due, whose FluxJob is not Finished
  admitted-twice    a Job resumed twice (it was never suspended again), or holding two live
                    allocations in sched.list
  job-split         the running pods of one Job under more than one allocation
  order             a Job admitted before one of equal priority and shape created earlier
                    (creationTimestamp strictly earlier; within one of its whole seconds,
                    earlier in the order the caller created them, when it says: the
                    snapshot's `created`) that was not admitted before it

Allocations are matched to a Job by the leader's record alone: the ``group`` label the
binder gives a Job's allocation (``NAMESPACE/job/NAME.UID``), or the uid of one of its pods
in the ``pods`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxnode.testing.invariants import Violation

GROUP, KIND = "fluxnode.io", "FluxJob"
ALLOCATION_ANN = "fluxnode.io/allocation"
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")


@dataclass(frozen=True, slots=True)
class Admission:
    """What the Job watch saw of one Job: the resourceVersion of its first version not
    suspended (None: never admitted) and how many times it went from suspended to not."""

    first: int | None = None
    resumes: int = 0


@dataclass
class WorkloadSnapshot:
    jobs: list[dict]  # the opted-in Jobs as the API server lists them
    fluxjobs: list[dict]
    allocations: list[dict]  # sched.list's
    pods: list[dict]
    admissions: Mapping[str, Admission] = field(default_factory=dict)  # Job uid ->
    due: frozenset[str] = frozenset()  # Job uids old enough for their records to be judged
    created: tuple[str, ...] = ()  # Job names in the order the caller created them, if known
    failed_on_purpose: frozenset[str] = frozenset()  # Job uids the caller made fail


def _uid(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("uid") or ""


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _condition(job: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _job_of_pod(pod: Mapping[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return next((labels[k] for k in JOB_UID_LABELS if labels.get(k)), None)


def _running(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")) and not (
        (pod.get("metadata") or {}).get("deletionTimestamp"))


def shape(job: Mapping[str, Any]) -> tuple:
    """What a Job asks for, comparable: its pod count and its template's container
    requests (two Jobs of one shape fit exactly when the other would)."""
    spec = job.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    requests = tuple(tuple(sorted(((c.get("resources") or {}).get("requests") or {}).items()))
                     for c in containers)
    return spec.get("parallelism"), spec.get("completions"), requests


def priority(job: Mapping[str, Any]) -> tuple:
    tmpl = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return tmpl.get("priorityClassName"), tmpl.get("priority")


def check_workloads(snap: WorkloadSnapshot) -> list[Violation]:
    out: list[Violation] = []
    by_uid = {_uid(j): j for j in snap.jobs}
    records: dict[str, dict] = {}
    for fj in snap.fluxjobs:
        owners = [o.get("uid") for o in (fj.get("metadata") or {}).get("ownerReferences") or []
                  if o.get("kind") == "Job"]
        for uid in owners:
            records[uid] = fj
    for uid, job in sorted(by_uid.items(), key=lambda kv: _ref(kv[1])):
        record = records.get(uid)
        phase = ((record or {}).get("status") or {}).get("phase")
        if record is None:
            if uid in snap.due:
                out.append(Violation("job-lost", f"Job {_ref(job)} has no FluxJob"))
            continue
        if phase == "Failed" and uid not in snap.failed_on_purpose:
            out.append(Violation("job-failed", f"FluxJob {_ref(record)} is Failed but its Job "
                                 "was not made to fail"))
        if _condition(job, "Complete") and phase != "Finished" and uid in snap.due:
            out.append(Violation("job-unfinished", f"Job {_ref(job)} is Complete but its "
                                 f"FluxJob is {phase or 'without a phase'}"))
    out += _check_allocations(snap, by_uid)
    out += _check_order(snap.jobs, snap.admissions, snap.created)
    return out


def _check_allocations(snap: WorkloadSnapshot, by_uid: Mapping[str, dict]) -> list[Violation]:
    out: list[Violation] = []
    pods_of: dict[str, list[dict]] = {}
    job_of_pod: dict[str, str] = {}
    for pod in snap.pods:
        uid = _job_of_pod(pod)
        if uid in by_uid:
            pods_of.setdefault(uid, []).append(pod)
            job_of_pod[_uid(pod)] = uid
    groups = {}
    for uid, job in by_uid.items():
        meta = job.get("metadata") or {}
        groups[f"{meta.get('namespace') or 'default'}/job/{meta.get('name')}.{uid}"] = uid
    held: dict[str, list[int]] = {}
    for alloc in snap.allocations:
        if alloc.get("status") != "ALLOCATED":
            continue
        labels = alloc.get("labels") or {}
        owners = {groups[labels["group"]]} if labels.get("group") in groups else set()
        owners |= {job_of_pod[p] for p in labels.get("pods") or [] if p in job_of_pod}
        for uid in owners:
            held.setdefault(uid, []).append(int(alloc["id"]))
    for uid, ids in sorted(held.items()):
        if len(ids) > 1:
            out.append(Violation("admitted-twice", f"Job {_ref(by_uid[uid])} holds "
                                 f"{len(ids)} allocations: {sorted(ids)}"))
    for uid, admission in sorted(snap.admissions.items()):
        if uid in by_uid and admission.resumes > 1:
            out.append(Violation("admitted-twice", f"Job {_ref(by_uid[uid])} was resumed "
                                 f"{admission.resumes} times"))
    for uid, pods in sorted(pods_of.items()):
        under = {((p.get("metadata") or {}).get("annotations") or {}).get(ALLOCATION_ANN)
                 for p in pods if _running(p)}
        if len(under) > 1:
            out.append(Violation("job-split", f"the running pods of Job {_ref(by_uid[uid])} "
                                 f"are under allocations {sorted(map(str, under))}"))
    return out


def _check_order(jobs: Iterable[dict], admissions: Mapping[str, Admission],
                 created_order: tuple[str, ...] = ()) -> list[Violation]:
    out: list[Violation] = []
    rank = {name: i for i, name in enumerate(created_order)}

    def when(job: dict) -> tuple[str, float]:
        meta = job.get("metadata") or {}
        return meta.get("creationTimestamp") or "", rank.get(meta.get("name"), float("inf"))

    jobs = sorted(jobs, key=lambda j: (when(j), _ref(j)))
    for i, later in enumerate(jobs):
        got = admissions.get(_uid(later), Admission()).first
        if got is None:
            continue
        stamp, index = when(later)
        for earlier in jobs[:i]:
            e_stamp, e_index = when(earlier)
            if e_stamp > stamp or e_stamp == stamp and not e_index < index < float("inf"):
                continue
            if priority(earlier) != priority(later) or shape(earlier) != shape(later):
                continue
            first = admissions.get(_uid(earlier), Admission()).first
            if first is None or first > got:
                when = "not at all" if first is None else f"later (resourceVersion {first})"
                out.append(Violation(
                    "order", f"Job {_ref(later)} was admitted (resourceVersion {got}) before "
                    f"Job {_ref(earlier)}, created earlier with the same priority and shape, "
                    f"which was admitted {when}"))
    return out
