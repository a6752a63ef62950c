"""A running Job's later pods go into its own allocation (issue 30: "each pod it creates is
bound into that allocation ...; pods that finish free their share"): the replacement of a
failed pod, and the pods a Job with more completions than parallelism makes as earlier ones
succeed. Real brokers, the binder serving its webhook, the API emulator with its Job
controller (which makes the pods: job_controller.go's manageJob, lowest missing index
first).

Oracles from outside the binder: the Job controller's own pods and their completion
indexes; the leader's record of the Job's allocation (``sched.list``: its id, its slots in
the service's order, the cores it still holds on each node); the pods' Bindings checked by
``assert_no_overcommit``. What the Job may hold is the issue's rule, counted here from the
Job's spec and status as the Job controller writes them: min(parallelism, completions -
succeeded) slots, each node released once none of those is on it."""

from __future__ import annotations

from kubernetes import client
from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import (
    fluxjob_cluster,
    job_pods,
    queued_job,
    start_webhook_binder,
    status,
)
from support.job_ledger import (
    INDEX,
    allocations,
    bound,
    cores_held,
    live,
    slot,
    where,
)
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for


def running(c: BinderCluster, name: str, pods: int) -> dict:
    """Wait for the Job's `pods` pods bound; returns its one allocation as listed."""
    wait_for(lambda: status(c, name).get("phase") == "Running"
             and len(bound(c, name)) == pods, 60, what=f"{name} Running")
    (listed,) = allocations(c)
    assert listed["labels"]["kind"] == "fluxjob"
    return listed


def retrying_job(c: BinderCluster, name: str) -> dict:
    """An Indexed Job of 4 pods of 1 core with backoffLimit 1, Running: its allocation."""
    job = queued_job(name, 4)
    job["spec"]["backoffLimit"] = 1
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
    return running(c, name, 4)


def fail_index_0(c: BinderCluster, name: str) -> tuple[dict, dict]:
    """Index 0's pod fails; the Job controller replaces it (one failure, backoffLimit 1):
    returns the failed pod and its replacement once bound."""
    (first,) = bound(c, name, "0")
    assert c.kube.job_controller is not None
    # only the replacement matters here, not the Job controller's 10 s pod failure backoff
    c.kube.job_controller.backoff = 0.05
    c.finish(first["metadata"]["name"], "Failed")
    wait_for(lambda: [p for p in bound(c, name, "0")
                      if p["metadata"]["uid"] != first["metadata"]["uid"]], 60,
             what="the replacement of index 0 bound")
    (again,) = bound(c, name, "0")
    return first, again


def test_a_failed_index_is_replaced_into_its_own_slot(tmp_path):
    # 3 nodes of 2 cores, 4 pods of 1 core: the allocation packs node0 and node1 (policy
    # first), so index 0's node keeps a pod of the Job when index 0 fails
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        listed = retrying_job(c, "retry")
        (first,) = bound(c, "retry", "0")
        assert where(first) == slot(listed, 0)
        before = cores_held(c)
        assert sum(map(len, before.values())) == 4
        # the replacement: bound into the slot index 0 had, in the Job's allocation, nothing
        # asked for anew
        _, again = fail_index_0(c, "retry")
        assert where(again) == slot(listed, 0)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        assert cores_held(c) == before  # 4 cores for 4 pods, never 5
        for i in range(1, 4):
            (pod,) = bound(c, "retry", str(i))
            assert where(pod) == slot(listed, i)
        c.assert_no_overcommit()
        for p in live(c, "retry"):
            c.finish(p["metadata"]["name"])
        wait_for(lambda: status(c, "retry").get("phase") == "Finished", 60, what="Finished")
        wait_for(lambda: allocations(c) == [], 30, what="the allocation freed")


def _succeed(c: BinderCluster, name: str, index: str | None = None) -> dict:
    """One bound pod of the Job succeeds (of `index`, else the first by name)."""
    pod = min(bound(c, name, index), key=lambda p: p["metadata"]["name"])
    c.finish(pod["metadata"]["name"])
    return pod


def test_completions_above_parallelism_reuse_the_freed_slots(tmp_path):
    # pods of 2 cores on nodes of 2: each slot is a whole node, so a released slot is a
    # node the leader no longer holds for the Job
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        job = queued_job("steps", 2, cpu="2")
        job["spec"]["completions"] = 4
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
        listed = running(c, "steps", 2)
        assert len(listed["slots"]) == 2
        for i in range(2):
            (pod,) = bound(c, "steps", str(i))
            assert where(pod) == slot(listed, i)
        # index 0 succeeds: index 2 takes the slot it freed (the only free one)
        _succeed(c, "steps", "0")
        wait_for(lambda: bound(c, "steps", "2"), 60, what="index 2 bound")
        (two,) = bound(c, "steps", "2")
        assert where(two) == slot(listed, 0)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        # index 1 succeeds: index 3 takes slot 1
        _succeed(c, "steps", "1")
        wait_for(lambda: bound(c, "steps", "3"), 60, what="index 3 bound")
        (three,) = bound(c, "steps", "3")
        assert where(three) == slot(listed, 1)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        c.assert_no_overcommit()
        # index 2 succeeds: 3 of 4 done, one slot needed (index 3's): slot 0 is released
        _succeed(c, "steps", "2")
        wait_for(lambda: c.kube.get("jobs.batch", "steps", "default")["status"].get(
            "succeeded") == 3, 60, what="3 succeeded")
        job = c.kube.get("jobs.batch", "steps", "default")
        assert min(job["spec"]["parallelism"], job["spec"]["completions"] - 3) == 1
        assert [where(p) for p in live(c, "steps")] == [slot(listed, 1)]
        want = {listed["slots"][1]["hostname"]: parse_idset(listed["slots"][1]["cores"])}
        wait_for(lambda: cores_held(c) == want, 30, what="slot 0's node released")
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        _succeed(c, "steps", "3")
        wait_for(lambda: status(c, "steps").get("phase") == "Finished", 60, what="Finished")
        wait_for(lambda: allocations(c) == [], 30, what="everything freed")


def test_a_non_indexed_job_reuses_its_freed_slots(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        job = queued_job("queue", 2, cpu="2")
        del job["spec"]["completionMode"]
        job["spec"]["completions"] = 3
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
        listed = running(c, "queue", 2)
        slots = {slot(listed, i) for i in range(2)}
        assert {where(p) for p in bound(c, "queue")} == slots
        first = _succeed(c, "queue")
        # a third pod (completions 3): into the slot the first freed, in the same allocation
        wait_for(lambda: len(bound(c, "queue")) == 2, 60, what="the third pod bound")
        assert {where(p) for p in bound(c, "queue")} == slots
        newest = [p for p in bound(c, "queue")
                  if where(p)[0] == first["spec"]["nodeName"]]
        assert len(newest) == 1 and newest[0]["metadata"]["uid"] != first["metadata"]["uid"]
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        c.assert_no_overcommit()
        # one more succeeds: 2 of 3 done, one slot needed (the live pod's): the other node
        # is released
        done = _succeed(c, "queue")
        wait_for(lambda: c.kube.get("jobs.batch", "queue", "default")["status"].get(
            "succeeded") == 2, 60, what="2 succeeded")
        (last,) = bound(c, "queue")
        assert last["spec"]["nodeName"] != done["spec"]["nodeName"]
        wait_for(lambda: set(cores_held(c)) == {last["spec"]["nodeName"]}, 30,
                 what="the finished pod's node released")
        c.finish(last["metadata"]["name"])
        wait_for(lambda: status(c, "queue").get("phase") == "Finished", 60, what="Finished")
        wait_for(lambda: allocations(c) == [], 30, what="everything freed")


def test_after_a_binder_restart_a_replacement_still_goes_to_its_slot(tmp_path):
    """The new binder rebuilds which slot each running pod holds from the leader's record
    of the allocation and the pods' Bindings."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        listed = retrying_job(c, "kept")
        (b,) = c.binders
        b2 = c.replace_binder(b)
        wait_for(lambda: b2.reconciled, 30, what="the new binder reconciled")
        _, again = fail_index_0(c, "kept")
        assert where(again) == slot(listed, 0)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        assert sum(map(len, cores_held(c).values())) == 4
        c.assert_no_overcommit()


CORDON = {"spec": {"unschedulable": True,
                   "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}


def test_a_replacement_does_not_go_back_to_a_cordoned_node(tmp_path):
    """Kubernetes places nothing new on a cordoned node (the unschedulable taint): the
    replacement is asked for anew, on the nodes still usable."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        listed = retrying_job(c, "moved")
        node = listed["slots"][0]["hostname"]
        c.kube.patch("nodes", node, CORDON)
        # the binder has seen the cordon once it drained the node in the leader
        wait_for(lambda: any(d["hostname"] == node for d in c.inst.rpc(
            "sched.resource-status")["drain"]), 30, what=f"{node} drained")
        _, again = fail_index_0(c, "moved")
        free = {f"node{i}" for i in range(3)} - {s["hostname"] for s in listed["slots"]}
        assert again["spec"]["nodeName"] in free
        c.assert_no_overcommit()


def test_a_replacement_waits_for_the_pod_it_replaces_even_across_a_binder_restart(tmp_path):
    """The Job controller replaces a pod as soon as its deletion starts (a terminating pod is
    not active: job_controller.go); the old pod holds its cores until it is gone, so the
    replacement waits for that slot rather than taking more, and still gets it from a binder
    that restarted meanwhile."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job(
            "default", queued_job("slow", 4))
        listed = running(c, "slow", 4)
        (first,) = bound(c, "slow", "0")
        c.kube.hold_terminations = True
        c.kube.delete("pods", first["metadata"]["name"], "default", grace_period=30)

        def replacement() -> dict | None:
            return next((p for p in job_pods(c, "slow")
                         if (p["metadata"].get("labels") or {}).get(INDEX) == "0"
                         and p["metadata"]["uid"] != first["metadata"]["uid"]), None)

        wait_for(replacement, 30, what="the Job controller's replacement of index 0")
        name = replacement()["metadata"]["name"]
        cond = c.wait_condition(name, "WaitingForResources")
        assert cond["message"] == ("busy: every slot of the allocation of Job default/slow is "
                                   "in use; will bind when one of its pods ends")
        assert not replacement()["spec"].get("nodeName")
        assert sum(map(len, cores_held(c).values())) == 4
        (b,) = c.binders
        b2 = c.replace_binder(b)
        wait_for(lambda: b2.reconciled, 30, what="the new binder reconciled")
        assert not c.get_pod(name)["spec"].get("nodeName")
        c.kube.hold_terminations = False
        c.kube.finish_terminations()
        c.wait_bound([name])
        assert where(c.get_pod(name)) == slot(listed, 0)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        assert sum(map(len, cores_held(c).values())) == 4
        c.assert_no_overcommit()


def test_a_slot_freed_while_no_binder_runs_is_kept_for_its_index(tmp_path):
    """Index 0's old pod goes while no binder runs: the new binder rebuilds the ledger with
    slot 0 free, keeps its node in the allocation (no pod of the Job runs there: pods of 2
    cores on nodes of 2) and binds the waiting replacement there."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job(
            "default", queued_job("gap", 3, cpu="2"))
        listed = running(c, "gap", 3)
        before = cores_held(c)
        assert len(before) == 3
        (first,) = bound(c, "gap", "0")
        c.kube.hold_terminations = True
        c.kube.delete("pods", first["metadata"]["name"], "default", grace_period=30)
        wait_for(lambda: [p for p in job_pods(c, "gap") if p["metadata"]["uid"] !=
                          first["metadata"]["uid"] and not p["spec"].get("nodeName")
                          and (p["metadata"].get("labels") or {}).get(INDEX) == "0"], 30,
                 what="the replacement of index 0, waiting")
        (b,) = c.binders
        c.stop_binder(b)
        c.kube.hold_terminations = False
        c.kube.finish_terminations()
        wait_for(lambda: all(p["metadata"]["uid"] != first["metadata"]["uid"]
                             for p in job_pods(c, "gap")), 30, what="the old pod gone")
        start_webhook_binder(c, tmp_path)
        wait_for(lambda: bound(c, "gap", "0"), 60, what="the replacement bound")
        (again,) = bound(c, "gap", "0")
        assert where(again) == slot(listed, 0)
        assert [a["id"] for a in allocations(c)] == [listed["id"]]
        assert cores_held(c) == before
        c.assert_no_overcommit()
