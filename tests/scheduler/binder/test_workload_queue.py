"""Jobs and pod groups in one queue (issue 30; scheduler/binder/workload_queue.py): real
brokers, the binder with daemonset/binder.yaml's RBAC serving its webhook, the API emulator
with its Job controller, the FluxJob CRD, kubectl.

Oracles from outside the binder: the order is computed here from the objects' stored
creationTimestamps and names (the group's: its oldest member's, docs/workloads.md "The
queue"; equal priorities); the head's START from the blocker's declared
activeDeadlineSeconds and the wall-clock bounds of its admission as this test observed them;
which Job may backfill from its declared walltime against that START (the head needs every
core, so a Job beside it must end by START); admission from the Job objects (spec.suspend)
and the pods' Bindings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client
from support.fluxjob_cluster import (
    finish_job,
    fluxjob_cluster,
    job_pods,
    queued_job,
    resumed,
    status,
)
from support.kubectl import kubectl, parse_table

from fluxnode.testing.waiting import wait_for

NODES, CORES = 4, 2
TIMEOUT = 180
GROUP_LABEL = "fluence.flux-framework.org/pod-group"
SIZE_LABEL = "fluxnode.io/group-size"


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def cluster(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": CORES for i in range(NODES)}) as c:
        yield c


def member(group: str, index: int, size: int, cpu: str, deadline: int | None = None) -> dict:
    """A plain pod of a declared group opted in to the queue, as a user writes it: the
    webhook adds the scheduler name and the admission gate."""
    spec: dict = {"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}",
                         "labels": {"fluxnode.io/queue": "batch", GROUP_LABEL: group,
                                    SIZE_LABEL: str(size)}},
            "spec": spec}


def create_group(c, group: str, size: int, cpu: str, deadline: int | None = None) -> list[str]:
    core = client.CoreV1Api(c.kube.api_client())
    names = []
    for i in range(size):
        made = core.create_namespaced_pod("default", member(group, i, size, cpu, deadline))
        names.append(made.metadata.name)
    return names


def created(c, kind: str, name: str) -> float:
    return epoch(c.kube.get(kind, name, "default")["metadata"]["creationTimestamp"])


def next_second_after(stamp: float) -> None:
    """Wait until the API server's clock (whole seconds) is past `stamp`, so the next object
    is strictly younger (creationTimestamp has one-second resolution)."""
    wait_for(lambda: datetime.now(UTC).timestamp() >= stamp + 1, 5,
             what="the clock past the last creationTimestamp")


def positions(c) -> dict[str, int | None]:
    """Each waiting record's POSITION as kubectl prints it (the CRD's printer column)."""
    rows = parse_table(kubectl(c.kube, "get", "fluxjobs", "-n", "default").check().stdout)[0]
    return {r["NAME"]: (None if r["POSITION"] in ("", "<none>") else int(r["POSITION"]))
            for r in rows}


def bound(c, names: list[str]) -> bool:
    return all(c.node_of(n) for n in names)


def test_an_older_group_goes_before_a_younger_job_of_the_same_priority(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    batch.create_namespaced_job("default", queued_job("blocker", NODES * CORES))
    wait_for(lambda: status(c, "blocker").get("phase") == "Running", TIMEOUT,
             what="the blocker Running")
    # both need every core; the group is created first, the Job a second later, and the
    # Job's name sorts first, so only the creation time can put the group ahead
    pods = create_group(c, "g", NODES, str(CORES))
    oldest = min(created(c, "pods", n) for n in pods)
    next_second_after(max(created(c, "pods", n) for n in pods))
    batch.create_namespaced_job("default", queued_job("a-job", NODES * CORES))
    records = {"group-g": oldest, "a-job": created(c, "jobs.batch", "a-job")}
    order = sorted(records, key=lambda n: (records[n], n))
    assert order == ["group-g", "a-job"] and "a-job" < "group-g"  # the premise

    # one POSITION sequence; the head (the group) reserved, with no START: the blocker has
    # no walltime
    wait_for(lambda: {n: p for n, p in positions(c).items() if n in records} ==
             {n: i for i, n in enumerate(order, 1)}, TIMEOUT, what="positions 1, 2")
    wait_for(lambda: status(c, "group-g").get("phase") == "Reserved", TIMEOUT,
             what="the group Reserved")
    assert "no start time is known" in status(c, "group-g")["reason"]
    assert not status(c, "group-g").get("start")
    assert status(c, "a-job")["phase"] == "Queued"

    # the blocker ends: the group is admitted, the Job waits behind it, first in line now
    finish_job(c, "blocker")
    c.wait_bound(pods, TIMEOUT)
    wait_for(lambda: status(c, "group-g").get("phase") == "Running", TIMEOUT,
             what="the group Running")
    assert "a-job" not in resumed(c)
    assert not job_pods(c, "a-job")
    wait_for(lambda: status(c, "a-job").get("position") == 1, TIMEOUT,
             what="the Job first in line")
    assert status(c, "a-job")["phase"] in ("Queued", "Reserved")
    c.assert_no_overcommit()


def test_a_reserved_group_gets_its_start_and_only_a_job_ending_by_then_backfills(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    walltime = {"blocker": 1000, "long": 3000, "short": 60}
    group_walltime = 100
    t0 = int(datetime.now(UTC).timestamp())  # the planner's clock has whole seconds
    # 6 of 8 cores taken until the blocker's walltime: 2 are free
    batch.create_namespaced_job("default", queued_job(
        "blocker", NODES * CORES - 2, deadline=walltime["blocker"]))
    wait_for(lambda: status(c, "blocker").get("phase") == "Running", TIMEOUT,
             what="the blocker Running")
    t1 = int(datetime.now(UTC).timestamp()) + 1
    # the group needs every core: the head; then two 1-core Jobs, the long one first
    pods = create_group(c, "g", NODES, str(CORES), deadline=group_walltime)
    next_second_after(max(created(c, "pods", n) for n in pods))
    batch.create_namespaced_job("default", queued_job("long", 1, deadline=walltime["long"]))
    next_second_after(created(c, "jobs.batch", "long"))
    batch.create_namespaced_job("default", queued_job("short", 1, deadline=walltime["short"]))
    records = {"group-g": min(created(c, "pods", n) for n in pods),
               "long": created(c, "jobs.batch", "long"),
               "short": created(c, "jobs.batch", "short")}
    order = sorted(records, key=lambda n: (records[n], n))
    assert order == ["group-g", "long", "short"]

    # the group is Reserved from the blocker's end: START known from its walltime
    wait_for(lambda: status(c, "group-g").get("start"), TIMEOUT, what="the group's START")
    head = status(c, "group-g")
    start = epoch(head["start"])
    assert head["phase"] == "Reserved"
    assert t0 + walltime["blocker"] <= start <= t1 + walltime["blocker"], (t0, head, t1)
    assert head["reason"] == (f"reserved: its resources are booked for it from "
                              f"{head['start']}; workloads after it may use them only if "
                              "they end by then")
    # of the two free cores, only a Job that ends by START may take one
    now = datetime.now(UTC).timestamp()
    fits = {n for n in ("long", "short") if now + walltime[n] <= start}
    assert fits == {"short"}  # the premise, from the declared walltimes
    wait_for(lambda: resumed(c) - {"blocker"} == fits, TIMEOUT, what="the short Job admitted")
    wait_for(lambda: positions(c).get("group-g") == 1 and positions(c).get("long") == 2,
             TIMEOUT, what="the group 1st, the long Job 2nd")
    assert status(c, "long")["phase"] == "Queued"
    assert not any(c.node_of(n) for n in pods)
    # the short Job's pod bound beside the reserved head
    wait_for(lambda: len(job_pods(c, "short")) == 1, TIMEOUT, what="the short Job's pod")
    c.wait_bound([p["metadata"]["name"] for p in job_pods(c, "short")], TIMEOUT)
    assert status(c, "group-g")["start"] == head["start"]  # the backfill did not delay it

    # the blocker and the short Job end: the group starts, no later than its START; the
    # long Job, first in line now, waits for the group's walltime
    before = int(datetime.now(UTC).timestamp())
    finish_job(c, "blocker")
    assert "long" not in resumed(c)
    finish_job(c, "short")
    wait_for(lambda: bound(c, pods), TIMEOUT, what="the group bound")
    after = int(datetime.now(UTC).timestamp()) + 1
    assert after <= start
    wait_for(lambda: status(c, "long").get("start"), TIMEOUT, what="the long Job's START")
    assert before + group_walltime <= epoch(status(c, "long")["start"]) \
        <= after + group_walltime
    # the pass that reserved it may still have counted the group, admitted in that pass
    wait_for(lambda: status(c, "long").get("position") == 1, TIMEOUT,
             what="the long Job first in line")
    c.assert_no_overcommit()


def test_a_job_asking_what_a_reserved_group_before_it_asks_is_not_asked_in_that_pass(cluster):
    """A Job and a group that ask for the same (4 slots of 2 cores and 64 MiB, for 100 s,
    anywhere) behind a full cluster: the group, older, is the head and Reserved; in the same
    pass the Job cannot fit either, is not asked (the cluster changing between the two asks
    must not admit it first) and its REASON names the group (docs/workloads.md)."""
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    batch.create_namespaced_job("default", queued_job("blocker", NODES * CORES, deadline=1000))
    wait_for(lambda: status(c, "blocker").get("phase") == "Running", TIMEOUT,
             what="the blocker Running")
    core = client.CoreV1Api(c.kube.api_client())
    pods = []
    for i in range(NODES):
        obj = member("g", i, NODES, str(CORES), deadline=100)
        obj["spec"]["containers"][0]["resources"]["requests"]["memory"] = "64Mi"
        pods.append(core.create_namespaced_pod("default", obj).metadata.name)
    next_second_after(max(created(c, "pods", n) for n in pods))
    # queued_job's pods ask for 64Mi each: the same request as the group's
    batch.create_namespaced_job("default", queued_job("e", NODES, cpu=str(CORES), deadline=100))
    wait_for(lambda: status(c, "group-g").get("phase") == "Reserved", TIMEOUT,
             what="the group Reserved")
    wait_for(lambda: status(c, "e").get("reason") ==
             "busy: asks what group default/g, before it in the queue, asks, which does not "
             "fit now; will retry when resources free up", TIMEOUT,
             what="the Job's REASON naming the group")
    assert (status(c, "e")["phase"], status(c, "e")["position"]) == ("Queued", 2)
    finish_job(c, "blocker")
    c.wait_bound(pods, TIMEOUT)
    assert "e" not in resumed(c)
    c.assert_no_overcommit()
