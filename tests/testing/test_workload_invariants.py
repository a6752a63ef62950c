"""The workload checker on hand-made states: a sound one passes, each broken one is named
with its kind (so a checker that never complains fails here)."""

from __future__ import annotations

from fluxnode.testing.workload_invariants import Admission, WorkloadSnapshot, check_workloads


def job(name: str, created: str, *, cpu: str = "1", complete: bool = False) -> dict:
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if complete else {}
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}",
                         "creationTimestamp": created},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}},
            "status": status}


def fluxjob(name: str, phase: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default",
                         "ownerReferences": [{"kind": "Job", "uid": f"u-{name}"}]},
            "status": {"phase": phase}}


def pod(name: str, job_name: str, alloc: int) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"p-{name}",
                         "labels": {"batch.kubernetes.io/controller-uid": f"u-{job_name}"},
                         "annotations": {"fluxnode.io/allocation": str(alloc)}},
            "spec": {"nodeName": "node0"}, "status": {"phase": "Running"}}


def alloc(alloc_id: int, job_name: str | None = None, pods: tuple[str, ...] = ()) -> dict:
    labels: dict = {"pods": [f"p-{p}" for p in pods]}
    if job_name:
        labels["group"] = f"default/job/{job_name}.u-{job_name}"
    return {"id": alloc_id, "status": "ALLOCATED", "labels": labels, "nodes": []}


def sound() -> WorkloadSnapshot:
    jobs = [job("a", "2026-11-28T10:00:00Z", complete=True), job("b", "2026-11-28T10:00:01Z"),
            job("c", "2026-11-28T10:00:02Z")]
    return WorkloadSnapshot(
        jobs=jobs,
        fluxjobs=[fluxjob("a", "Finished"), fluxjob("b", "Running"), fluxjob("c", "Queued")],
        allocations=[alloc(7, "b")],
        pods=[pod("b-0", "b", 7), pod("b-1", "b", 7)],
        admissions={"u-a": Admission(10, 1), "u-b": Admission(20, 1)},
        due=frozenset({"u-a", "u-b", "u-c"}))


def kinds(snap: WorkloadSnapshot) -> list[str]:
    return [v.kind for v in check_workloads(snap)]


def test_a_sound_state_passes():
    assert check_workloads(sound()) == []


def test_a_job_without_its_fluxjob_is_lost_once_due():
    snap = sound()
    snap.fluxjobs = snap.fluxjobs[:2]
    assert kinds(snap) == ["job-lost"]
    snap.due = frozenset({"u-a", "u-b"})
    assert kinds(snap) == []


def test_failed_and_unfinished_records():
    snap = sound()
    snap.fluxjobs[2] = fluxjob("c", "Failed")
    assert kinds(snap) == ["job-failed"]
    snap.failed_on_purpose = frozenset({"u-c"})
    assert kinds(snap) == []
    snap.fluxjobs[0] = fluxjob("a", "Running")
    assert kinds(snap) == ["job-unfinished"]


def test_two_allocations_or_two_resumes_are_admitted_twice():
    snap = sound()
    snap.allocations.append(alloc(9, pods=("b-1",)))  # found through its pod's uid
    [v] = check_workloads(snap)
    assert v.kind == "admitted-twice" and "[7, 9]" in v.detail
    snap = sound()
    snap.admissions = {**snap.admissions, "u-b": Admission(20, 2)}
    assert kinds(snap) == ["admitted-twice"]


def test_pods_of_one_job_under_two_allocations_are_split():
    snap = sound()
    snap.pods[1] = pod("b-1", "b", 8)
    assert kinds(snap) == ["job-split"]


def test_order_of_equal_jobs_is_creation_order():
    snap = sound()
    snap.admissions = {"u-a": Admission(10, 1), "u-c": Admission(20, 1)}  # c before b
    [v] = check_workloads(snap)
    assert v.kind == "order" and "default/c" in v.detail and "default/b" in v.detail
    snap.admissions = {"u-a": Admission(30, 1), "u-b": Admission(20, 1)}  # b before a
    assert kinds(snap) == ["order"]


def test_order_ignores_other_shapes_and_equal_creation_seconds():
    snap = sound()
    snap.jobs[1] = job("b", "2026-11-28T10:00:01Z", cpu="2")  # another shape
    snap.admissions = {"u-a": Admission(10, 1), "u-c": Admission(20, 1)}
    assert kinds(snap) == []
    snap = sound()
    snap.jobs[2] = job("c", "2026-11-28T10:00:01Z")  # the same second as b
    snap.admissions = {"u-a": Admission(10, 1), "u-c": Admission(20, 1)}
    assert kinds(snap) == []
    snap.created = ("a", "c")  # b's place unknown: still not ordered against c
    assert kinds(snap) == []


def test_within_one_second_the_callers_creation_order_counts():
    snap = sound()
    snap.jobs[2] = job("c", "2026-11-28T10:00:01Z")  # the same second as b
    snap.admissions = {"u-a": Admission(10, 1), "u-c": Admission(20, 1)}  # c, not b
    snap.created = ("a", "b", "c")
    [v] = check_workloads(snap)
    assert v.kind == "order" and "default/c" in v.detail and "default/b" in v.detail
    snap.created = ("a", "c", "b")  # c was created first: admitting it first is right
    assert kinds(snap) == []
