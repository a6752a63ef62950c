"""daemonset/workloads/ (issue 30): the MutatingWebhookConfiguration and the FluxJob CRD, as
`kubectl kustomize` renders them, checked against the base install they rely on (the
binder's Deployment, its webhook Service, its RBAC) and against what the binder serves."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from fluxnode.scheduler.binder.admission import (
    ADMISSION_GATE,
    JOB_ADMITTED_LABEL,
    QUEUE_LABEL,
    Admission,
)
from fluxnode.scheduler.binder.podgroup import group_of
from fluxnode.scheduler.binder.webhook_cert import service_names
from fluxnode.scheduler.binder.webhook_server import PATH
from support.kubectl import rendered as render_kustomization
from support.paths import REPO

from fluxnode.commands.binder import binder as binder_command
from fluxnode.testing.kube_emulator import RequestInfo
from fluxnode.testing.kube_patch import json_patch
from fluxnode.testing.kube_rbac import RbacAuthorizer

DAEMONSET = REPO / "daemonset"
K8S_VERSION = kubernetes_validate.latest_version()
COLUMNS = ["Queue", "Phase", "Priority", "Position", "Pods", "Nodes", "Start", "Reason", "Age"]


def one(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.fixture(scope="module")
def workloads() -> list[dict]:
    return render_kustomization("daemonset/workloads/")


@pytest.fixture(scope="module")
def binder_params(binder_deployment) -> dict:
    (c,) = binder_deployment["spec"]["template"]["spec"]["containers"]
    return binder_command.make_context("binder", list(c["args"])).params


def test_rendered_workloads_are_valid_and_labelled(workloads):
    assert {d["kind"] for d in workloads} == {"MutatingWebhookConfiguration",
                                              "CustomResourceDefinition"}
    for doc in workloads:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fluxnode"


def test_webhook_reaches_the_binders_and_only_opted_in_objects(workloads, rendered,
                                                               binder_deployment, binder_params):
    config = one(workloads, "MutatingWebhookConfiguration", binder_params["webhook_config"])
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert set(hooks) == {"jobs.admission.fluxnode.io", "pods.admission.fluxnode.io"}
    namespace = binder_deployment["metadata"]["namespace"]
    for hook in hooks.values():
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] <= 5 and hook["admissionReviewVersions"] == ["v1"]
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert set(expr["values"]) == {"kube-system", namespace}
        assert hook["clientConfig"] == hooks["jobs.admission.fluxnode.io"]["clientConfig"]
    jobs, pods = hooks["jobs.admission.fluxnode.io"], hooks["pods.admission.fluxnode.io"]
    assert [(r["apiGroups"], r["apiVersions"], r["resources"], r["operations"])
            for r in jobs["rules"]] == [(["batch"], ["v1"], ["jobs"], ["CREATE"])]
    assert [(r["apiGroups"], r["apiVersions"], r["resources"], r["operations"])
            for r in pods["rules"]] == [([""], ["v1"], ["pods"], ["CREATE"])]
    assert jobs["objectSelector"] == {"matchExpressions": [
        {"key": QUEUE_LABEL, "operator": "Exists"}]}
    # the pods of a Job the webhook admitted (it labels the template) are not sent
    assert pods["objectSelector"] == {"matchExpressions": [
        {"key": QUEUE_LABEL, "operator": "Exists"},
        {"key": JOB_ADMITTED_LABEL, "operator": "DoesNotExist"}]}
    hook = jobs
    # the Service it names selects the binder's pods, on the port `--webhook-port` serves
    ref = hook["clientConfig"]["service"]
    assert ref["path"] == PATH and "caBundle" not in hook["clientConfig"]  # the binder's to set
    svc = one(rendered, "Service", ref["name"])
    assert ref["namespace"] == svc["metadata"]["namespace"] == namespace
    assert svc["spec"]["selector"].items() <= (
        binder_deployment["spec"]["template"]["metadata"]["labels"].items())
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == ref["port"]]
    (c,) = binder_deployment["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert container_ports[port["targetPort"]] == binder_params["webhook_port"]
    # the certificate names the Service as the API server calls it
    assert binder_params["webhook_service"] == ref["name"]
    assert f"{ref['name']}.{namespace}.svc" in service_names(ref["name"], namespace)
    secret_namespace = binder_params["webhook_secret"].split("/")[0]
    assert secret_namespace == namespace
    # the served files are written to a volume (the root filesystem is read-only)
    assert binder_params["webhook_cert_dir"] in {m["mountPath"] for m in c["volumeMounts"]}


def test_fluxjob_crd_prints_the_queue(workloads):
    crd = one(workloads, "CustomResourceDefinition", "fluxjobs.fluxnode.io")
    spec = crd["spec"]
    assert spec["scope"] == "Namespaced" and "fj" in spec["names"]["shortNames"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == COLUMNS
    schema = version["schema"]["openAPIV3Schema"]
    for column in columns:  # every column reads a field the schema has (or ObjectMeta's)
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            node = node["properties"][part]
    phases = schema["properties"]["status"]["properties"]["phase"]["enum"]
    assert phases == ["Queued", "Reserved", "Admitted", "Running", "Finished", "Failed"]


def info(verb, resource, namespace=None, name=None, group="", subresource=None):
    return RequestInfo(verb, resource, subresource, namespace, name, group, {})


def test_binder_rbac_for_workloads_is_least_privilege(rendered, binder_params):
    rbac = RbacAuthorizer.from_manifests([DAEMONSET / "binder.yaml"], "fluxnode",
                                         "fluxnode-binder")
    namespace, secret = binder_params["webhook_secret"].split("/")
    for request in [info("get", "secrets", namespace, secret),
                    info("update", "secrets", namespace, secret),
                    # watched by name (fieldSelector metadata.name): every replica reloads it
                    RequestInfo("list", "secrets", None, namespace, None, "",
                                {"fieldSelector": f"metadata.name={secret}"}),
                    RequestInfo("watch", "secrets", None, namespace, None, "",
                                {"fieldSelector": f"metadata.name={secret}"}),
                    info("create", "secrets", namespace),
                    info("patch", "jobs.batch", "default", "train", "batch")]:
        assert rbac(request) is None, request
    for request in [info("get", "secrets", namespace, "fluxnode-curve"),
                    info("list", "secrets", namespace),
                    info("get", "secrets", "default", secret),
                    info("create", "secrets", "default"),
                    info("delete", "jobs.batch", "default", "train", "batch"),
                    info("create", "jobs.batch", "default", None, "batch")]:
        assert rbac(request) is not None, request
    # kinds the emulator's authorizer does not know yet: the rules themselves
    role = one(rendered, "ClusterRole", "fluxnode-binder")
    (hooks,) = [r for r in role["rules"] if r["resources"] == ["mutatingwebhookconfigurations"]]
    assert hooks["resourceNames"] == [binder_params["webhook_config"]]
    assert sorted(hooks["verbs"]) == ["get", "list", "patch", "watch"]  # watched by name
    status = [r for r in role["rules"] if r["resources"] == ["fluxjobs/status"]]
    assert status and all(r["apiGroups"] == ["fluxnode.io"] for r in status)


def test_queued_group_example_is_gated_by_the_webhook_and_stays_valid():
    """example/queued-group.yaml as the API server would store it after the webhook."""
    docs = [d for d in yaml.safe_load_all((REPO / "example" / "queued-group.yaml").read_text())
            if d]
    assert len(docs) == 2
    for doc in docs:
        request = {"uid": "u", "operation": "CREATE",
                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                   "object": doc}
        verdict = Admission().review(request)
        assert verdict.allowed, verdict.message
        stored = json_patch(doc, verdict.patch)
        kubernetes_validate.validate(stored, K8S_VERSION, strict=True)
        assert stored["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
        assert stored["spec"]["schedulerName"] == "fluxnode"
        assert group_of(stored).size == 2
