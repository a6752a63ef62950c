"""Queue limits end to end (queue_limits.py): the ConfigMap fluxnode/fluxnode-queues the binder
watches (with exactly daemonset/binder.yaml's RBAC), real brokers, the Job controller.

Oracles: what the queue uses is summed here from the declared sizes of the Jobs the Job
objects show admitted (spec.suspend false), and the limit is the one this test wrote."""

from __future__ import annotations

import pytest
from kubernetes import client
from support.fluxjob_cluster import fluxjob_cluster, queued_job, resumed, status
from support.kubectl import parse_table, plugin

from fluxnode.testing.waiting import wait_for

TIMEOUT = 180
PODS = 2  # each Job: 2 pods of 1 core


def limits(cores: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fluxnode-queues", "namespace": "fluxnode"},
            "data": {"queues.yaml": f"batch:\n  cores: {cores}\n"}}


@pytest.fixture
def cluster(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(4)}) as c:
        yield c


def test_a_job_past_its_queues_limit_waits_saying_so_and_a_new_limit_applies(cluster):
    c = cluster
    c.kube.create("configmaps", limits(4), "fluxnode")
    batch = client.BatchV1Api(c.kube.api_client())
    for name in ("a", "b", "c"):
        batch.create_namespaced_job("default", queued_job(name, PODS))
    batch.create_namespaced_job("default", queued_job("free", PODS, queue="other"))
    # 4 cores: two batch Jobs of 2; the third would make 6; "other" has no limit
    wait_for(lambda: status(c, "c").get("reason", "").startswith("queue"), TIMEOUT,
             what="c held by the limit")
    admitted_batch = {"a", "b"}
    wait_for(lambda: resumed(c) == admitted_batch | {"free"}, TIMEOUT, what="a, b, free admitted")
    used = PODS * len(admitted_batch)
    assert status(c, "c")["reason"] == (
        f"queue 'batch' limit: {used} of 4 cores in use, this Job asks {PODS}")
    assert status(c, "c")["phase"] == "Queued" and "start" not in status(c, "c")
    # the plugin's queue says the same (kubectl fluxnode through the real kubectl)
    table = plugin(c.kube, "queue").check().stdout
    rows = {r["NAMESPACE/NAME"]: r for r in parse_table(table)[0]}
    assert (rows["default/c"]["POSITION"], rows["default/c"]["PHASE"],
            rows["default/c"]["REASON"]) == ("1", "Queued", status(c, "c")["reason"])
    # the administrator raises the limit: applied without a restart
    c.kube.update("configmaps", limits(6), "fluxnode")
    wait_for(lambda: "c" in resumed(c), TIMEOUT, what="c admitted under the new limit")
    c.assert_no_overcommit()
