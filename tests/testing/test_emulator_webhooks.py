"""Mutating admission webhooks in the API emulator: a real HTTPS webhook on loopback
(tests/support/webhook_server.py), the official client and kubectl.

Oracles from outside the emulator: the AdmissionReview v1 fields of k8s.io/api/admission/v1,
what the test's own webhook decided (its patch, its denial), the API server's error shapes
(webhookerrors.ToStatusErr: ``admission webhook "NAME" denied the request: ...``;
ErrCallingWebhook under NewInternalError: ``Internal error occurred: failed calling webhook
"NAME": failed to call webhook: ...``; validation.go for the configuration)."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.fluxjob_crd import GROUP, PLURAL, VERSION, fluxjob, fluxjob_crd
from support.kubectl import kubectl, parse_table
from support.webhook_server import WebhookServer

HOOK = "pods.fluxnode.io"


def _pod(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _configuration(name: str, hooks: list[dict]) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": hooks}


def _hook(server: WebhookServer | None, name: str = HOOK, **fields: object) -> dict:
    hook = {"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": server.service_config() if server else {
                "service": {"namespace": "fluxnode", "name": "nowhere", "path": "/mutate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}]}
    hook.update(fields)
    return hook


def _error(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


@pytest.fixture
def admission(kube):
    return client.AdmissionregistrationV1Api(kube.api_client())


def _gate(request: dict) -> dict:
    """The test's webhook: label the pod and gate its scheduling."""
    return {"allowed": True, "patch": [
        {"op": "add", "path": "/metadata/labels/fluxnode.io~1mutated", "value": "yes"},
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "fluxnode.io/queue"}]},
    ]}


def test_a_matching_pod_is_patched_and_the_review_is_admission_v1(kube, core, admission,
                                                                    tmp_path):
    with WebhookServer(tmp_path / "hook", "gate", "fluxnode", _gate) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("gate", [_hook(
            server, objectSelector={"matchLabels": {"app": "train"}},
            namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "default"}})]))
        made = core.create_namespaced_pod("default", _pod("a", {"app": "train"}))
        assert made.metadata.labels == {"app": "train", "fluxnode.io/mutated": "yes"}
        assert [g.name for g in made.spec.scheduling_gates] == ["fluxnode.io/queue"]
        [review] = server.reviews
        assert review["apiVersion"] == "admission.k8s.io/v1"
        request = review["request"]
        assert request["uid"] and request["operation"] == "CREATE"
        assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
        assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
        assert (request["namespace"], request["name"]) == ("default", "a")
        assert request["userInfo"]["username"] == kube.user
        assert request["object"]["metadata"]["labels"] == {"app": "train"}
        assert request["oldObject"] is None and request["dryRun"] is False
        # neither a pod the objectSelector leaves out nor one in another namespace is sent
        core.create_namespaced_pod("default", _pod("b", {"app": "other"}))
        core.create_namespaced_pod("kube-system", _pod("c", {"app": "train"}))
        assert len(server.reviews) == 1
        assert "fluxnode.io/mutated" not in (kube.get("pods", "c", "kube-system")["metadata"]
                                             .get("labels") or {})
        # a dry run is sent as one (sideEffects None) and stores nothing
        core.create_namespaced_pod("default", _pod("d", {"app": "train"}), dry_run="All")
        assert server.reviews[-1]["request"]["dryRun"] is True
        assert [p["metadata"]["name"] for p in kube.list("pods", "default")] == ["a", "b"]


def test_an_update_of_a_custom_resource_is_sent_with_its_old_object_then_validated(
        kube, admission, tmp_path):
    client.ApiextensionsV1Api(kube.api_client()).create_custom_resource_definition(
        fluxjob_crd())
    custom = client.CustomObjectsApi(kube.api_client())

    def decide(request: dict) -> dict:
        pods = request["object"]["spec"]["pods"]
        return {"allowed": True, "patch": [
            {"op": "replace", "path": "/spec/priority", "value": 100 if pods < 8 else -1}]}

    with WebhookServer(tmp_path / "hook", "prio", "fluxnode", decide) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("prio", [_hook(
            server, name="prio.fluxnode.io", rules=[{
                "operations": ["UPDATE"], "apiGroups": [GROUP], "apiVersions": [VERSION],
                "resources": [PLURAL], "scope": "Namespaced"}])]))
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, fluxjob("j"))
        assert server.reviews == []  # CREATE is not in its rules
        out = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j",
                                                    {"spec": {"pods": 4}})
        assert out["spec"] == {"pods": 4, "queue": "batch", "priority": 100}
        request = server.reviews[-1]["request"]
        assert request["operation"] == "UPDATE"
        assert request["oldObject"]["spec"]["pods"] == 2
        assert request["object"]["spec"]["priority"] == 16  # defaulted before admission
        assert request["kind"] == {"group": GROUP, "version": VERSION, "kind": "FluxJob"}
        with pytest.raises(ApiException) as exc:  # the mutated object is validated
            custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j",
                                                  {"spec": {"pods": 9}})
        assert _error(exc) == (422, 'FluxJob.fluxnode.io "j" is invalid: spec.priority: '
                                    'Invalid value: -1: spec.priority in body should be '
                                    'greater than or equal to 0')
        # the status subresource is not "fluxjobs": not sent
        sent = len(server.reviews)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "j",
                                                     {"status": {"phase": "Queued"}})
        assert len(server.reviews) == sent


def test_a_denial_carries_the_webhooks_message_and_code(kube, core, admission, tmp_path):
    def deny(request: dict) -> dict:
        return {"allowed": False, "status": {"code": 403, "message": "queue batch is closed"}}

    with WebhookServer(tmp_path / "hook", "deny", "fluxnode", deny) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("deny", [_hook(server)]))
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod("default", _pod("a"))
        assert _error(exc) == (403, f'admission webhook "{HOOK}" denied the request: queue '
                                    "batch is closed")
        assert kube.list("pods", "default") == []


def test_a_webhook_that_cannot_be_called_fails_or_is_ignored_by_its_policy(kube, core,
                                                                         admission, tmp_path):
    admission.create_mutating_webhook_configuration(_configuration("gone", [_hook(None)]))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", _pod("a"))
    status, message = _error(exc)
    assert status == 500
    assert message.startswith(f'Internal error occurred: failed calling webhook "{HOOK}": '
                              'failed to call webhook: Post "https://nowhere.fluxnode.svc:443/'
                              'mutate?timeout=10s": '), message
    admission.patch_mutating_webhook_configuration(
        "gone", [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}])
    assert core.create_namespaced_pod("default", _pod("a")).metadata.name == "a"
    admission.delete_mutating_webhook_configuration("gone")
    # a server whose certificate the caBundle does not vouch for: Fail
    with WebhookServer(tmp_path / "a", "gate", "fluxnode", _gate) as server, \
            WebhookServer(tmp_path / "b", "other", "fluxnode", _gate) as other:
        kube.service_endpoints[server.service] = server.address
        config = server.service_config()
        config["caBundle"] = other.ca_bundle
        admission.create_mutating_webhook_configuration(_configuration("bad-ca", [_hook(
            None, clientConfig=config)]))
        with pytest.raises(ApiException) as exc:
            core.create_namespaced_pod("default", _pod("b"))
        status, message = _error(exc)
        assert status == 500 and "certificate verify failed" in message, message
        assert server.reviews == []


def test_a_webhook_slower_than_its_timeout_fails_the_request(kube, core, admission, tmp_path):
    release = threading.Event()

    def slow(request: dict) -> dict:
        release.wait(30)
        return {"allowed": True}

    with WebhookServer(tmp_path / "hook", "slow", "fluxnode", slow) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("slow", [_hook(
            server, timeoutSeconds=1)]))
        try:
            with pytest.raises(ApiException) as exc:
                core.create_namespaced_pod("default", _pod("a"))
        finally:
            release.set()
        status, message = _error(exc)
        assert status == 500 and "?timeout=1s" in message and "timed out" in message, message


def test_a_configuration_is_validated_and_kubectl_lists_it(kube, admission):
    with pytest.raises(ApiException) as exc:
        admission.create_mutating_webhook_configuration(_configuration("x", [
            _hook(None, timeoutSeconds=31), _hook(None, name="short", sideEffects="Some")]))
    assert _error(exc) == (422, 'MutatingWebhookConfiguration.admissionregistration.k8s.io "x" '
                                'is invalid: [webhooks[0].timeoutSeconds: Invalid value: 31: '
                                'the timeout value must be between 1 and 30 seconds, '
                                'webhooks[1].name: Invalid value: "short": should be a domain '
                                'with at least three segments separated by dots, '
                                'webhooks[1].sideEffects: Unsupported value: "Some": supported '
                                'values: "None", "NoneOnDryRun"]')
    admission.create_mutating_webhook_configuration(_configuration("two", [
        _hook(None, failurePolicy="Ignore"),
        _hook(None, name="other.fluxnode.io", failurePolicy="Ignore")]))
    rows = parse_table(kubectl(kube, "get", "mutatingwebhookconfigurations").check().stdout)[0]
    assert [(r["NAME"], r["WEBHOOKS"]) for r in rows] == [("two", "2")]


def test_kubectl_create_goes_through_the_webhook(kube, admission, tmp_path):
    with WebhookServer(tmp_path / "hook", "gate", "fluxnode", _gate) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("gate", [_hook(server)]))
        kubectl(kube, "run", "p", "--image=busybox", "--restart=Never").check()
        pod = kube.get("pods", "p", "default")
        assert pod["spec"]["schedulingGates"] == [{"name": "fluxnode.io/queue"}]
        assert server.reviews[0]["request"]["object"]["spec"]["containers"][0]["image"] == \
            "busybox"


@pytest.mark.parametrize("policy, seen", [("Never", "0"), ("IfNeeded", "1")])
def test_reinvocation_if_needed_calls_a_webhook_again_after_a_later_change(
        kube, core, admission, tmp_path, policy, seen):
    def count(request: dict) -> dict:  # notes how many labels it saw
        labels = request["object"]["metadata"].get("labels") or {}
        return {"allowed": True, "patch": [{"op": "add", "path": "/metadata/annotations",
                                            "value": {"seen": str(len(labels))}}]}

    def label(request: dict) -> dict:
        return {"allowed": True, "patch": [{"op": "add", "path": "/metadata/labels",
                                            "value": {"team": "x"}}]}

    with WebhookServer(tmp_path / "a", "count", "fluxnode", count) as first, \
            WebhookServer(tmp_path / "b", "label", "fluxnode", label) as second:
        kube.service_endpoints[first.service] = first.address
        kube.service_endpoints[second.service] = second.address
        # configurations are called in name order: "a-count" before "b-label"
        admission.create_mutating_webhook_configuration(_configuration("a-count", [_hook(
            first, name="count.fluxnode.io", reinvocationPolicy=policy)]))
        admission.create_mutating_webhook_configuration(_configuration("b-label", [_hook(
            second, name="label.fluxnode.io")]))
        made = core.create_namespaced_pod("default", _pod("p"))
        assert made.metadata.annotations == {"seen": seen}
        assert made.metadata.labels == {"team": "x"}
        assert len(first.reviews) == (2 if policy == "IfNeeded" else 1)


def test_a_delete_a_webhook_would_see_is_not_emulated(kube, core, admission):
    core.create_namespaced_pod("default", _pod("p"))
    admission.create_mutating_webhook_configuration(_configuration("all", [_hook(
        None, failurePolicy="Ignore", rules=[{"operations": ["*"], "apiGroups": [""],
                                              "apiVersions": ["v1"], "resources": ["pods"]}])]))
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("p", "default")
    status, message = _error(exc)
    assert status == 501 and f'the DELETE admission of mutating webhook "{HOOK}"' in message
    assert kube.get("pods", "p", "default")["metadata"]["name"] == "p"


def test_validating_webhooks_are_stored_and_a_write_they_would_see_is_not_emulated(
        kube, core, admission):
    admission.create_validating_webhook_configuration({
        "metadata": {"name": "check"}, "webhooks": [_hook(None, failurePolicy="Ignore")]})
    assert admission.read_validating_webhook_configuration("check").webhooks[0]. \
        timeout_seconds == 10  # defaulted
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", _pod("p"))
    status, message = _error(exc)
    assert status == 501 and f'the CREATE admission of validating webhook "{HOOK}"' in message
    assert kube.list("pods", "default") == []
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})  # not its rules


def test_a_configuration_written_anew_is_applied_with_its_new_selectors(kube, core, admission,
                                                                        tmp_path):
    """The API server applies the configurations as they are now: after a change of a
    webhook's objectSelector the pods it names now are sent and those it named before are
    not (the emulator keeps each selector parsed: the kept one must not outlive it)."""
    with WebhookServer(tmp_path / "hook", "gate", "fluxnode", _gate) as server:
        kube.service_endpoints[server.service] = server.address
        admission.create_mutating_webhook_configuration(_configuration("gate", [_hook(
            server, objectSelector={"matchLabels": {"app": "train"}})]))
        core.create_namespaced_pod("default", _pod("a", {"app": "train"}))
        core.create_namespaced_pod("default", _pod("b", {"app": "serve"}))
        assert [r["request"]["name"] for r in server.reviews] == ["a"]
        admission.patch_mutating_webhook_configuration("gate", [
            {"op": "replace", "path": "/webhooks/0/objectSelector",
             "value": {"matchExpressions": [{"key": "app", "operator": "In",
                                             "values": ["serve"]}]}}])
        core.create_namespaced_pod("default", _pod("c", {"app": "train"}))
        core.create_namespaced_pod("default", _pod("d", {"app": "serve"}))
        assert [r["request"]["name"] for r in server.reviews] == ["a", "d"]
        labels = {p["metadata"]["name"]: p["metadata"]["labels"] for p in kube.list("pods")}
        assert "fluxnode.io/mutated" not in labels["c"]
        assert labels["d"]["fluxnode.io/mutated"] == "yes"
