"""The watch-list stream (KEP-3157) as a server with the WatchList feature serves it, and the
list options it refuses, as apimachinery's ValidateListOptions words them
(pkg/apis/meta/internalversion/validation/validation.go): kubectl 1.37 waits for a deletion
with such a watch (client-go's WatchListClient, on by default), so an emulator without it
left `kubectl delete` waiting until its timeout."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fluxnode.testing.kube_list_options import INITIAL_EVENTS_END


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": name}}


def events(core, count: int, **query) -> list[dict]:
    """The first `count` events of a ConfigMap watch in namespace default, as sent."""
    resp = core.list_namespaced_config_map("default", watch=True, _preload_content=False,
                                           timeout_seconds=5, **query)
    out: list[dict] = []
    try:
        for line in resp.stream(decode_content=True):
            for part in line.splitlines():
                if part.strip():
                    out.append(json.loads(part))
            if len(out) >= count:
                break
    finally:
        resp.release_conn()
    return out


def refusal(call) -> dict:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)


def test_a_watch_list_sends_the_state_then_the_end_bookmark_then_changes(kube, core):
    for name in ("a", "b"):
        core.create_namespaced_config_map("default", configmap(name))
    listed = core.list_namespaced_config_map("default")
    got = events(core, 3, send_initial_events=True, resource_version_match="NotOlderThan",
                 allow_watch_bookmarks=True)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in got[:2]] == [
        ("ADDED", "a"), ("ADDED", "b")]
    end = got[2]
    assert end["type"] == "BOOKMARK"
    meta = end["object"]["metadata"]
    assert meta["annotations"] == {INITIAL_EVENTS_END: "true"}
    assert meta["resourceVersion"] == listed.metadata.resource_version


def test_a_watch_list_without_initial_events_sends_only_changes(kube, core):
    core.create_namespaced_config_map("default", configmap("old"))
    kube.create("configmaps", configmap("new"), "default")  # before the watch: not sent
    resp = core.list_namespaced_config_map(
        "default", watch=True, _preload_content=False, timeout_seconds=3,
        send_initial_events=False, resource_version_match="NotOlderThan")
    try:
        kube.wait_for_watches("configmaps")
        kube.create("configmaps", configmap("later"), "default")
        first = json.loads(next(iter(resp.stream(decode_content=True))).splitlines()[0])
    finally:
        resp.release_conn()
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "later")


def test_list_options_refused_as_the_api_server_refuses_them(kube, core):
    body = refusal(lambda: core.list_namespaced_config_map(
        "default", watch=True, _preload_content=False, send_initial_events=True))
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    assert body["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "resourceVersionMatch",
        "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                   "NotOlderThan"}]
    body = refusal(lambda: core.list_namespaced_config_map(
        "default", watch=True, _preload_content=False, resource_version_match="NotOlderThan"))
    assert body["message"].endswith(
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
        "sendInitialEvents is provided")
    body = refusal(lambda: core.list_namespaced_config_map(
        "default", send_initial_events=True))
    assert body["message"].endswith(
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list")
    body = refusal(lambda: core.list_namespaced_config_map(
        "default", resource_version_match="NotOlderThan"))
    assert body["message"].endswith(
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
        "resourceVersion is provided")


def test_kubectl_delete_waits_for_the_pod_through_a_watch_list(kube):
    """kubectl 1.37's delete waits with the watch list (the end bookmark, then the
    DELETED event) and returns once the pod is gone."""
    from support.kubectl import kubectl
    kube.add_node("w1")
    kube.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {"nodeName": "w1",
                                  "containers": [{"name": "c", "image": "busybox"}]}},
                "default")
    done = kubectl(kube, "delete", "pod", "p", "--timeout=60s").check()
    assert done.stdout.startswith('pod "p" deleted')
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(kube.api_client()).read_namespaced_pod("p", "default")
    assert info.value.status == 404
