"""The binder's Events from a bounded queue and a thread of their own (event_recorder.py),
against the API emulator through the binder's own writer (HttpWriter).

Oracles: the Events as the emulator stores them (their count, order and fields), and
client-go's recorder for the limits (k8s.io/client-go/tools/record: a queue of 1,000 that
drops the newest when full; a source's Events about one object 25 at once, then one per
300 s)."""

from __future__ import annotations

import pytest
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.cluster_state import PodInfo
from fluxnode.scheduler.binder.event_recorder import EventRecorder, SpamFilter
from fluxnode.scheduler.binder.http_writer import writer_for
from fluxnode.scheduler.binder.slot_assignment import PodSlot

from fluxnode.testing.waiting import wait_for


def pod(name: str) -> PodInfo:
    return PodInfo.from_pod({"metadata": {"name": name, "namespace": "default",
                                          "uid": f"uid-{name}"},
                             "spec": {"schedulerName": "fluxnode", "containers": []}})


def events(kube) -> list[dict]:
    return sorted(kube.list("events", "default"),
                  key=lambda e: int(e["metadata"]["resourceVersion"]))


@pytest.fixture
def api(kube):
    writer = writer_for(kube.api_client(), 2)
    yield writer
    writer.close()


def test_scheduled_events_are_posted_by_the_recorder_in_order(kube, api):
    recorder = EventRecorder(api).start()
    writer = PodWriter(api, "fluxnode", "binder-0", recorder)
    pods = [pod(f"p{i}") for i in range(150)]  # more than one batch
    writer.scheduled_many([(p, PodSlot(i % 3, f"node{i % 3}", "0-1", ""), 7)
                           for i, p in enumerate(pods)])
    assert recorder.flush(30)
    recorder.stop()
    stored = events(kube)
    assert [e["involvedObject"]["name"] for e in stored] == [p.name for p in pods]
    first = stored[0]
    assert (first["reason"], first["type"], first["action"]) == ("Scheduled", "Normal",
                                                                 "Binding")
    assert first["involvedObject"]["uid"] == "uid-p0"
    assert first["message"] == ("Successfully assigned default/p0 to node0 (allocation 7, "
                                "cores 0-1, gpus -)")
    assert recorder.dropped == recorder.filtered == 0


def test_a_full_queue_drops_the_newest_events_and_counts_them(kube, api):
    drops: list[int] = []
    recorder = EventRecorder(api, limit=3, on_drop=lambda: drops.append(1))
    writer = PodWriter(api, "fluxnode", "binder-0", recorder)
    for i in range(5):  # not started: nothing is sent, the queue fills
        writer.event(pod(f"q{i}"), "Warning", "FailedScheduling", "no room")
    recorder.start()
    assert recorder.flush(30)
    recorder.stop()
    assert [e["involvedObject"]["name"] for e in events(kube)] == ["q0", "q1", "q2"]
    assert recorder.dropped == 2 and len(drops) == 2


def test_events_about_one_object_pass_25_then_one_per_300_s(kube, api):
    now = [1000.0]
    recorder = EventRecorder(api, spam=SpamFilter(clock=lambda: now[0])).start()
    writer = PodWriter(api, "fluxnode", "binder-0", recorder)
    noisy, quiet = pod("noisy"), pod("quiet")
    for i in range(30):
        writer.event(noisy, "Warning", "FailedScheduling", f"attempt {i}")
    writer.event(quiet, "Warning", "FailedScheduling", "attempt 0")
    now[0] += 299.0  # not a whole token yet
    writer.event(noisy, "Warning", "FailedScheduling", "attempt 30")
    now[0] += 1.0  # one token
    writer.event(noisy, "Warning", "FailedScheduling", "attempt 31")
    writer.event(noisy, "Warning", "FailedScheduling", "attempt 32")
    assert recorder.flush(30)
    recorder.stop()
    stored = events(kube)
    assert [e["message"] for e in stored if e["involvedObject"]["name"] == "noisy"] == \
        [f"attempt {i}" for i in range(25)] + ["attempt 31"]
    assert [e["message"] for e in stored if e["involvedObject"]["name"] == "quiet"] == \
        ["attempt 0"]
    assert recorder.filtered == 30 + 3 - 26


def test_a_refused_event_is_logged_and_the_rest_are_posted(kube, api, caplog):
    recorder = EventRecorder(api).start()
    bad = PodInfo.from_pod({"metadata": {"name": "bad", "namespace": "nowhere", "uid": "u"},
                            "spec": {}})  # no such namespace: the Event is refused
    writer = PodWriter(api, "fluxnode", "binder-0", recorder)
    writer.event(bad, "Normal", "Scheduled", "one")
    writer.event(pod("good"), "Normal", "Scheduled", "two")
    assert recorder.flush(30)
    recorder.stop()
    assert [e["involvedObject"]["name"] for e in events(kube)] == ["good"]
    wait_for(lambda: any("cannot record Scheduled event for Pod nowhere/bad" in r.message
                         for r in caplog.records), 5, what="the refusal logged")
