"""An admitted Job that its podFailurePolicy fails gives its whole allocation back.

Real brokers, the binder serving its webhook, the API emulator with its Job controller
(which applies the policy as pkg/controller/job does: a FailJob rule matched by a failed
pod's exit code sets FailureTarget with reason PodFailurePolicy, deletes the Job's other
pods, then Failed once they are gone). Oracles from outside the binder: the Job's
conditions as the Job controller writes them, the FluxJob's phase, and the leader's record
of what it holds (``sched.list``) and the pods' Bindings (``assert_no_overcommit``)."""

from __future__ import annotations

import datetime

from kubernetes import client
from support.fluxjob_cluster import fluxjob_cluster, job_pods, queued_job, status
from support.job_ledger import INDEX, allocations, bound, cores_held, where

from fluxnode.testing.waiting import wait_for


def _exit(c, name: str, code: int) -> None:
    """The kubelet reports the pod's container `worker` exited with `code`."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    c.kube.patch("pods", name, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": "busybox:1.36",
        "imageID": "", "state": {"terminated": {"exitCode": code, "reason": "Error",
                                                "finishedAt": now}}}]}}, "default", "merge")


def test_a_failjob_exit_code_fails_an_admitted_job_and_frees_all_its_slots(tmp_path):
    # 3 nodes of 2 cores, an Indexed Job of 4 pods of 1 core: admitted whole, then index 1
    # exits 42, which its FailJob rule names
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        job = queued_job("doomed", 4)
        job["spec"]["podFailurePolicy"] = {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "worker",
                                                  "operator": "In", "values": [42]}}]}
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
        wait_for(lambda: status(c, "doomed").get("phase") == "Running"
                 and len(bound(c, "doomed")) == 4, 60, what="doomed Running, 4 pods bound")
        (listed,) = allocations(c)
        assert sum(map(len, cores_held(c).values())) == 4
        (one,) = bound(c, "doomed", "1")
        assert where(one)[2] == str(listed["id"])
        _exit(c, one["metadata"]["name"], 42)
        wait_for(lambda: status(c, "doomed").get("phase") == "Failed", 60,
                 what="the FluxJob Failed")
        got = c.kube.get("jobs.batch", "doomed", "default")
        conditions = {x["type"]: (x["status"], x["reason"], x["message"])
                      for x in got["status"]["conditions"]}
        assert conditions["Failed"] == (
            "True", "PodFailurePolicy", f"Container worker for pod default/"
            f"{one['metadata']['name']} failed with exit code 42 matching FailJob rule at "
            "index 1")
        # its other pods deleted, none made in place of index 1, and nothing held for it
        assert [p["metadata"]["labels"][INDEX] for p in job_pods(c, "doomed")] == ["1"]
        wait_for(lambda: allocations(c) == [], 30, what="the allocation freed")
        assert cores_held(c) == {}
        c.assert_no_overcommit()
