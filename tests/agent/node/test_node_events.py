"""The agent's Events about its Node are ones a real API server accepts: events.k8s.io/v1 in
namespace ``default`` (a Node is cluster-scoped; pkg/apis/core/validation/events.go refuses
them elsewhere, and the emulator applies that rule), created with exactly the RBAC of
daemonset/rbac.yaml, and found as ``kubectl describe node`` finds them (fieldSelector
regarding.name=<node> in ``default``)."""

from __future__ import annotations

import pytest
from kubernetes.client import EventsV1Api
from support.kube_agents import AgentProcess, add_node
from support.paths import REPO

from fluxnode.testing.kube_emulator import RequestInfo
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for

RBAC = REPO / "daemonset" / "rbac.yaml"


@pytest.fixture
def rbac(kube):
    kube.authorizer = RbacAuthorizer.from_manifests([RBAC], "fluxnode", "fluxnode-agent")
    return kube.authorizer


def create_events(namespace: str) -> RequestInfo:
    return RequestInfo("create", "events.events.k8s.io", None, namespace, None,
                       "events.k8s.io", {})


def test_rbac_allows_node_events_in_default_only(rbac):
    assert rbac(create_events("default")) is None
    for namespace in ("fluxnode", "kube-system", "other"):
        assert rbac(create_events(namespace)) is not None, namespace
    assert rbac(RequestInfo("create", "events", None, "default", None, "", {})) is not None
    for verb in ("get", "list", "update", "patch", "delete"):
        assert rbac(RequestInfo(verb, "events.events.k8s.io", None, "default", "e", "events.k8s.io",
                                {})) is not None, verb


def test_node_events_land_in_default_with_the_manifest_rbac(kube, rbac, core, tmp_path):
    add_node(kube, "w1")
    add_node(kube, "w2")
    agent = AgentProcess(kube, "w1", tmp_path).start()
    try:
        agent.wait_broker()
        wait_for(
            lambda: any(e["reason"] == "BrokerStarted" for e in kube.list(
                "events.events.k8s.io", "default", field_selector="regarding.name=w1")),
            20,
            what="a BrokerStarted Event about w1 in default",
        )
        assert "cannot post Events" not in agent.log
    finally:
        agent.stop()
    denied = [r for r in kube.requests if rbac(r) is not None]
    assert denied == []
    # what `kubectl describe node w1` asks for, through the official client (as the test
    # itself: the agent's RBAC does not let it read Events back)
    kube.authorizer = None
    events = EventsV1Api(core.api_client)
    (event,) = [
        e for e in events.list_namespaced_event("default", field_selector="regarding.name=w1").items
        if e.reason == "BrokerStarted"
    ]
    assert event.regarding.kind == "Node" and event.regarding.name == "w1"
    assert event.regarding.namespace in (None, "")
    assert event.type == "Normal" and event.reporting_controller == "fluxnode.io/agent"
    assert event.reporting_instance and event.action and event.event_time
    assert events.list_namespaced_event("default", field_selector="regarding.name=w2").items == []
    assert events.list_namespaced_event("fluxnode").items == []
