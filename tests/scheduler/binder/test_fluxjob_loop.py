"""The FluxJob loop end to end (issue 30, "Workloads, not pods"): real brokers, the binder
with exactly daemonset/binder.yaml's RBAC serving its webhook, the API emulator with its Job
controller calling that webhook (daemonset/workloads/ applied), kubectl and the official
client.

Oracles from outside the binder: the Job controller's own pods (none while the Job is
suspended: Kubernetes' suspend semantics), the leader's record of the allocation
(``sched.list``: its slots in the service's order) for index i in slot i, the pods' Bindings
checked by ``assert_no_overcommit``, the CRD's printer columns as kubectl prints them."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import fluxjob_cluster
from support.kubectl import kubectl, parse_table, plugin
from support.paths import REPO

from fluxnode.testing.waiting import wait_for

EXAMPLE = "example/queued-indexed-job.yaml"
FLUXJOBS = "fluxjobs.fluxnode.io"
PODS = 8


@pytest.fixture
def cluster(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(4)}) as c:
        yield c


def job_pods(c: BinderCluster) -> list[dict]:
    return [p for p in c.kube.list("pods", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == "sweep"]


def fluxjob(c: BinderCluster) -> dict:
    return c.kube.get(FLUXJOBS, "sweep", "default")


def phase(c: BinderCluster) -> str | None:
    try:
        return (fluxjob(c).get("status") or {}).get("phase")
    except Exception:
        return None


def test_an_indexed_job_starts_only_when_all_its_pods_fit(cluster):
    c = cluster
    # the cluster is too small first: a pod holds both cores of one node (6 of 8 free)
    c.create_pod("blocker", cpu="2")
    c.wait_bound(["blocker"])
    assert kubectl(c.kube, "apply", "-f", EXAMPLE).check().stdout.strip() \
        == "job.batch/sweep created"
    assert c.kube.get("jobs.batch", "sweep", "default")["spec"]["suspend"] is True
    wait_for(lambda: (fluxjob_or_none(c) or {}).get("status", {}).get("reason", "")
             .startswith("reserved"), 30, what="the FluxJob reserved, saying why")
    record = fluxjob(c)
    # the head of the queue that does not fit is reserved; the blocker has no walltime
    # (a bare pod without activeDeadlineSeconds), so no start is known and none is shown
    assert record["status"]["phase"] == "Reserved"
    assert "start" not in record["status"]
    assert record["status"]["pods"] == f"0/{PODS}"
    assert record["spec"]["pods"] == PODS and record["spec"]["indexed"] is True
    assert record["metadata"]["ownerReferences"][0]["name"] == "sweep"
    assert job_pods(c) == []  # suspended: the Job controller made none
    table = kubectl(c.kube, "get", "fluxjobs", "-A").check().stdout
    [[row]] = parse_table(table)
    assert list(row)[:8] == ["NAMESPACE", "NAME", "QUEUE", "PHASE", "PRIORITY", "POSITION",
                             "PODS", "NODES"]
    assert (row["NAME"], row["QUEUE"], row["PHASE"], row["PODS"], row["POSITION"]) == (
        "sweep", "batch", "Reserved", f"0/{PODS}", "1")
    assert row["REASON"] == ("reserved: its resources are booked for it, but something "
                             "holding them has no walltime (spec.activeDeadlineSeconds), so "
                             "no start time is known")
    # the plugin's queue shows the same record (kubectl fluxnode through the real kubectl)
    [[entry]] = parse_table(plugin(c.kube, "queue", "-A").check().stdout)
    assert entry == {"POSITION": "1", "NAMESPACE/NAME": "default/sweep", "QUEUE": "batch",
                     "PHASE": "Reserved", "PRIORITY": row["PRIORITY"], "PODS": f"0/{PODS}",
                     "NODES": "-", "START": "-", "REASON": row["REASON"]}
    # free the cluster: the whole set is allocated, the Job resumed, every pod bound
    c.kube.delete("pods", "blocker", "default")
    wait_for(lambda: len(job_pods(c)) == PODS, 30, what="the Job controller's 8 pods")
    names = [f"sweep-{i}-" for i in range(PODS)]
    pods = {p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p
            for p in job_pods(c)}
    c.wait_bound([pods[str(i)]["metadata"]["name"] for i in range(PODS)])
    (listed,) = c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
    assert len(listed["slots"]) == PODS
    for i in range(PODS):
        pod = c.get_pod(pods[str(i)]["metadata"]["name"])
        assert pod["metadata"]["name"].startswith(names[i])
        assert pod["spec"]["nodeName"] == listed["slots"][i]["hostname"], (i, listed["slots"][i])
        assert pod["metadata"]["annotations"]["fluxnode.io/cores"] == listed["slots"][i]["cores"]
        assert pod["metadata"]["annotations"]["fluxnode.io/allocation"] == str(listed["id"])
    c.assert_no_overcommit()
    wait_for(lambda: phase(c) == "Running", 30, what="the FluxJob Running")
    assert fluxjob(c)["status"]["pods"] == f"{PODS}/{PODS}"
    [[row]] = parse_table(kubectl(c.kube, "get", "fj", "-A").check().stdout)
    assert (row["PHASE"], row["PODS"], row["NODES"]) == ("Running", "8/8", "node[0-3]")
    [[entry]] = parse_table(plugin(c.kube, "queue").check().stdout)
    assert (entry["POSITION"], entry["PHASE"], entry["PODS"], entry["NODES"]) == (
        "-", "Running", "8/8", "node[0-3]")
    # the pods finish: the Job completes, its allocation is given back, the FluxJob Finished
    for p in job_pods(c):
        c.finish(p["metadata"]["name"])
    wait_for(lambda: phase(c) == "Finished", 30, what="the FluxJob Finished")
    wait_for(lambda: c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
             == [], 30, what="the allocation freed")


def fluxjob_or_none(c: BinderCluster) -> dict | None:
    try:
        return fluxjob(c)
    except Exception:
        return None


def indexed_job(name: str, pods: int, cpu: str = "1") -> dict:
    job = yaml.safe_load((REPO / EXAMPLE).read_text())
    job["metadata"]["name"] = name
    job["spec"]["completions"] = job["spec"]["parallelism"] = pods
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return job


def status(c: BinderCluster, name: str) -> dict:
    try:
        return c.kube.get(FLUXJOBS, name, "default").get("status") or {}
    except Exception:
        return {}


def test_a_job_that_can_never_fit_stays_queued_saying_why(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    batch.create_namespaced_job("default", indexed_job("wide", 9))  # 9 cores of 8
    batch.create_namespaced_job("default", indexed_job("fat", 1, cpu="3"))  # nodes have 2
    # equal priority: in the order they were created (in one second of creationTimestamp
    # too: the webhook's stamp)
    order = ["wide", "fat"]
    # the first pass may have seen one Job alone (position 1): wait for the pass over both
    wait_for(lambda: status(c, "wide").get("reason") and status(c, "fat").get("reason")
             and [status(c, n).get("position") for n in order] == [1, 2], 30,
             what="both FluxJobs saying why, in order")
    # the words pods are told (scheduling_cycle.py, tests/scheduler/binder/test_binder_capacity)
    assert status(c, "wide")["reason"] == (
        "unsatisfiable: the group needs 9 cores in 9 pods but the 4 usable nodes have 8 in "
        "total; will not fit until the cluster changes")
    assert status(c, "fat")["reason"] == (
        "unsatisfiable: a pod needs 3 cores but the largest usable node has 2; will not fit "
        "until the cluster changes")
    assert status(c, "wide")["phase"] == status(c, "fat")["phase"] == "Queued"
    assert [status(c, n)["position"] for n in order] == [1, 2]
    assert c.kube.list("pods", "default") == []
    assert c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"] == []


def test_a_job_suspended_again_gives_back_its_allocation_and_is_queued(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    batch.create_namespaced_job("default", indexed_job("sweep", 4))
    wait_for(lambda: status(c, "sweep").get("phase") == "Running", 30, what="Running")
    (first,) = c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
    old_pods = {p["metadata"]["uid"] for p in job_pods(c)}
    assert len(old_pods) == 4
    c.kube.hold_terminations = True  # its pods stay Terminating: they still hold their shares
    batch.patch_namespaced_job("sweep", "default", {"spec": {"suspend": True}})
    wait_for(lambda: status(c, "sweep").get("phase") == "Queued", 30, what="Queued again")
    assert status(c, "sweep")["reason"] == "waiting for its pods to end"
    assert [a["id"] for a in c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})[
        "allocations"]] == [first["id"]]
    c.kube.hold_terminations = False
    c.kube.finish_terminations()
    # given back, then asked for again: a new allocation, new pods bound into it
    wait_for(lambda: status(c, "sweep").get("phase") == "Running"
             and status(c, "sweep").get("allocation") not in (None, first["id"]), 30,
             what="admitted again with a new allocation")
    (second,) = c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
    assert second["id"] != first["id"]
    new = job_pods(c)
    assert len(new) == 4 and not {p["metadata"]["uid"] for p in new} & old_pods
    assert {p["metadata"]["annotations"]["fluxnode.io/allocation"] for p in new} == {
        str(second["id"])}
    c.assert_no_overcommit()


def test_a_deleted_job_takes_its_fluxjob_and_allocation_with_it(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    batch.create_namespaced_job("default", indexed_job("queued", 9))  # never fits
    batch.create_namespaced_job("default", indexed_job("admitted", 2))
    wait_for(lambda: status(c, "admitted").get("phase") == "Running"
             and status(c, "queued").get("reason"), 30, what="one Running, one Queued")
    for name in ("queued", "admitted"):
        batch.delete_namespaced_job(name, "default", propagation_policy="Background")
    wait_for(lambda: not status(c, "queued") and not status(c, "admitted"), 30,
             what="both FluxJobs deleted")
    # its pods are collected (Background propagation), so its shares are given back
    wait_for(lambda: job_pods_of(c, "admitted") == [], 30, what="the Job's pods collected")
    wait_for(lambda: c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
             == [], 30, what="the allocation freed")


def job_pods_of(c: BinderCluster, name: str) -> list[dict]:
    return [p for p in c.kube.list("pods", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name]


def test_a_non_indexed_job_is_one_group_bound_into_its_allocation(cluster):
    """Pods of a NonIndexed Job have no completion index; the webhook's fluxnode.io/job
    annotation groups them, so they too take the Job's allocation and nothing is asked again."""
    c = cluster
    job = indexed_job("plain", 3)
    del job["spec"]["completionMode"]
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
    wait_for(lambda: status(c, "plain").get("phase") == "Running", 30, what="Running")
    (listed,) = c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
    assert c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"] == []
    pods = job_pods_of(c, "plain")
    assert len(pods) == 3
    assert all("batch.kubernetes.io/job-completion-index" not in p["metadata"]["labels"]
               for p in pods)
    assert {c.get_pod(p["metadata"]["name"])["metadata"]["annotations"][
        "fluxnode.io/allocation"] for p in pods} == {str(listed["id"])}
    c.assert_no_overcommit()


def test_a_restarted_binder_keeps_a_running_jobs_allocation(cluster):
    """The allocation was made before its pods existed (its labels name none): a new binder
    adopts it with the pods whose Bindings name it, rather than cancelling it and re-adopting
    them one by one, and a pod that ends afterwards still frees its share."""
    c = cluster
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default",
                                                                 indexed_job("sweep", 4))
    wait_for(lambda: status(c, "sweep").get("phase") == "Running", 30, what="Running")
    (before,) = c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
    (b,) = c.binders
    b2 = c.replace_binder(b)
    wait_for(lambda: b2.reconciled, 30, what="the new binder reconciled")
    (after,) = c.inst.rpc("sched.list", {"labels": {"owner": "binder:fluxnode",
                                                     "kind": "fluxjob"}})["allocations"]
    assert after["id"] == before["id"]
    assert c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"] == []
    assert status(c, "sweep")["phase"] == "Running"
    first = min(job_pods(c), key=lambda p: p["metadata"]["name"])
    node = first["spec"]["nodeName"]
    c.finish(first["metadata"]["name"])
    # its node's share is given back once no pod of the allocation is left there
    others_there = [p for p in job_pods(c) if p["spec"]["nodeName"] == node
                    and p["metadata"]["uid"] != first["metadata"]["uid"]]
    for p in others_there:
        c.finish(p["metadata"]["name"])
    wait_for(lambda: node not in {n["hostname"] for n in c.inst.rpc(
        "sched.list", {"labels": {"kind": "fluxjob"}})["allocations"][0]["nodes"]}, 30,
             what=f"{node} given back")
    c.assert_no_overcommit()


def test_a_job_past_its_active_deadline_fails_and_frees_its_allocation(cluster):
    """The walltime the Job was booked for (its activeDeadlineSeconds) is enforced by the
    Job controller (job_controller.go: DeadlineExceeded, its pods deleted); the binder then
    says Failed and the leader holds nothing for it."""
    c = cluster
    job = indexed_job("timed", 4)
    job["spec"]["activeDeadlineSeconds"] = 2
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
    wait_for(lambda: status(c, "timed").get("phase") == "Failed", 60, what="Failed")
    job = c.kube.get("jobs.batch", "timed", "default")
    conditions = {x["type"]: (x["status"], x["reason"]) for x in job["status"]["conditions"]}
    # admitted (the binder resumed it: stored suspended by the webhook, it ran from a
    # startTime), then failed at its deadline
    assert job["spec"]["suspend"] is False and job["status"]["startTime"]
    assert conditions["Failed"] == ("True", "DeadlineExceeded")
    assert job_pods_of(c, "timed") == []  # deleted before the Job is called Failed
    wait_for(lambda: c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
             == [], 30, what="the allocation freed")
    c.assert_no_overcommit()
