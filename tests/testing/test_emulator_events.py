"""The emulator refuses Events as a real API server does (pkg/apis/core/validation/events.go,
ValidateEventCreate): one test per rule, each through the official client, each expecting
422 Invalid naming the field; plus the shapes a real server accepts."""

from __future__ import annotations

import json

import pytest
from fluxnode.agent.kube.raw import RawApi
from kubernetes.client import EventsV1Api
from kubernetes.client.exceptions import ApiException

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def events(core):
    return EventsV1Api(core.api_client)


@pytest.fixture
def raw_post(core):
    """POST a body as is, for shapes the generated client refuses before sending (it
    requires eventTime and series.lastObservedTime itself)."""
    raw = RawApi(core.api_client)
    return lambda ns, body: raw.request(
        "POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body
    )


def node_event(**changes) -> dict:
    """A valid events.k8s.io/v1 Event about a Node, as the kubelet posts it."""
    body = {
        "metadata": {"name": "w1.1"},
        "eventTime": NOW,
        "reportingController": "fluxnode.io/agent",
        "reportingInstance": "fluxnode-agent-w1",
        "action": "Broker",
        "reason": "BrokerStarted",
        "note": "broker started",
        "type": "Normal",
        "regarding": {"kind": "Node", "apiVersion": "v1", "name": "w1", "uid": "w1"},
    }
    for key, value in changes.items():
        if value is None:
            body.pop(key)
        else:
            body[key] = value
    return body


def refused(call, *args) -> dict:
    with pytest.raises(ApiException) as err:
        call(*args)
    assert err.value.status == 422, err.value.body
    status = json.loads(err.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    return status


def fields(status: dict) -> dict[str, str]:
    return {c["field"]: c["message"] for c in status["details"]["causes"]}


def test_a_node_event_in_default_is_accepted(events):
    events.create_namespaced_event("default", node_event())
    (e,) = events.list_namespaced_event("default", field_selector="regarding.name=w1").items
    assert e.reason == "BrokerStarted"


def test_a_node_event_outside_default_is_refused(events):
    status = refused(events.create_namespaced_event, "fluxnode", node_event())
    assert fields(status) == {
        "involvedObject.namespace": 'Invalid value: "": does not match event.namespace'
    }
    assert status["message"] == (
        'Event.events.k8s.io "w1.1" is invalid: involvedObject.namespace: Invalid value: "": '
        "does not match event.namespace"
    )


def test_a_node_event_in_kube_system_is_accepted(events):
    events.create_namespaced_event("kube-system", node_event())


def test_an_old_style_event_about_a_pod_must_be_in_its_namespace(core):
    body = {
        "metadata": {"name": "p1.1"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "reason": "Scheduled",
        "message": "bound",
        "type": "Normal",
    }
    status = refused(core.create_namespaced_event, "fluxnode", body)
    assert fields(status) == {
        "involvedObject.namespace": 'Invalid value: "default": does not match event.namespace'
    }
    core.create_namespaced_event("default", body)


def test_an_old_style_node_event_must_be_in_default(core):
    body = {
        "metadata": {"name": "w1.1"},
        "involvedObject": {"kind": "Node", "name": "w1"},
        "reason": "Started",
        "type": "Normal",
    }
    assert "involvedObject.namespace" in fields(
        refused(core.create_namespaced_event, "fluxnode", body)
    )
    core.create_namespaced_event("default", body)


@pytest.mark.parametrize("field", ["reportingController", "reportingInstance", "action", "reason"])
def test_required_fields(events, field):
    status = refused(events.create_namespaced_event, "default", node_event(**{field: None}))
    (cause,) = [c for c in status["details"]["causes"] if c["message"] == "Required value"]
    assert cause["field"] == field and cause["reason"] == "FieldValueRequired"


def test_core_v1_names_the_reporting_component(core):
    body = {
        "metadata": {"name": "p1.1"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "eventTime": NOW,
        "reportingInstance": "b-1",
        "action": "Binding",
        "reason": "Scheduled",
    }
    status = refused(core.create_namespaced_event, "default", body)
    assert {c["field"] for c in status["details"]["causes"]} == {"reportingComponent"}
    assert "reportingComponent: Required value" in status["message"]


@pytest.mark.parametrize("field", ["reportingInstance", "action", "reason"])
def test_at_most_128_characters(events, field):
    events.create_namespaced_event(
        "default", node_event(metadata={"name": "ok"}, **{field: "x" * 128})
    )
    status = refused(events.create_namespaced_event, "default", node_event(**{field: "x" * 129}))
    assert fields(status) == {field: 'Invalid value: "": can have at most 128 characters'}


def test_note_at_most_1_kib(events):
    events.create_namespaced_event("default", node_event(metadata={"name": "ok"}, note="n" * 1024))
    status = refused(events.create_namespaced_event, "default", node_event(note="n" * 1025))
    assert fields(status) == {"message": 'Invalid value: "": can have at most 1024 characters'}


def test_reporting_controller_is_a_qualified_name(events):
    status = refused(
        events.create_namespaced_event, "default", node_event(reportingController="a b/c")
    )
    assert set(fields(status)) == {"reportingController"}


def test_event_time_required_for_events_k8s_io(raw_post):
    status = refused(raw_post, "default", node_event(eventTime=None))
    assert fields(status) == {"eventTime": "Required value"}


def test_type_normal_or_warning(events):
    events.create_namespaced_event("default", node_event(metadata={"name": "w"}, type="Warning"))
    status = refused(events.create_namespaced_event, "default", node_event(type="Info"))
    assert fields(status) == {"type": 'Invalid value: "": has invalid value: Info'}


@pytest.mark.parametrize(
    "field,value,path",
    [
        ("deprecatedFirstTimestamp", "2026-01-01T00:00:00Z", "firstTimestamp"),
        ("deprecatedLastTimestamp", "2026-01-01T00:00:00Z", "lastTimestamp"),
        ("deprecatedCount", 3, "count"),
        ("deprecatedSource", {"component": "kubelet"}, "source"),
    ],
)
def test_deprecated_fields_unset_in_events_k8s_io(events, field, value, path):
    status = refused(events.create_namespaced_event, "default", node_event(**{field: value}))
    assert fields(status) == {path: 'Invalid value: "": needs to be unset'}


def test_series_needs_count_2_and_last_observed_time(raw_post):
    status = refused(raw_post, "default", node_event(series={"count": 1}))
    assert fields(status) == {
        "series.count": 'Invalid value: "": should be at least 2',
        "series.lastObservedTime": "Required value",
    }
    assert status["message"].startswith('Event.events.k8s.io "w1.1" is invalid: [series.count')


def test_core_v1_keeps_its_legacy_leniency(core):
    """The deprecated fields and a free type are fine through core/v1 (as the binder
    posts: eventTime plus firstTimestamp/count/source)."""
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "p1.2"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
            "eventTime": NOW,
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "count": 1,
            "source": {"component": "fluxnode"},
            "reportingComponent": "fluxnode",
            "reportingInstance": "b-1",
            "action": "Binding",
            "reason": "Scheduled",
            "type": "Custom",
        },
    )
