"""Pod scheduling gates in the API emulator, as the API server applies them.

Oracles, written out from the Kubernetes sources: the pod strategy's SchedulingGated
condition (pkg/registry/core/pod/strategy.go), validateOnlyDeletedSchedulingGates'
Forbidden error (pkg/apis/core/validation/validation.go), the binding's conflict
(pkg/registry/core/pod/storage/storage.go: ``pod P has non-empty .spec.schedulingGates``
as a Conflict on pods/binding), and printPod's STATUS (printers.go); kubectl's output."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from support.kubectl import kubectl, parse_table


def _pod(name: str, gates: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "schedulingGates": [{"name": g} for g in gates]}}


def _bind(core, name: str, node: str = "w1") -> None:
    core.create_namespaced_pod_binding(
        name, "default", {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}},
        _preload_content=False)


def _error(exc: pytest.ExceptionInfo) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


def test_a_gated_pod_is_scheduling_gated_and_cannot_be_bound_until_its_gates_go(kube, core):
    kube.add_node("w1")
    made = core.create_namespaced_pod("default", _pod("p", ["fluxnode.io/queue", "other/x"]))
    [condition] = made.status.conditions
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "PodScheduled", "False", "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates")
    with pytest.raises(ApiException) as exc:
        _bind(core, "p")
    assert _error(exc) == (409, 'Operation cannot be fulfilled on pods/binding "p": pod p has '
                                "non-empty .spec.schedulingGates")
    assert "nodeName" not in kube.get("pods", "p", "default")["spec"]
    core.patch_namespaced_pod("p", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    with pytest.raises(ApiException) as exc:  # one gate left
        _bind(core, "p")
    assert exc.value.status == 409
    core.patch_namespaced_pod("p", "default", [{"op": "remove", "path": "/spec/schedulingGates"}])
    _bind(core, "p")
    pod = kube.get("pods", "p", "default")
    assert pod["spec"]["nodeName"] == "w1"
    assert [(c["type"], c["status"]) for c in pod["status"]["conditions"]] == [
        ("PodScheduled", "True")]


def test_gates_may_only_be_removed_after_creation(kube, core):
    core.create_namespaced_pod("default", _pod("p", ["a"]))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", "default", [
            {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "b"}}])
    assert _error(exc) == (422, 'Pod "p" is invalid: spec.schedulingGates[1].name: Forbidden: '
                                "only deletion is allowed, but found new scheduling gate 'b'")
    core.create_namespaced_pod("default", _pod("q", []))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("q", "default", {"spec": {"schedulingGates": [{"name": "c"}]}})
    body = json.loads(exc.value.body)
    assert body["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "spec.schedulingGates[0].name",
        "message": "Forbidden: only deletion is allowed, but found new scheduling gate 'c'"}]
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", _pod("r", ["a", "a"]))
    assert _error(exc) == (422, 'Pod "r" is invalid: spec.schedulingGates[1].name: Duplicate '
                                'value: "a"')
    assert kube.get("pods", "p", "default")["spec"]["schedulingGates"] == [{"name": "a"}]


def test_kubectl_shows_a_gated_pod_and_refuses_a_new_gate(kube):
    kube.add_node("w1")
    kubectl(kube, "run", "p", "--image=busybox", "--restart=Never", "--overrides",
            json.dumps({"spec": {"schedulingGates": [{"name": "fluxnode.io/queue"}]}})).check()
    rows = parse_table(kubectl(kube, "get", "pods").check().stdout)[0]
    assert [(r["NAME"], r["READY"], r["STATUS"]) for r in rows] == [
        ("p", "0/1", "SchedulingGated")]
    result = kubectl(kube, "patch", "pod", "p", "--type=json", "-p",
                     '[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"x"}}]')
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'The Pod "p" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is '
        "allowed, but found new scheduling gate 'x'")
