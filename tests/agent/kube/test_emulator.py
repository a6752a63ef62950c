"""The Kubernetes API emulator, exercised only through the official client over HTTP."""

from __future__ import annotations

import json
import queue
import threading

import pytest
import urllib3
from fluxnode.agent.kube import raw as kube_raw
from kubernetes import client, watch
from kubernetes.client import BatchV1Api, CoordinationV1Api, EventsV1Api

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for

POD = {
    "metadata": {"name": "p1", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}


def message(exc: pytest.ExceptionInfo) -> str:
    return json.loads(exc.value.body)["message"]


def pod(name: str, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


class Stream:
    """A client Watch consumed on a thread, so tests can wait for events without sleeping."""

    def __init__(self, func, **kwargs):
        self.watch = watch.Watch()
        self.events: queue.Queue = queue.Queue()
        self.error: Exception | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(func,), kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, func, **kwargs) -> None:
        try:
            for event in self.watch.stream(func, **kwargs):
                self.events.put((event["type"], event["raw_object"]))
        except Exception as exc:  # reported to the test
            self.error = exc
        finally:
            self.done.set()

    def next(self, timeout: float = 5.0) -> tuple[str, dict]:
        return self.events.get(timeout=timeout)

    def names(self, n: int) -> list[tuple[str, str]]:
        return [(t, o["metadata"]["name"]) for t, o in (self.next() for _ in range(n))]

    def stop(self) -> None:
        self.watch.stop()


def test_crud_and_errors(kube, core):
    created = core.create_namespaced_pod("default", POD)
    assert created.status.phase == "Pending" and created.spec.scheduler_name == "default-scheduler"
    assert created.metadata.uid and int(created.metadata.resource_version) > 0
    assert core.read_namespaced_pod("p1", "default").metadata.labels == {"app": "web"}
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod("default", POD)
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as exc:
        core.read_namespaced_pod("nope", "default")
    assert exc.value.status == 404 and message(exc) == 'pods "nope" not found'
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod("missing-ns", POD)
    assert exc.value.status == 404 and message(exc) == 'namespaces "missing-ns" not found'
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod(
            "default", {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}
        )
    body = json.loads(exc.value.body)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers"}
    assert core.delete_namespaced_pod("p1", "default").metadata.name == "p1"
    assert kube.list("pods") == []


def test_resource_version_is_global_and_monotonic(kube, core):
    rvs = [
        int(core.create_namespace({"metadata": {"name": "ns1"}}).metadata.resource_version),
        int(
            core.create_namespaced_config_map(
                "ns1", {"metadata": {"name": "c"}, "data": {"a": "1"}}
            ).metadata.resource_version
        ),
        int(kube.add_node("n1")["metadata"]["resourceVersion"]),
        int(
            core.patch_namespaced_config_map(
                "c", "ns1", {"data": {"a": "2"}}
            ).metadata.resource_version
        ),
    ]
    assert rvs == sorted(rvs) and len(set(rvs)) == 4
    assert int(core.list_node().metadata.resource_version) == rvs[-1] == kube.resource_version


def test_label_selectors(kube, core):
    for name, labels in [("a", {"tier": "web", "zone": "x"}), ("b", {"tier": "db"}), ("c", {})]:
        core.create_namespaced_pod("default", pod(name, **labels))

    def names(sel: str) -> list[str]:
        return [
            p.metadata.name for p in core.list_namespaced_pod("default", label_selector=sel).items
        ]

    assert names("tier=web") == ["a"]
    assert names("tier==web") == ["a"]
    assert names("tier!=web") == ["b", "c"]
    assert names("tier in (web, db)") == ["a", "b"]
    assert names("tier notin (web)") == ["b", "c"]
    assert names("zone") == ["a"]
    assert names("!zone") == ["b", "c"]
    assert names("tier,!zone") == ["b"]
    with pytest.raises(client.ApiException) as exc:
        core.list_namespaced_pod("default", label_selector="tier in web")
    assert exc.value.status == 400


def test_field_selectors(kube, core):
    kube.add_node("n1")
    for name in ("a", "b", "c"):
        core.create_namespaced_pod("default", pod(name))
    kube.create(
        "pods", {**pod("d"), "spec": {**pod("d")["spec"], "schedulerName": "fluxnode"}}, "default"
    )
    core.create_namespaced_binding(
        "default",
        {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    kube.set_pod_phase("b", "Succeeded")

    def names(sel: str, ns: str | None = "default") -> list[str]:
        items = (
            core.list_namespaced_pod(ns, field_selector=sel).items
            if ns
            else core.list_pod_for_all_namespaces(field_selector=sel).items
        )
        return [p.metadata.name for p in items]

    assert names("spec.nodeName=") == ["b", "c", "d"]
    assert names("spec.nodeName=n1") == ["a"]
    assert names("spec.nodeName!=n1") == ["b", "c", "d"]
    assert names("status.phase=Succeeded") == ["b"]
    assert names("status.phase!=Succeeded,status.phase!=Failed,spec.nodeName=") == ["c", "d"]
    assert names("spec.schedulerName=fluxnode", None) == ["d"]
    assert names("metadata.name=c,metadata.namespace=default", None) == ["c"]
    with pytest.raises(client.ApiException) as exc:
        core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert exc.value.status == 400 and "field label not supported: spec.bogus" in exc.value.body


def test_watch_from_list_resource_version(kube, core):
    kube.add_node("n1")
    listed = core.list_node()
    stream = Stream(core.list_node, resource_version=listed.metadata.resource_version)
    kube.wait_for_watches("nodes")
    kube.add_node("n2")
    kube.set_node_ready("n1", False)
    core.delete_node("n2")
    (t1, o1), (t2, o2), (t3, o3) = stream.next(), stream.next(), stream.next()
    assert [
        (t1, o1["metadata"]["name"]),
        (t2, o2["metadata"]["name"]),
        (t3, o3["metadata"]["name"]),
    ] == [("ADDED", "n2"), ("MODIFIED", "n1"), ("DELETED", "n2")]
    assert [c["status"] for c in o2["status"]["conditions"] if c["type"] == "Ready"] == ["Unknown"]
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (o1, o2, o3)]
    assert rvs == sorted(rvs) and rvs[0] > int(listed.metadata.resource_version)
    stream.stop()


def test_watch_without_resource_version_sends_state_then_changes(kube, core):
    kube.add_node("n1")
    kube.add_node("n2")
    stream = Stream(core.list_node)
    assert stream.names(2) == [("ADDED", "n1"), ("ADDED", "n2")]
    kube.add_node("n3")
    assert stream.names(1) == [("ADDED", "n3")]
    stream.stop()


def test_a_watch_sees_writes_from_every_thread_once_in_resource_version_order(kube, core):
    """HTTP writes (pushed on the emulator's loop) and a test's direct writes (pushed from
    its own thread) interleave; the watch sends each change once, and a burst of them in
    resourceVersion order, as etcd's watch does."""
    rv = core.list_namespaced_pod("default").metadata.resource_version
    stream = Stream(core.list_namespaced_pod, namespace="default", resource_version=rv)
    kube.wait_for_watches("pods")
    n = 150

    def over_http() -> None:
        api = client.CoreV1Api(core.api_client)
        for i in range(n):
            api.create_namespaced_pod("default", pod(f"http-{i}"))

    writer = threading.Thread(target=over_http)
    writer.start()
    for i in range(n):
        kube.create("pods", pod(f"direct-{i}"), "default")
    writer.join()
    kube.create("pods", pod("last"), "default")
    seen = [stream.next() for _ in range(2 * n + 1)]
    assert seen.pop()[1]["metadata"]["name"] == "last"  # nothing twice before it
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in seen]
    assert rvs == sorted(rvs) and len(set(rvs)) == 2 * n
    assert {t for t, _ in seen} == {"ADDED"}
    assert sorted(o["metadata"]["name"] for _, o in seen) == sorted(
        [f"http-{i}" for i in range(n)] + [f"direct-{i}" for i in range(n)]
    )
    stream.stop()


def test_watch_selector_transitions(kube, core):
    core.create_namespaced_pod("default", pod("a"))
    core.create_namespaced_pod("default", pod("b"))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    stream = Stream(
        core.list_pod_for_all_namespaces, field_selector="spec.nodeName=", resource_version=rv
    )
    kube.wait_for_watches("pods")
    kube.add_node("n1")
    core.create_namespaced_pod_binding(
        "a",
        "default",
        {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    kube.patch("pods", "b", {"metadata": {"labels": {"x": "y"}}}, "default")
    assert stream.names(2) == [("DELETED", "a"), ("MODIFIED", "b")]
    stream.stop()


def test_expired_watch_resumes_or_reports_410(kube, core):
    kube.add_node("n1")
    rv = core.list_node().metadata.resource_version
    stream = Stream(core.list_node, resource_version=rv)
    kube.wait_for_watches("nodes")
    assert kube.expire_watches("nodes") == 1
    # The client resumes once from the last resourceVersion it saw; history still has it.
    wait_for(
        lambda: kube.count_requests("watch", "nodes") == 2 and kube.watch_count("nodes") == 1,
        what="resumed watch",
    )
    kube.add_node("n2")
    assert stream.names(1) == [("ADDED", "n2")]
    # Once history past what the client saw is compacted (writes elsewhere moved the revision
    # on), the resume fails too: the client raises 410 and an informer must re-list.
    kube.create("configmaps", {"metadata": {"name": "elsewhere"}}, "default")
    kube.compact()
    kube.expire_watches("nodes")
    assert stream.done.wait(5)
    assert isinstance(stream.error, client.ApiException) and stream.error.status == 410


def test_watch_from_compacted_resource_version_is_gone(kube, core):
    kube.add_node("n1")
    old = core.list_node().metadata.resource_version
    kube.add_node("n2")
    kube.compact()
    w = watch.Watch()
    with pytest.raises(client.ApiException) as exc:
        for _ in w.stream(core.list_node, resource_version=old, timeout_seconds=5):
            pass
    assert exc.value.status == 410 and "too old resource version" in str(exc.value)
    # A raw watch sees the ERROR event with a 410 Status, as from a real API server.
    resp = core.list_node(watch=True, resource_version=old, _preload_content=False)
    event = json.loads(resp.data.decode().splitlines()[0])
    assert (
        event["type"] == "ERROR"
        and event["object"]["code"] == 410
        and event["object"]["reason"] == "Expired"
    )


def test_bookmarks_and_timeout(kube, core):
    rv = core.list_node().metadata.resource_version
    stream = Stream(
        core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=30
    )
    kube.wait_for_watches("nodes")
    kube.add_node("n1")
    kube.send_bookmarks("nodes")
    assert stream.next()[0] == "ADDED"
    kind, obj = stream.next()
    assert kind == "BOOKMARK" and obj["metadata"]["resourceVersion"] == str(kube.resource_version)
    stream.stop()
    w = watch.Watch()
    assert (
        list(
            w.stream(core.list_node, resource_version=str(kube.resource_version), timeout_seconds=1)
        )
        == []
    )


def test_forbidden_hook(kube, core):
    rule = kube.forbid("get", "secrets", namespace="fluxnode", name="curve")
    with pytest.raises(client.ApiException) as exc:
        core.read_namespaced_secret("curve", "fluxnode")
    assert exc.value.status == 403
    assert message(exc).startswith('secrets "curve" is forbidden: User')
    with pytest.raises(client.ApiException) as exc:  # other names are not forbidden: a plain 404
        core.read_namespaced_secret("other", "fluxnode")
    assert exc.value.status == 404
    kube.forbid("create", "pods/binding")
    core.create_namespaced_pod("default", POD)
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod_binding(
            "p1", "default", {"metadata": {"name": "p1"}, "target": {"name": "n"}}
        )
    assert exc.value.status == 403
    kube.allow(rule)
    with pytest.raises(client.ApiException) as exc:
        core.read_namespaced_secret("curve", "fluxnode")
    assert exc.value.status == 404


def test_unauthenticated_is_401(kube):
    pool = urllib3.PoolManager(ca_certs=str(kube.ca_path))
    resp = pool.request("GET", f"{kube.url}/api/v1/nodes")
    assert resp.status == 401
    # with the token, over the same verified TLS: what made the 401 was the missing token
    token = {"Authorization": f"Bearer {kube.token}"}
    assert pool.request("GET", f"{kube.url}/api/v1/nodes", headers=token).status == 200


def test_serves_https_only_with_its_own_ca(kube):
    """A real API server serves HTTPS: a client that does not trust the emulator's CA is
    refused at the handshake, and plain HTTP gets no API answer."""
    assert kube.url.startswith("https://127.0.0.1:")
    with pytest.raises(urllib3.exceptions.SSLError):
        urllib3.PoolManager(retries=False).request("GET", f"{kube.url}/version")
    plain = urllib3.PoolManager(retries=False)
    try:
        resp = plain.request("GET", f"http://127.0.0.1:{kube.port}/version")
    except urllib3.exceptions.HTTPError:
        return  # the TLS server dropped the plain request
    assert resp.status == 400 and b"gitVersion" not in resp.data


def test_binding_once(kube, core):
    kube.add_node("n1")
    core.create_namespaced_pod("default", POD)
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1", "annotations": {"fluxnode.io/alloc": "7"}},
        "target": {"kind": "Node", "name": "n1"},
    }
    # The real server answers a Status, which the client cannot load as V1Binding; read it raw.
    resp = core.create_namespaced_pod_binding("p1", "default", body, _preload_content=False)
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    bound = core.read_namespaced_pod("p1", "default")
    assert bound.spec.node_name == "n1"
    assert bound.metadata.annotations == {
        "fluxnode.io/alloc": "7"
    }  # copied from the Binding, as the API server does
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_binding("default", body, _preload_content=False)
    assert exc.value.status == 409 and 'already assigned to node "n1"' in message(exc)
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod_binding(
            "nope", "default", {**body, "metadata": {"name": "nope"}}, _preload_content=False
        )
    assert exc.value.status == 404


def test_a_binding_leaves_the_versions_before_it_as_they_were(kube, core):
    """A write copies only what it changes (the pod's metadata, spec and status) and
    shares the rest with the version before: a watch replayed from before the binding
    must still see the created pod unbound, without the binding's annotation, and the
    bound pod keeps the annotations it had. A write that changed a shared part in place
    fails here."""
    kube.add_node("n1")
    before = core.list_namespaced_pod("default").metadata.resource_version
    created = core.create_namespaced_pod(
        "default", {**POD, "metadata": {**POD["metadata"], "annotations": {"a": "1"}}})
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "p1", "annotations": {"b": "2"}},
            "target": {"kind": "Node", "name": "n1"}}
    core.create_namespaced_pod_binding("p1", "default", body, _preload_content=False)
    stream = Stream(core.list_namespaced_pod, namespace="default", resource_version=before)
    (t1, o1), (t2, o2) = stream.next(), stream.next()
    stream.stop()
    assert (t1, t2) == ("ADDED", "MODIFIED")
    assert "nodeName" not in o1["spec"] and o1["metadata"]["annotations"] == {"a": "1"}
    assert "conditions" not in o1["status"]
    assert o1["metadata"]["resourceVersion"] == created.metadata.resource_version
    assert o2["spec"]["nodeName"] == "n1"
    assert o2["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert [c["type"] for c in o2["status"]["conditions"]] == ["PodScheduled"]
    assert o2["spec"]["containers"] == o1["spec"]["containers"]


def test_patch_flavours_and_status_subresource(kube, core):
    kube.add_node("n1")
    # strategic merge (the client's default for dict bodies) merges conditions by type
    core.patch_node_status(
        "n1", {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}}
    )
    types = sorted(c.type for c in core.read_node("n1").status.conditions)
    assert types == ["MemoryPressure", "Ready"]
    # merge patch replaces lists
    core.patch_node(
        "n1",
        {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}},
        _content_type="application/merge-patch+json",
    )
    assert [t.key for t in core.read_node("n1").spec.taints] == ["a"]
    # json patch (list body)
    core.patch_node("n1", [{"op": "add", "path": "/metadata/labels/extra", "value": "1"}])
    assert core.read_node("n1").metadata.labels["extra"] == "1"
    # status written through the main resource is ignored; through /status it sticks
    core.create_namespaced_pod("default", POD)
    core.patch_namespaced_pod("p1", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p1", "default").status.phase == "Pending"
    core.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p1", "default").status.phase == "Running"


def test_optimistic_concurrency(kube, core):
    cm = core.create_namespaced_config_map(
        "fluxnode", {"metadata": {"name": "ranks"}, "data": {"n1": "0"}}
    )
    cm.data["n2"] = "1"
    core.replace_namespaced_config_map("ranks", "fluxnode", cm)
    cm.data["n3"] = "2"  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as exc:
        core.replace_namespaced_config_map("ranks", "fluxnode", cm)
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "Conflict"
    with pytest.raises(client.ApiException) as exc:
        core.patch_namespaced_config_map(
            "ranks",
            "fluxnode",
            {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"x": "1"}},
        )
    assert exc.value.status == 409


def test_pagination(kube, core):
    for i in range(5):
        kube.add_node(f"n{i}")
    first = core.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == [
        "n0",
        "n1",
    ] and first.metadata.remaining_item_count == 3
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["n2", "n3"]
    kube.add_node("n9")
    kube.compact()
    with pytest.raises(client.ApiException) as exc:
        core.list_node(limit=2, _continue=second.metadata._continue)
    assert exc.value.status == 410


def test_other_resources(kube, core):
    api_client = core.api_client
    lease = CoordinationV1Api(api_client).create_namespaced_lease(
        "fluxnode",
        {
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 15},
        },
    )
    assert lease.spec.holder_identity == "n1"
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
            "reason": "Scheduled",
            "message": "bound",
            "type": "Normal",
        },
    )
    assert [
        e.reason
        for e in core.list_namespaced_event(
            "default", field_selector="involvedObject.name=p1"
        ).items
    ] == ["Scheduled"]
    EventsV1Api(api_client).create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "fluxnode",
            "reportingInstance": "x",
            "action": "Binding",
            "reason": "Scheduled",
            "type": "Normal",
        },
    )
    # one stored Event, two APIs: each lists both, in its own shape (raw JSON: the core/v1
    # Event has no eventTime, which the Python client's events.k8s.io model refuses, as it
    # does against a real server)
    both = kube_raw.call(EventsV1Api(api_client).list_namespaced_event, "default")["items"]
    assert [(e["metadata"]["name"], e["reason"], (e.get("regarding") or {}).get("name"),
             e.get("note")) for e in both] == [("e1", "Scheduled", "p1", "bound"),
                                               ("e2", "Scheduled", None, None)]
    assert both[0]["eventTime"] is None  # e1 has none: null, as a zero MicroTime
    listed = core.list_namespaced_event("default").items
    assert [(e.metadata.name, e.involved_object.name) for e in listed] == [("e1", "p1"),
                                                                           ("e2", None)]
    job = BatchV1Api(api_client).create_namespaced_job(
        "default",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "c", "image": "busybox"}],
                        "restartPolicy": "Never",
                    }
                }
            },
        },
    )
    assert job.metadata.generation == 1
    secret = core.create_namespaced_secret(
        "fluxnode", {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert secret.data == {"k": "dg=="} and secret.type == "Opaque"


def test_finalizers_defer_deletion(kube, core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "c", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("c", "default")
    assert core.read_namespaced_config_map("c", "default").metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("c", "default", {"metadata": {"finalizers": None}})
    assert kube.list("configmaps", "default") == []


def test_direct_state_and_restart(tmp_path):
    emulator = KubeEmulator(directory=tmp_path / "k")
    emulator.start()
    try:
        emulator.add_node("n1", control_plane=True)
        assert (
            emulator.list("nodes", label_selector="node-role.kubernetes.io/control-plane")[0][
                "metadata"
            ]["name"]
            == "n1"
        )
        api = client.CoreV1Api(emulator.api_client())
        assert [n.metadata.name for n in api.list_node().items] == ["n1"]
    finally:
        emulator.stop()
    assert not emulator._thread.is_alive()


def test_delete_collection_and_namespace_cascade(kube, core):
    core.create_namespace({"metadata": {"name": "team"}})
    for name, tier in [("a", "web"), ("b", "web"), ("c", "db")]:
        core.create_namespaced_pod("team", pod(name, tier=tier))
    core.create_namespaced_config_map("team", {"metadata": {"name": "cfg"}})
    core.delete_collection_namespaced_pod("team", label_selector="tier=web")
    assert [p["metadata"]["name"] for p in kube.list("pods", "team")] == ["c"]
    rv = core.list_namespaced_pod("team").metadata.resource_version
    stream = Stream(core.list_namespaced_pod, namespace="team", resource_version=rv)
    kube.wait_for_watches("pods")
    kube.namespace_termination_delay = 0.5
    core.delete_namespace("team")
    # Terminating first (the namespace lifecycle): nothing new may be created in it
    assert core.read_namespace("team").status.phase == "Terminating"
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_config_map("team", {"metadata": {"name": "late"}})
    assert exc.value.status == 403 and "being terminated" in exc.value.body
    # then the namespace controller deletes what is in it, and the namespace
    assert stream.names(1) == [("DELETED", "c")]
    wait_for(lambda: kube.list("namespaces", field_selector="metadata.name=team") == [], 10,
             what="the namespace gone")
    assert kube.list("configmaps", "team") == [] and kube.list("pods", "team") == []
    with pytest.raises(client.ApiException) as exc:
        core.read_namespace("team")
    assert exc.value.status == 404
    stream.stop()
