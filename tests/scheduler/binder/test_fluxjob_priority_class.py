"""A Job naming a PriorityClass that does not exist (issue 30): Kubernetes' Priority admission
plugin would refuse every one of its pods ("no PriorityClass with name X was found"), so the
binder does not queue it, but says so where a user looks: its FluxJob is Queued with a
REASON naming the class and what to do, holding nothing and blocking nobody, and the Job gets
a Warning Event. Once the class is created the Job is queued and admitted as any other.

Real brokers, the binder with daemonset/binder.yaml's RBAC, the API emulator's Job
controller and Priority admission plugin, real kubectl. Oracles from outside the binder:
admission from the Job objects (spec.suspend), what is held from the leader's sched.list,
the printer columns as kubectl prints them, the priority from the class's declared value.
"""

from __future__ import annotations

from kubernetes import client
from support.fluxjob_cluster import (
    fluxjob_cluster,
    priority_class,
    queued_job,
    resumed,
    status,
)
from support.kubectl import kubectl, parse_table
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for

FLUXJOBS = "fluxjobs.fluxnode.io"
URGENT = 500  # the class's value, once it is created


def warnings_on(c, name: str) -> list[dict]:
    return [e for e in c.kube.list("events", "default")
            if (e.get("involvedObject") or {}).get("kind") == "Job"
            and e["involvedObject"].get("name") == name and e.get("type") == "Warning"]


def test_a_job_whose_priority_class_is_missing_is_shown_not_queued_until_it_exists(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(2)}) as c:
        api = c.kube.api_client()
        batch = client.BatchV1Api(api)
        batch.create_namespaced_job("default", queued_job("orphan", 2, priority_class="urgent"))
        batch.create_namespaced_job("default", queued_job("other", 2))
        # the other Job is admitted: the orphan, created first, holds nothing and blocks nobody
        wait_for(lambda: resumed(c) == {"other"}, 60, what="the other Job admitted")
        wait_for(lambda: "urgent" in status(c, "orphan").get("reason", ""), 30,
                 what="the orphan's FluxJob saying why it is not queued")
        record = c.kube.get(FLUXJOBS, "orphan", "default")
        assert record["status"]["phase"] == "Queued"
        assert "position" not in record["status"] and "allocation" not in record["status"]
        assert "priority" not in record["spec"]
        assert record["spec"]["priorityClassName"] == "urgent"
        reason = record["status"]["reason"]
        assert "PriorityClass 'urgent' does not exist (Kubernetes would refuse them)" in reason
        assert "kubectl create priorityclass urgent" in reason
        assert c.kube.get("jobs.batch", "orphan", "default")["spec"]["suspend"] is True
        held = [(a["id"], n["rank"], i) for a in c.inst.rpc("sched.list")["allocations"]
                for n in a["nodes"] for i in parse_idset(n["cores"])]
        assert len(held) == 2, held  # the other Job's two 1-core pods, nothing for the orphan
        [table] = parse_table(kubectl(c.kube, "get", "fluxjobs", "-n", "default").check().stdout)
        rows = {r["NAME"]: r for r in table}
        assert rows["orphan"]["PHASE"] == "Queued"
        assert rows["orphan"]["REASON"] == reason
        wait_for(lambda: warnings_on(c, "orphan"), 30, what="a Warning Event on the Job")
        [event] = warnings_on(c, "orphan")
        assert event["reason"] == "PriorityClassNotFound" and event["message"] == reason
        assert event["involvedObject"]["uid"] == \
            c.kube.get("jobs.batch", "orphan", "default")["metadata"]["uid"]

        priority_class(api, "urgent", URGENT)
        wait_for(lambda: resumed(c) == {"other", "orphan"}, 60,
                 what="the orphan admitted once its PriorityClass exists")
        wait_for(lambda: c.kube.get(FLUXJOBS, "orphan", "default")["spec"].get("priority")
                 == URGENT, 30, what="the orphan's FluxJob with its class's value")
        wait_for(lambda: status(c, "orphan").get("phase") in ("Admitted", "Running"), 30,
                 what="the orphan's FluxJob admitted")
        assert not status(c, "orphan").get("reason", "").startswith("not queued")
        assert len(warnings_on(c, "orphan")) == 1
