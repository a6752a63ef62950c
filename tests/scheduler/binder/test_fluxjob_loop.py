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
from support.kubectl import kubectl, parse_table
from support.paths import REPO

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for

WORKLOADS = REPO / "daemonset" / "workloads"
EXAMPLE = "example/queued-indexed-job.yaml"
CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
FLUXJOBS = "fluxjobs.fluxnode.io"
PODS = 8


@pytest.fixture
def cluster(tmp_path):
    kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode"),
                        job_controller=True).start()
    try:
        api = kube.api_client()
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load((WORKLOADS / "fluxjob-crd.yaml").read_text()))
        client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
            yaml.safe_load((WORKLOADS / "webhook.yaml").read_text()))
        with BinderCluster(tmp_path, {f"node{i}": 2 for i in range(4)}, emulator=kube) as c:
            b = c.start_binder(webhook_port=0, webhook_host="127.0.0.1",
                               webhook_cert_dir=str(tmp_path / "certs"))
            kube.service_endpoints[("fluxnode", "fluxnode-webhook")] = ("127.0.0.1",
                                                                         b.webhook.port)
            wait_for(lambda: all(h["clientConfig"].get("caBundle")
                                 for h in kube.get(CONFIG, "fluxnode")["webhooks"]),
                     30, what="the webhook's caBundle set by the binder")
            yield c
    finally:
        kube.stop()


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
             .startswith("busy"), 30, what="the FluxJob queued, saying why")
    record = fluxjob(c)
    assert record["status"]["phase"] == "Queued"
    assert record["status"]["pods"] == f"0/{PODS}"
    assert record["spec"]["pods"] == PODS and record["spec"]["indexed"] is True
    assert record["metadata"]["ownerReferences"][0]["name"] == "sweep"
    assert job_pods(c) == []  # suspended: the Job controller made none
    table = kubectl(c.kube, "get", "fluxjobs", "-A").check().stdout
    [[row]] = parse_table(table)
    assert list(row)[:8] == ["NAMESPACE", "NAME", "QUEUE", "PHASE", "PRIORITY", "POSITION",
                             "PODS", "NODES"]
    assert (row["NAME"], row["QUEUE"], row["PHASE"], row["PODS"], row["POSITION"]) == (
        "sweep", "batch", "Queued", f"0/{PODS}", "1")
    assert row["REASON"].startswith("busy")
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
