"""PriorityClasses and the Priority admission plugin in the API emulator, through the
official client (kube_priority.py).

Oracles from the Kubernetes source, not the emulator: the system classes and their values
(pkg/apis/scheduling/types.go SystemPriorityClasses), ValidatePriorityClass's limits
(HighestUserDefinablePriority = 1000000000, the reserved ``system-`` prefix), and the
plugin's refusals (plugin/pkg/admission/priority/admission.go) as the server words them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.kubectl import kubectl, parse_table

from fluxnode.testing.kube_emulator import KubeEmulator


@pytest.fixture
def api():
    kube = KubeEmulator().start()
    try:
        yield kube.api_client()
    finally:
        kube.stop()


def klass(name: str, value: int, **more) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, **more}


def pod(name: str, class_name: str | None = None, priority: int | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}]}
    if class_name is not None:
        spec["priorityClassName"] = class_name
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def refusal(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as exc:
        call()
    return exc.value.status, json.loads(exc.value.body)["message"]


def test_the_system_classes_are_served(api):
    listed = client.SchedulingV1Api(api).list_priority_class().items
    assert {c.metadata.name: c.value for c in listed} == {
        "system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def test_a_pod_gets_its_class_value_or_the_global_default_or_zero(api):
    sched, core = client.SchedulingV1Api(api), client.CoreV1Api(api)
    assert core.create_namespaced_pod("default", pod("plain")).spec.priority == 0
    sched.create_priority_class(klass("high", 1000))
    made = core.create_namespaced_pod("default", pod("hi", "high"))
    assert (made.spec.priority, made.spec.preemption_policy) == (1000, "PreemptLowerPriority")
    sched.create_priority_class(klass("normal", 7, globalDefault=True, preemptionPolicy="Never"))
    made = core.create_namespaced_pod("default", pod("dflt"))
    assert (made.spec.priority_class_name, made.spec.priority, made.spec.preemption_policy) \
        == ("normal", 7, "Never")
    assert core.create_namespaced_pod("default", pod("sys", "system-node-critical")) \
        .spec.priority == 2000001000


def test_the_plugin_refuses_an_unknown_class_and_a_priority_that_differs(api):
    core = client.CoreV1Api(api)
    assert refusal(lambda: core.create_namespaced_pod("default", pod("p", "nope"))) == (
        403, 'pods "p" is forbidden: no PriorityClass with name nope was found')
    assert refusal(lambda: core.create_namespaced_pod("default", pod("q", priority=5))) == (
        403, 'pods "q" is forbidden: the integer value of priority (5) must not be provided '
        "in pod spec; priority admission controller computed 0 from the given PriorityClass "
        "name")


def test_class_validation(api):
    sched = client.SchedulingV1Api(api)
    code, message = refusal(lambda: sched.create_priority_class(klass("huge", 1000000001)))
    assert code == 422 and message == (
        'PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed '
        "value of a user defined priority is 1000000000")
    code, message = refusal(lambda: sched.create_priority_class(klass("system-mine", 5)))
    assert code == 422 and "reserved for system use only" in message
    sched.create_priority_class(klass("a", 1, globalDefault=True))
    assert refusal(lambda: sched.create_priority_class(klass("b", 2, globalDefault=True))) == (
        403, 'priorityclasses.scheduling.k8s.io "b" is forbidden: PriorityClass a is already '
        "marked as default. Only one default can exist")
    code, message = refusal(lambda: sched.patch_priority_class("a", {"value": 3}))
    assert code == 422 and "value: Forbidden: may not be changed in an update." in message


def test_kubectl_prints_classes_as_the_server_does():
    kube = KubeEmulator().start()
    try:
        client.SchedulingV1Api(kube.api_client()).create_priority_class(
            klass("high", 1000, globalDefault=True))
        [rows] = parse_table(kubectl(kube, "get", "priorityclasses").check().stdout)
        by_name = {r["NAME"]: r for r in rows}
        assert {n: (r["VALUE"], r["GLOBAL-DEFAULT"], r["PREEMPTIONPOLICY"])
                for n, r in by_name.items()} == {
            "high": ("1000", "true", "PreemptLowerPriority"),
            "system-cluster-critical": ("2000000000", "false", "PreemptLowerPriority"),
            "system-node-critical": ("2000001000", "false", "PreemptLowerPriority")}
    finally:
        kube.stop()
