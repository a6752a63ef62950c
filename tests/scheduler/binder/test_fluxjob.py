"""The FluxJob record (scheduler/binder/fluxjob.py) built from a Job.

Oracles from outside the code under test: the pod count by Kubernetes' Job defaults
(SetDefaults_Job: parallelism 1 when unset) and min(parallelism, completions); the requests
by tests/support/oracles.py (the official client's quantity parser, Kubernetes' sum); the
priority by the Priority admission plugin's rules (the class's value, else the
globalDefault class's, else 0; the built-in system classes); the object against the CRD's
own openAPIV3Schema (jsonschema) and its printer columns read by their jsonPath.
"""

from __future__ import annotations

import jsonschema
import pytest
import yaml
from fluxnode.scheduler.binder.fluxjob import (
    FluxJob,
    FluxJobError,
    PriorityClasses,
    WorkloadRef,
)
from support.oracles import spec_requests
from support.paths import REPO

CRD = yaml.safe_load((REPO / "daemonset" / "workloads" / "fluxjob-crd.yaml").read_text())
(VERSION,) = CRD["spec"]["versions"]

PRIORITY_CLASSES = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "high"}, "value": 1000},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "batch-default"}, "value": 10, "globalDefault": True},
]


def job(parallelism=None, completions=None, priority_class=None, **template_spec) -> dict:
    spec: dict = {"completionMode": "Indexed", "template": {"spec": {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "x", "resources": {
                "requests": {"cpu": "1500m", "memory": "1Gi"},
                "limits": {"nvidia.com/gpu": "1"}}},
            {"name": "side", "image": "x", "resources": {"limits": {"cpu": "250m"}}},
        ],
        **({"priorityClassName": priority_class} if priority_class else {}),
        **template_spec}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "0b1c-uid",
                         "labels": {"fluxnode.io/queue": "gpu"}},
            "spec": spec}


def column(obj: dict, name: str):
    (col,) = [c for c in VERSION["additionalPrinterColumns"] if c["name"] == name]
    node = obj
    for part in col["jsonPath"].lstrip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@pytest.mark.parametrize("parallelism, completions, pods", [
    (8, 8, 8), (None, 6, 1), (4, None, 4), (5, 3, 3), (None, None, 1),
])
def test_pod_count_follows_the_job_defaults(parallelism, completions, pods):
    record = FluxJob.from_job(job(parallelism, completions), PriorityClasses())
    assert record.spec.pods == pods


def test_requests_and_slot_of_one_pod():
    obj = job(8, 8)
    record = FluxJob.from_job(obj, PriorityClasses())
    millicpu, memory, gpus = spec_requests({"spec": obj["spec"]["template"]["spec"]})
    assert (record.spec.requests.millicpu, record.spec.requests.memory_bytes,
            record.spec.requests.gpus) == (millicpu, memory, gpus) == (1750, 2**30, 1)
    # a slot is whole cores (rounded up), its GPUs, MiB
    assert (record.spec.slot.cores, record.spec.slot.gpus, record.spec.slot.memory_mib) == (
        2, 1, 1024)
    assert record.spec.indexed and record.spec.queue == "gpu"


def test_priority_as_the_priority_admission_plugin_gives_it():
    classes = PriorityClasses.from_objects(PRIORITY_CLASSES)
    assert FluxJob.from_job(job(priority_class="high"), classes).spec.priority == 1000
    assert FluxJob.from_job(job(), classes).spec.priority == 10  # the globalDefault class
    assert FluxJob.from_job(job(), PriorityClasses.from_objects([])).spec.priority == 0
    assert FluxJob.from_job(job(priority_class="system-cluster-critical"),
                            PriorityClasses()).spec.priority == 2000000000
    assert not FluxJob.from_job(job(priority_class="high"), classes).unqueued
    # a class that does not exist: a record, not queued, saying why (no made-up priority)
    record = FluxJob.from_job(job(priority_class="urgent"), classes)
    assert record.spec.priority is None and "priority" not in record.to_object()["spec"]
    assert record.unqueued == record.status.reason
    assert "PriorityClass 'urgent' does not exist" in record.unqueued
    assert record.to_object()["status"] == {"phase": "Queued", "boundPods": 0, "pods": "0/1",
                                            "reason": record.unqueued}


def test_object_fits_the_crd_and_prints_the_queue_columns():
    record = FluxJob.from_job(job(8, 8, priority_class="high"),
                              PriorityClasses.from_objects(PRIORITY_CLASSES))
    record.status.position, record.status.reason = 3, "waiting for 16 cores"
    obj = record.to_object()
    jsonschema.validate(obj, VERSION["schema"]["openAPIV3Schema"])
    assert obj["apiVersion"] == f"{CRD['spec']['group']}/{VERSION['name']}"
    assert obj["kind"] == CRD["spec"]["names"]["kind"]
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "0b1c-uid"
    assert [column(obj, c) for c in ("Queue", "Phase", "Priority", "Position", "Pods",
                                     "Reason")] == [
        "gpu", "Queued", 1000, 3, "0/8", "waiting for 16 cores"]
    assert column(obj, "Start") is None and column(obj, "Nodes") is None  # not yet known
    patch = record.status_patch()
    jsonschema.validate({"spec": obj["spec"], **patch}, VERSION["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("change, words", [
    (lambda j: j["metadata"]["labels"].clear(), "names no queue"),
    (lambda j: j["spec"].update(parallelism="lots"), "spec.parallelism"),
    (lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(
        cpu="fast"), "spec.containers[0].resources"),
])
def test_jobs_that_cannot_be_queued_say_why(change, words):
    obj = job(2, 2)
    change(obj)
    with pytest.raises(FluxJobError, match="Job ml/train") as info:
        FluxJob.from_job(obj, PriorityClasses())
    assert words in str(info.value)


def member_pod(name: str, cpu: str, priority: int, memory: str = "1Gi") -> dict:
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"priority": priority, "priorityClassName": "high" if priority else "",
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "requests": {"cpu": cpu, "memory": memory}}}]}}


def test_a_pod_groups_record_fits_the_crd_and_is_owned_by_its_podgroup():
    """from_group: pods is the group's size; one member's requests (the first by name)
    as Kubernetes sums them; the highest priority the Priority plugin gave its pods."""
    pods = [member_pod("w-1", "3", 0), member_pod("w-0", "1500m", 1000)]
    ref = WorkloadRef("scheduling.x-k8s.io/v1alpha1", "PodGroup", "w", "pg-uid")
    record = FluxJob.from_group("ml", "group-w", "batch", ref, 4, pods)
    obj = record.to_object()
    jsonschema.validate(obj, VERSION["schema"]["openAPIV3Schema"])
    millicpu, memory, gpus = spec_requests(pods[1])  # w-0, the first by name
    assert obj["spec"]["podRequests"] == {"cpu": f"{millicpu}m", "memory": str(memory),
                                          "gpus": gpus}
    assert (obj["spec"]["pods"], obj["spec"]["priority"], obj["spec"]["slot"]["cores"]) == (
        4, 1000, 2)
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "name": "w",
        "uid": "pg-uid", "blockOwnerDeletion": False}]
    assert [column(obj, c) for c in ("Queue", "Phase", "Pods")] == ["batch", "Queued", "0/4"]
    # a group named only by labels has no object to own its record
    bare = FluxJob.from_group("ml", "group-w", "batch",
                              WorkloadRef("fluxnode.io/v1alpha1", "PodGroup", "w"), 2, pods)
    assert "ownerReferences" not in bare.to_object()["metadata"]
    with pytest.raises(FluxJobError, match="pod group ml/w: no pods"):
        FluxJob.from_group("ml", "group-w", "batch", ref, 2, [])
