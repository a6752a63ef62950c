"""The binder's admission webhook called by the API emulator itself (issue 30), as installed:
the MutatingWebhookConfiguration of daemonset/workloads/webhook.yaml, its caBundle set by the
binder's certificate keeper (the binder runs with exactly daemonset/binder.yaml's RBAC, a
standby), objects created with the official client.

Oracles from outside the binder: the API server's error for a webhook that cannot be called
under failurePolicy Fail (``failed calling webhook "NAME"``, k8s.io/apiserver
webhookerrors/ErrCallingWebhook), what docs/binder.md promises an opted-in Job and pod (stored
suspended; gated with fluxnode.io/admission) and that nothing else goes through the webhook."""

from __future__ import annotations

import json

import pytest
import yaml
from fluxnode.scheduler.binder.podgroup import SCHEDULER_PLUGINS, GroupKey
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.paths import REPO
from support.podgroup_crds import podgroup, scheduler_plugins_crd
from support.webhook_binder import held_lease, readyz, start

from fluxnode.testing.waiting import wait_for

WEBHOOK_MANIFEST = REPO / "daemonset" / "workloads" / "webhook.yaml"
CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
QUEUE = {"fluxnode.io/queue": "batch"}


def job(name: str, labels: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "c", "image": "busybox"}]}}}}


def pod(name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
def webhook_binder(kube, tmp_path):
    """A standby binder serving the webhook, the configuration installed and trusted."""
    client.AdmissionregistrationV1Api(kube.api_client()).create_mutating_webhook_configuration(
        yaml.safe_load(WEBHOOK_MANIFEST.read_text()))
    held_lease(kube)
    b, denials = start(kube, [REPO / "daemonset" / "binder.yaml"], tmp_path)
    try:
        wait_for(lambda: readyz(b)[0] == 200, 30, what="binder ready")
        kube.service_endpoints[("fluxnode", "fluxnode-webhook")] = ("127.0.0.1", b.webhook.port)
        bundle = kube.get("secrets", "fluxnode-webhook-cert", "fluxnode")["data"]["ca-bundle.crt"]
        wait_for(lambda: all(h["clientConfig"].get("caBundle") == bundle
                             for h in kube.get(CONFIG, "fluxnode")["webhooks"]),
                 30, what="the caBundle set by the binder")
        yield b
        assert denials == []
    finally:
        b.stop()


def test_an_opted_in_job_is_stored_suspended(kube, webhook_binder):
    batch = client.BatchV1Api(kube.api_client())
    made = batch.create_namespaced_job("default", job("train", QUEUE))
    assert made.spec.suspend is True
    stored = kube.get("jobs.batch", "train", "default")
    assert stored["spec"]["suspend"] is True
    template = stored["spec"]["template"]
    assert template["spec"]["schedulerName"] == "fluxnode"
    assert template["metadata"]["labels"]["fluxnode.io/queue"] == "batch"
    assert template["metadata"]["annotations"]["fluxnode.io/job"] == "train"
    assert template["metadata"]["labels"]["fluxnode.io/job-admitted"] == "true"
    # a Job without the label is not sent: stored as submitted
    plain = batch.create_namespaced_job("default", job("plain", {}))
    assert not plain.spec.suspend
    assert plain.spec.template.spec.scheduler_name in (None, "default-scheduler")


def test_an_opted_in_pod_is_stored_gated(kube, core, webhook_binder):
    made = core.create_namespaced_pod("default", pod("p", QUEUE))
    assert [g.name for g in made.spec.scheduling_gates] == ["fluxnode.io/admission"]
    assert made.spec.scheduler_name == "fluxnode"
    stored = kube.get("pods", "p", "default")
    assert stored["status"]["conditions"][0]["reason"] == "SchedulingGated"
    other = core.create_namespaced_pod("default", pod("q", {}))
    assert not other.spec.scheduling_gates


def test_with_the_webhook_down_only_opted_in_objects_are_refused(kube, core, webhook_binder):
    webhook_binder.webhook.stop()
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod("p", QUEUE))
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 500
    # as a real API server words it (webhookerrors.ErrCallingWebhook around Go's url.Error):
    # the webhook's name says fluxnode, the URL names the Service to check (docs/binder.md
    # "When opted-in objects are refused"); after it, the connection's own error
    assert message.startswith(
        'Internal error occurred: failed calling webhook "pods.admission.fluxnode.io": failed '
        'to call webhook: Post "https://fluxnode-webhook.fluxnode.svc:443/mutate?timeout=5s": ')
    assert message.endswith("Connection refused")
    with pytest.raises(ApiException) as refused_job:
        client.BatchV1Api(kube.api_client()).create_namespaced_job("default", job("j", QUEUE))
    assert 'failed calling webhook "jobs.admission.fluxnode.io"' in json.loads(
        refused_job.value.body)["message"]
    assert [p["metadata"]["name"] for p in kube.list("pods", "default")] == []
    assert core.create_namespaced_pod("default", pod("q", {})).metadata.name == "q"
    # nor is anything in fluxnode's own namespace sent (namespaceSelector)
    assert core.create_namespaced_pod("fluxnode", pod("r", QUEUE)).metadata.name == "r"


def calls(b) -> int:
    """The requests the binder's webhook server answered (its duration histogram's count)."""
    return int(sum(s.value for m in b.webhook.server.requests.collect() for s in m.samples
                   if s.name.endswith("_count")))


def test_the_pods_of_an_admitted_job_are_not_sent_to_the_webhook(kube, core, webhook_binder):
    kube.start_job_controller()
    batch = client.BatchV1Api(kube.api_client())
    before = calls(webhook_binder)
    batch.create_namespaced_job("default", job("train", QUEUE))
    assert calls(webhook_binder) == before + 1  # the Job's own call
    # unsuspended (the binder here is a standby: its FluxJob loop would do it): the Job
    # controller creates both pods from the labelled template, and they are not sent
    batch.patch_namespaced_job("train", "default", {"spec": {"suspend": False}})
    wait_for(lambda: len(kube.list("pods", "default")) == 2, 30, what="the Job's two pods")
    assert calls(webhook_binder) == before + 1
    for p in kube.list("pods", "default"):
        assert not p["spec"].get("schedulingGates")  # none needed: admitted with their Job
        assert p["spec"]["schedulerName"] == "fluxnode"
        (owner,) = p["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job" and owner["name"] == "train" and owner["controller"]


def test_a_pod_forging_the_admitted_label_gets_the_classic_path(kube, core, webhook_binder):
    before = calls(webhook_binder)
    forged = pod("f", {**QUEUE, "fluxnode.io/job-admitted": "true"})
    forged["metadata"]["annotations"] = {"fluxnode.io/job": "train"}
    made = core.create_namespaced_pod("default", forged)
    # not sent: stored as submitted, as a pod without the queue label would be (no gate,
    # its own scheduler name: the default scheduler's, or fluxnode's classic path per pod)
    assert calls(webhook_binder) == before
    assert not made.spec.scheduling_gates
    assert made.spec.scheduler_name in (None, "default-scheduler")


# -- a group larger than its declared size (issue 30) ----------------------------------

GROUP = {**QUEUE, "scheduling.x-k8s.io/pod-group": "g"}


def refusal(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value.status, json.loads(refused.value.body)["message"]


def stored_names(kube) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube.list("pods", "default"))


def seen(b, name: str, kind: str = "group", count: int = 2) -> bool:
    """The replica's pod cache holds `count` live members (what its webhook counts)."""
    return b.members.live_count(GroupKey("default", kind, name)) == count


def test_a_pod_beyond_its_groups_declared_size_is_refused_by_the_api_server(
        kube, core, webhook_binder):
    sized = {**GROUP, "fluxnode.io/group-size": "2"}
    for name in ("a", "b"):
        core.create_namespaced_pod("default", pod(name, sized))
    wait_for(lambda: seen(webhook_binder, "g"), 30, what="both members in the pod cache")
    status, message = refusal(lambda: core.create_namespaced_pod("default", pod("c", sized)))
    # the API server's wording for a webhook's denial (k8s.io/apiserver admission/plugin/
    # webhook/errors ToStatusErr), the webhook's code, and our message naming group, size, count
    assert status == 422
    assert message == ('admission webhook "pods.admission.fluxnode.io" denied the request: '
                       "fluxnode: group default/g is full: its size is 2 (declared) and it "
                       "has 2 members already; delete one or raise the size before adding a pod")
    assert stored_names(kube) == ["a", "b"]
    # a member that is gone makes room for its replacement
    core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    wait_for(lambda: seen(webhook_binder, "g", count=1), 30, what="one member left")
    assert core.create_namespaced_pod("default", pod("c", sized)).metadata.name == "c"


def test_a_podgroups_min_member_caps_the_group_once_its_crd_is_discovered(
        kube, core, webhook_binder):
    extensions = client.ApiextensionsV1Api(kube.api_client())
    extensions.create_custom_resource_definition(scheduler_plugins_crd())
    custom = client.CustomObjectsApi(kube.api_client())
    custom.create_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", "default",
                                           "podgroups",
                                           podgroup("scheduling.x-k8s.io/v1alpha1", "g", 1))
    wait_for(lambda: webhook_binder.podgroups.get(SCHEDULER_PLUGINS, "default", "g"), 30,
             what="the PodGroup discovered and listed by the binder")
    core.create_namespaced_pod("default", pod("a", GROUP))
    wait_for(lambda: seen(webhook_binder, "g", count=1), 30, what="the member in the cache")
    status, message = refusal(lambda: core.create_namespaced_pod("default", pod("b", GROUP)))
    assert status == 422
    assert "group default/g is full: its size is 1 (PodGroup default/g spec.minMember) and it " \
           "has 1 members already" in message
    assert stored_names(kube) == ["a"]


def test_without_rbac_for_podgroups_a_replica_is_ready_and_sizes_groups_by_their_labels(
        kube, core, tmp_path):
    """An older ClusterRole with no podgroups rule: the list is refused (403), the replica
    says so in its log, and is Ready all the same (it would otherwise never place a pod)."""
    docs = [d for d in yaml.safe_load_all((REPO / "daemonset" / "binder.yaml").read_text()) if d]
    for doc in docs:
        if doc["kind"] == "ClusterRole":
            doc["rules"] = [r for r in doc["rules"] if "podgroups" not in r["resources"]]
    manifest = tmp_path / "binder-without-podgroups.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    client.ApiextensionsV1Api(kube.api_client()).create_custom_resource_definition(
        scheduler_plugins_crd())
    held_lease(kube)
    b, denials = start(kube, [manifest], tmp_path)
    try:
        wait_for(lambda: readyz(b)[0] == 200, 30, what="binder ready without podgroups RBAC")
        assert {d.resource for d in denials} == {"podgroups.scheduling.x-k8s.io"}
        assert not b.podgroups.installed(SCHEDULER_PLUGINS)
    finally:
        b.stop()
