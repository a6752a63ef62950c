"""The one informer (agent/kube_informer.py) against the Kubernetes API emulator, through the
official client (the binder's) and through the node agent's own (agent_api.py, issue 32)."""

from __future__ import annotations

import threading

import pytest
from fluxnode.agent.kube.agent_api import AgentApi
from fluxnode.agent.kube.api_client import KubeAccessError
from fluxnode.agent.kube.backoff import Backoff
from fluxnode.agent.kube.informer import Informer
from fluxnode.agent.kube.kubeconfig import load_target
from fluxnode.agent.kube.rest import KubeRest

from fluxnode.testing.waiting import wait_for

FAST = Backoff(initial=0.01, maximum=0.1)


class Recorder:
    """Collects (kind, payload) events as the handler sees them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, obj: object) -> None:
        with self.lock:
            self.events.append((kind, obj))

    def kinds(self) -> list[tuple[str, object]]:
        """(kind, name) per event; a SYNC's names as a sorted list."""
        with self.lock:
            return [
                (
                    k,
                    sorted(o["metadata"]["name"] for o in obj)
                    if k == "SYNC"
                    else obj["metadata"]["name"],
                )
                for k, obj in self.events
            ]


@pytest.fixture(params=["official", "agent"])
def core(request, kube):
    """The list calls of the official CoreV1Api, or of the agent's AgentApi."""
    if request.param == "agent":
        yield AgentApi(KubeRest(load_target(str(kube.kubeconfig_path))))
        return
    from kubernetes import client

    api_client = kube.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()


@pytest.fixture
def informers():
    started: list[Informer] = []

    def start(*args, **kwargs) -> Informer:
        informer = Informer(*args, **kwargs).start()
        started.append(informer)
        return informer

    yield start
    for informer in started:
        informer.stop()


def test_lists_then_watches_and_delivers_events(kube, core, informers):
    kube.add_node("n1")
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    kube.add_node("n2")
    kube.set_node_ready("n1", False)
    kube.delete("nodes", "n2")
    wait_for(lambda: len(events.kinds()) == 4, 10, what="four events")
    assert events.kinds() == [
        ("SYNC", ["n1"]),
        ("ADDED", "n2"),
        ("MODIFIED", "n1"),
        ("DELETED", "n2"),
    ]
    assert list(nodes.snapshot()) == ["n1"]
    assert nodes.get("n1") == kube.get("nodes", "n1")
    assert nodes.get("n2") is None
    assert nodes.resource_version_number == kube.resource_version
    assert nodes.relists == 1 and nodes.alive


def test_namespaced_objects_are_keyed_namespace_slash_name(kube, core, informers):
    kube.create("configmaps", {"metadata": {"name": "ranks"}, "data": {"a": "1"}}, "fluxnode")
    kube.create("configmaps", {"metadata": {"name": "other"}}, "fluxnode")
    cms = informers("configmaps", core.list_namespaced_config_map, namespace="fluxnode",
                    field_selector="metadata.name=ranks")
    assert cms.synced.wait(10)
    assert list(cms.snapshot()) == ["fluxnode/ranks"]
    assert cms.get("fluxnode/ranks")["data"] == {"a": "1"}
    # the cache is a copy: editing what we got does not edit the informer's view
    cms.get("fluxnode/ranks")["data"]["a"] = "2"
    assert cms.get("fluxnode/ranks")["data"] == {"a": "1"}


def test_watch_timeout_resumes_from_the_last_resource_version_without_listing(
    kube, core, informers
):
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, watch_timeout=1, backoff=FAST)
    assert nodes.synced.wait(10)
    wait_for(
        lambda: kube.count_requests("watch", "nodes") >= 2,
        10,
        what="a second watch after the timeout",
    )
    kube.add_node("n1")
    wait_for(lambda: ("ADDED", "n1") in events.kinds(), 10, what="n1 added")
    assert nodes.relists == 1 and kube.count_requests("list", "nodes") == 1


def test_bookmarks_advance_the_resource_version_without_events(kube, core, informers):
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    kube.create("configmaps", {"metadata": {"name": "elsewhere"}}, "default")
    assert nodes.resource_version_number < kube.resource_version
    kube.send_bookmarks("nodes")
    wait_for(
        lambda: nodes.resource_version_number == kube.resource_version, 10, what="bookmark seen"
    )
    assert events.kinds() == [("SYNC", [])]


def test_a_bookmark_lets_the_resume_after_a_compaction_skip_the_list(kube, core, informers):
    """What the client's own SharedInformer lacks (it asks for no bookmarks, see
    docs/dependencies.md): the bookmark at a watch's timeout carries the version on past
    changes to other kinds, so a compaction meanwhile costs no list."""
    kube.add_node("n1")
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, watch_timeout=1, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    kube.create("configmaps", {"metadata": {"name": "elsewhere"}}, "default")
    kube.compact()  # the nodes' last version is now older than the history kept
    wait_for(
        lambda: kube.count_requests("watch", "nodes") >= 2 and kube.watch_count("nodes") == 1,
        10,
        what="the watch resumed after its timeout",
    )
    assert nodes.relists == 1 and kube.count_requests("list", "nodes") == 1
    assert nodes.resource_version_number == kube.resource_version
    kube.add_node("n2")
    wait_for(lambda: ("ADDED", "n2") in events.kinds(), 10, what="n2 added")
    assert events.kinds() == [("SYNC", ["n1"]), ("ADDED", "n2")]


def test_watch_expired_event_relists_with_a_sync(kube, core, informers):
    kube.add_node("n1")
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    kube.compact()
    kube.expire_watches("nodes")
    wait_for(lambda: nodes.relists == 2, 10, what="re-list after the 410 ERROR event")
    kube.add_node("n2")
    wait_for(lambda: ("ADDED", "n2") in events.kinds(), 10, what="n2 after the re-list")
    assert events.kinds() == [("SYNC", ["n1"]), ("SYNC", ["n1"]), ("ADDED", "n2")]
    assert sorted(nodes.snapshot()) == ["n1", "n2"]


def test_changes_missed_while_the_watch_was_down_are_repaired_by_the_relist(kube, core, informers):
    """Without a fatal handler a 403 is retried (the binder's way); the resume gets 410 and
    re-lists."""
    kube.add_node("n1")
    kube.add_node("n2")
    rule = kube.forbid("watch", "nodes")
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, backoff=FAST)
    assert nodes.synced.wait(10)
    wait_for(lambda: kube.count_requests("watch", "nodes") >= 2, 10, what="refused watches retried")
    kube.delete("nodes", "n1")
    kube.add_node("n3")
    kube.compact()
    kube.allow(rule)
    wait_for(lambda: nodes.relists == 2, 10, what="re-list after the resume was refused with 410")
    assert sorted(nodes.snapshot()) == ["n2", "n3"]
    assert events.kinds() == [("SYNC", ["n1", "n2"]), ("SYNC", ["n2", "n3"])]
    assert nodes.alive
    kube.delete("nodes", "n2")
    wait_for(
        lambda: sorted(nodes.snapshot()) == ["n3"], 10, what="watching again after the re-list"
    )


def test_forbidden_list_calls_the_fatal_handler_and_stops(kube, core, informers):
    kube.forbid("list", "nodes")
    fatal: list[KubeAccessError] = []
    nodes = informers("nodes", core.list_node, on_fatal=fatal.append, backoff=FAST)
    wait_for(lambda: fatal, 10, what="the fatal handler")
    assert len(fatal) == 1
    assert str(fatal[0]).startswith("cannot list/watch nodes: permission denied (403)")
    wait_for(lambda: not nodes.alive, 10, what="the informer to stop")
    assert not nodes.synced.is_set()
    assert kube.count_requests("list", "nodes") == 1


def test_forbidden_watch_is_fatal_too(kube, core, informers):
    kube.forbid("watch", "nodes")
    fatal: list[KubeAccessError] = []
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, on_fatal=fatal.append, backoff=FAST)
    wait_for(lambda: fatal, 10, what="the fatal handler")
    assert nodes.synced.is_set() and events.kinds() == [("SYNC", [])]
    wait_for(lambda: not nodes.alive, 10, what="the informer to stop")


def test_stop_ends_an_open_watch(kube, core, informers):
    nodes = informers("nodes", core.list_node, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    nodes.stop()
    assert not nodes.alive
    wait_for(lambda: kube.watch_count("nodes") == 0, 10, what="the watch to close")


def test_lists_in_pages_of_the_asked_size(kube, core, informers):
    for i in range(5):
        kube.add_node(f"n{i}")
    events = Recorder()
    nodes = informers("nodes", core.list_node, events, backoff=FAST, page=2)
    assert nodes.synced.wait(10)
    assert kube.count_requests("list", "nodes") == 3  # 2 + 2 + 1
    assert events.kinds() == [("SYNC", [f"n{i}" for i in range(5)])]


def test_a_shared_snapshot_holds_the_cached_objects_and_keeps_its_moment(kube, core, informers):
    """snapshot(copy_objects=False), the node agent's: no copies, and a change replaces the
    cached object rather than editing it, so an earlier snapshot still shows what it saw."""
    kube.add_node("n1")
    nodes = informers("nodes", core.list_node, backoff=FAST)
    assert nodes.synced.wait(10)
    kube.wait_for_watches("nodes")
    before = nodes.snapshot(copy_objects=False)
    assert before["n1"] is nodes.snapshot(copy_objects=False)["n1"]
    assert before["n1"] is not nodes.snapshot()["n1"]
    version = before["n1"]["metadata"]["resourceVersion"]
    kube.set_node_ready("n1", False)
    wait_for(lambda: nodes.get("n1")["metadata"]["resourceVersion"] != version, 10,
             what="the change")
    assert before["n1"]["metadata"]["resourceVersion"] == version
