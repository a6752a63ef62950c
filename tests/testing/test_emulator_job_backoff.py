"""The emulated Job controller's pod failure backoff: a failed pod is replaced only once the
delay after the Job's last failure has passed.

Oracle from outside the emulator: kube-controller-manager's pkg/controller/job
(backoff_utils.go: newBackoffRecord counts the failures since the last success and keeps
the last one's finish time, getFinishedTime takes it from the containers' finishedAt,
getRemainingTimeForFailuresCount doubles DefaultJobPodFailureBackOff = 10 s per further
failure up to MaxJobPodFailureBackOff = 360 s; job_controller.go manageJob creates nothing
while that time remains and re-queues the Job with enqueueControllerDelayed), written out
here as literals. The test plays the kubelet: it reports each failure with the container's
exit code and finishedAt, in whole seconds as the API writes times."""

from __future__ import annotations

import datetime
import time

import pytest
from kubernetes import client
from support.job_emulator import job_emulator, job_pods

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_job_controller import Backoff
from fluxnode.testing.waiting import wait_for


def _stamp(at: float) -> str:
    return datetime.datetime.fromtimestamp(int(at), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC).timestamp()


def _pod(uid: str, phase: str, finished: float) -> dict:
    return {"metadata": {"uid": uid, "creationTimestamp": _stamp(finished - 60)},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "state": {
                "terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                               "finishedAt": _stamp(finished)}}}]}}


def test_the_delay_is_10_s_doubled_per_failure_up_to_6_minutes():
    # getRemainingTimeForFailuresCount with the controller's defaults, counted from the
    # last failure's finishedAt
    now = 1_000_000.0
    record = Backoff()
    delays = []
    for i in range(8):
        record = record.after([], [_pod(f"f{j}", "Failed", now) for j in range(i + 1)])
        delays.append(record.remaining(10, 360, now=now))
    assert delays == [10, 20, 40, 80, 160, 320, 360, 360]
    assert record.remaining(10, 360, now=now + 100) == 260  # from the last failure
    assert record.remaining(10, 360, now=now + 361) == 0
    assert Backoff().remaining(10, 360, now=now) == 0  # no failure: no delay


def test_a_success_resets_the_count_to_the_failures_after_it():
    # newBackoffRecord: a new success keeps only the new failures that finished after it
    now = 1_000_000.0
    record = Backoff().after([], [_pod("a", "Failed", now), _pod("b", "Failed", now + 1)])
    assert (record.failures, record.last_failure) == (2, now + 1)
    record = record.after([_pod("ok", "Succeeded", now + 5)],
                          [_pod("a", "Failed", now), _pod("b", "Failed", now + 1),
                           _pod("c", "Failed", now + 3), _pod("d", "Failed", now + 7)])
    assert (record.failures, record.last_failure) == (1, now + 7)
    # the pods counted are not counted again
    assert record.after([], [_pod("d", "Failed", now + 7)]).failures == 1
    assert record.after([_pod("ok2", "Succeeded", now + 8)], []).failures == 0


def _job(name: str, **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                           "restartPolicy": "Never"}}, **spec}}


def _active(kube: KubeEmulator, job: str) -> list[dict]:
    return [p for p in job_pods(kube, job) if p["status"]["phase"] not in ("Succeeded", "Failed")]


def _fail(kube: KubeEmulator, name: str) -> float:
    """The kubelet reports the pod's container exited 1 now: returns its finishedAt (whole
    seconds)."""
    finished = float(int(time.time()))
    kube.patch("pods", name, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "c", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
        "state": {"terminated": {"exitCode": 1, "reason": "Error",
                                 "finishedAt": _stamp(finished)}}}]}}, "default", "merge")
    return finished


@pytest.fixture
def kube(tmp_path):
    # a 1 s first delay capped at 2 s, so the test sees the doubling and the cap in seconds
    with job_emulator(tmp_path, job_backoff=1.0, job_max_backoff=2.0) as emulator:
        yield emulator


def test_each_replacement_waits_for_the_backoff_doubled_then_capped(kube):
    client.BatchV1Api(kube.api_client()).create_namespaced_job(
        "default", _job("b", backoffLimit=5))
    seen: set[str] = set()
    for delay in (1, 2, 2):  # 1 s, doubled, capped at 2 s
        wait_for(lambda: len(_active(kube, "b")) == 1, 20, what="a pod to fail")
        (pod,) = _active(kube, "b")
        seen.add(pod["metadata"]["uid"])
        finished = _fail(kube, pod["metadata"]["name"])
        # no other change comes: the Job's delayed sync (AddAfter) makes the replacement
        wait_for(lambda: [p for p in _active(kube, "b") if p["metadata"]["uid"] not in seen],
                 20, what=f"the replacement after {delay} s")
        (new,) = _active(kube, "b")
        # not before the delay has passed since the failure (creationTimestamp is whole
        # seconds, and so is finishedAt)
        assert _seconds(new["metadata"]["creationTimestamp"]) >= finished + delay
    assert kube.get("jobs.batch", "b", "default")["status"]["failed"] == 3


def test_the_default_backoff_is_the_controllers_10_s(tmp_path):
    # the real first delay: syncs after the failure (one counts it, one counts the other pod
    # Ready) make no replacement
    with KubeEmulator(directory=tmp_path / "kube", job_controller=True) as kube:
        controller = kube.job_controller
        assert controller is not None
        assert (controller.backoff, controller.max_backoff) == (10.0, 360.0)
        client.BatchV1Api(kube.api_client()).create_namespaced_job(
            "default", _job("d", parallelism=2, completions=2))
        wait_for(lambda: len(_active(kube, "d")) == 2, 10, what="two pods")
        failing, other = (p["metadata"]["name"] for p in _active(kube, "d"))
        finished = _fail(kube, failing)
        wait_for(lambda: kube.get("jobs.batch", "d", "default")["status"].get("failed") == 1,
                 10, what="the failure counted")
        kube.patch("pods", other, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}}, "default", "merge")
        wait_for(lambda: kube.get("jobs.batch", "d", "default")["status"].get("ready") == 1,
                 10, what="a sync after the failure")
        assert [p["metadata"]["name"] for p in _active(kube, "d")] == [other]
        assert time.time() < finished + 10
        assert controller.errors == []
