"""`kubectl fluxnode why JOB|POD` through real kubectl against the API emulator: a Job's
FluxJob and pods, a pod's gate, conditions and fluxnode's last Event about it, in words.

The objects are written here through the official client as the binder and the Job
controller would leave them; the expected lines are written out by hand."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from support.kubectl import plugin
from support.paths import REPO

from fluxnode.testing.kube_emulator import KubeEmulator

CRD = REPO / "daemonset" / "workloads" / "fluxjob-crd.yaml"
GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
BUSY = "busy: not enough free resources now; will retry when resources free up"
GROWING = f"scaling up: 2 more pods wait for their slots; {BUSY}"
CONTAINERS = [{"name": "c", "image": "busybox"}]


def job(name: str, *, queue: str | None, suspend: bool) -> dict:
    labels = {"fluxnode.io/queue": queue} if queue else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"suspend": suspend, "parallelism": 2, "completions": 2,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": CONTAINERS}}}}


def pod(name: str, *, job_name: str | None = None, node: str | None = None,
        gated: bool = False) -> dict:
    labels = {"batch.kubernetes.io/job-name": job_name} if job_name else {}
    spec: dict = {"containers": CONTAINERS, "schedulerName": "fluxnode"}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "fluxnode.io/admission"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": spec}


def event(name: str, pod_name: str, component: str, reason: str, message: str,
          when: str) -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": "default"},
            "source": {"component": component}, "reason": reason, "message": message,
            "firstTimestamp": when, "lastTimestamp": when, "type": "Normal"}


@pytest.fixture(scope="module")
def kube():
    kube = KubeEmulator().start()
    try:
        api = kube.api_client()
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load(CRD.read_text()))
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        batch.create_namespaced_job("default", job("sweep", queue="batch", suspend=True))
        batch.create_namespaced_job("default", job("plain", queue=None, suspend=False))
        batch.create_namespaced_job("default", job("going", queue="batch", suspend=False))
        batch.create_namespaced_job("default", job("grown", queue="batch", suspend=False))
        for name, status in (("sweep", {"phase": "Queued", "position": 2, "pods": "0/2",
                                        "reason": BUSY}),
                             ("going", {"phase": "Admitted", "pods": "1/2",
                                        "nodes": "node1"}),
                             ("grown", {"phase": "Running", "position": 3, "pods": "2/4",
                                        "nodes": "node1", "reason": GROWING})):
            custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "FluxJob",
                "metadata": {"name": name},
                "spec": {"queue": "batch", "pods": 2, "priority": 7,
                         "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": name}}})
            custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL,
                                                         name, {"status": status})
        core.create_namespaced_pod("default", pod("going-0", job_name="going", node="node1"))
        core.create_namespaced_pod("default", pod("going-1", job_name="going"))
        core.create_namespaced_pod("default", pod("member", gated=True))
        # a member of pod group "train" (its record, named group-train, is Queued) and one
        # of Volcano group "solo", which has no record yet
        trainee = pod("trainee", gated=True)
        trainee["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
        core.create_namespaced_pod("default", trainee)
        soloist = pod("soloist", gated=True)
        soloist["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "solo"}
        core.create_namespaced_pod("default", soloist)
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "FluxJob",
            "metadata": {"name": "group-train"},
            "spec": {"queue": "batch", "pods": 3, "workload": {
                "apiVersion": "fluxnode.io/v1alpha1", "kind": "PodGroup", "name": "train"}}})
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", PLURAL, "group-train",
            {"status": {"phase": "Queued", "position": 4, "pods": "0/3", "reason": BUSY}})
        for e in (event("e1", "member", "fluxnode", "Waiting", "older words",
                        "2026-11-28T10:00:00Z"),
                  event("e2", "member", "fluxnode", "Waiting",
                        "group default/g: 1 of 3 members exist", "2026-11-28T11:00:00Z"),
                  event("e3", "member", "kubelet", "Pulled", "not ours",
                        "2026-11-28T12:00:00Z")):
            core.create_namespaced_event("default", e)
        yield kube
    finally:
        kube.stop()


def why(kube: KubeEmulator, *args: str) -> list[str]:
    return plugin(kube, "why", *args).check().stdout.splitlines()


def test_a_queued_job_says_where_it_waits_and_why(kube):
    assert why(kube, "sweep") == [
        "Job default/sweep: Queued (position 2) in queue 'batch', priority 7.",
        "  waiting in its queue: its Job stays suspended (no pods) until all its pods fit at "
        "once.",
        f"  reason: {BUSY}",
        "  pods bound: 0/2",
        "  no pods yet (the Job is suspended)",
    ]


def test_an_admitted_job_lists_its_pods(kube):
    assert why(kube, "job/going") == [
        "Job default/going: Admitted in queue 'batch', priority 7.",
        "  admitted: its Job runs and fluxnode binds each pod into its allocation.",
        "  nodes: node1",
        "  pods bound: 1/2",
        "  pod going-0: Pending on node1",
        "  pod going-1: Pending, not bound",
    ]


def test_a_running_job_whose_growth_waits_says_so(kube):
    """A Running FluxJob with a POSITION: its parallelism was raised and the slots for its
    new pods wait in the queue (the binder writes it so: docs/workloads.md); not "every
    pod is bound"."""
    assert why(kube, "grown")[:5] == [
        "Job default/grown: Running (position 3) in queue 'batch', priority 7.",
        "  running, and grown: its parallelism was raised, so the slots for its new pods wait "
        "in the queue at that position; the pods it runs keep theirs.",
        f"  reason: {GROWING}",
        "  nodes: node1",
        "  pods bound: 2/4",
    ]


def test_a_job_not_opted_in_says_how_to(kube):
    assert why(kube, "plain")[0] == (
        "Job default/plain is not queued by fluxnode: it has no fluxnode.io/queue label "
        "(add one when creating it to opt in).")


def test_a_gated_pod_names_the_gate_and_fluxnodes_last_event(kube):
    lines = why(kube, "member")
    assert lines == [
        "Pod default/member: Pending, not bound (scheduler fluxnode).",
        "  gated by fluxnode.io/admission: fluxnode holds it until its whole group is admitted "
        "(see `kubectl fluxnode queue`).",
        # the API server's own condition for a gated pod, passed on as it words it
        "  condition PodScheduled=False (SchedulingGated: Scheduling is blocked due to "
        "non-empty scheduling gates)",
        # the newer of fluxnode's two Events; the kubelet's later one is not fluxnode's
        "  last fluxnode event: Waiting: group default/g: 1 of 3 members exist",
    ]
    assert why(kube, "pod/member") == lines


def test_a_group_member_points_to_its_groups_record(kube):
    assert why(kube, "trainee")[1:4] == [
        "  gated by fluxnode.io/admission: fluxnode holds it until its whole group is admitted "
        "(see `kubectl fluxnode queue`).",
        "  in pod group default/train: FluxJob group-train is Queued, position 4, pods bound "
        "0/3 (kubectl get fluxjob group-train -o yaml).",
        f"  group reason: {BUSY}",
    ]
    assert why(kube, "soloist")[2] == (
        "  in pod group default/solo: no FluxJob volcano-solo yet (the binder writes one for "
        "a gated group once it leads, with the FluxJob CRD installed).")


@pytest.mark.parametrize(("target", "error"), [
    ("nosuch", "error: no Job or pod 'nosuch' in namespace default"),
    ("job/member", "error: no Job 'member' in namespace default"),
    ("pod/sweep", "error: no pod 'sweep' in namespace default"),
    ("svc/x", "error: 'svc/x': expected JOB, job/NAME or pod/NAME, not kind 'svc'"),
])
def test_what_is_not_there_is_named(kube, target, error):
    out = plugin(kube, "why", target)
    assert out.returncode == 1
    assert out.stderr.strip() == error
