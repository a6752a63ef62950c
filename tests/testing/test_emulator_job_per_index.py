"""The emulated Job controller's backoffLimitPerIndex: each index of an Indexed Job retried
up to its own limit, then failed (status.failedIndexes), FailIndex, maxFailedIndexes.

Oracles from outside the emulator, written out here as literals: kube-controller-manager's
pkg/controller/job (indexed_job_utils.go: isIndexFailed, the
batch.kubernetes.io/job-index-failure-count and job-index-ignored-failure-count
annotations a replacement carries, orderedIntervals.String; job_controller.go: the
FailedIndexes and MaxFailedIndexesExceeded conditions and messages; backoff_utils.go
getRemainingTimePerIndex), pkg/apis/batch/v1/defaults.go (backoffLimit MaxInt32 with
backoffLimitPerIndex) and pkg/apis/batch/validation/validation.go. The test plays the
kubelet: it writes each pod's phase and exit code."""

from __future__ import annotations

import datetime
import json
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.job_emulator import job_emulator, job_pods, job_status

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_job_controller import _intervals
from fluxnode.testing.waiting import wait_for

INDEX = "batch.kubernetes.io/job-completion-index"
FAILURES = "batch.kubernetes.io/job-index-failure-count"
IGNORED = "batch.kubernetes.io/job-index-ignored-failure-count"


@pytest.fixture
def kube(tmp_path):
    # a 1 s first delay per index: the test sees an index's replacement wait for it
    with job_emulator(tmp_path, job_backoff=1.0, job_max_backoff=2.0) as emulator:
        yield emulator


@pytest.fixture
def batch(kube):
    return client.BatchV1Api(kube.api_client())


def _job(name: str, completions: int, **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "main",
                                                           "image": "busybox"}],
                                           "restartPolicy": "Never"}},
                     "completionMode": "Indexed", "completions": completions,
                     "parallelism": completions, **spec}}


def _active(kube: KubeEmulator, job: str, index: int | None = None) -> list[dict]:
    return [p for p in job_pods(kube, job) if p["status"]["phase"] not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
            and (index is None or p["metadata"]["annotations"][INDEX] == str(index))]


def _conditions(kube: KubeEmulator, job: str) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in job_status(kube, job).get("conditions", [])}


def _stamp(at: float) -> str:
    return datetime.datetime.fromtimestamp(int(at), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC).timestamp()


def _end(kube: KubeEmulator, pod: dict, code: int, conditions: list | None = None) -> float:
    """The kubelet reports the pod's container exited `code` now; returns its finishedAt."""
    finished = float(int(time.time()))
    status: dict = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [{
        "name": "main", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
        "state": {"terminated": {"exitCode": code, "finishedAt": _stamp(finished)}}}]}
    if conditions:
        status["conditions"] = conditions
    kube.patch("pods", pod["metadata"]["name"], {"status": status}, "default", "merge")
    return finished


def test_failed_and_completed_indexes_are_written_as_the_controller_does():
    # orderedIntervals.String: a run of two as two numbers, of three or more as a range
    assert _intervals({0, 1}) == "0,1"
    assert _intervals({0, 1, 2, 5}) == "0-2,5"
    assert _intervals({0, 1, 3, 4, 5, 9}) == "0,1,3-5,9"
    assert _intervals(set()) == ""


def test_an_index_is_retried_up_to_its_limit_then_failed(kube, batch):
    made = batch.create_namespaced_job("default", _job("pi", 3, backoffLimitPerIndex=1))
    assert made.spec.backoff_limit == 2147483647  # defaults.go: MaxInt32 with a per-index
    wait_for(lambda: len(_active(kube, "pi")) == 3, 10, what="three pods")
    for pod in _active(kube, "pi"):
        assert pod["metadata"]["annotations"][FAILURES] == "0"
    (first,) = _active(kube, "pi", 1)
    finished = _end(kube, first, 1)
    wait_for(lambda: _active(kube, "pi", 1), 10, what="index 1 made again")
    (again,) = _active(kube, "pi", 1)
    # one failure of the index before it, and not before the index's 1 s backoff
    assert again["metadata"]["annotations"][FAILURES] == "1"
    assert _seconds(again["metadata"]["creationTimestamp"]) >= finished + 1
    assert job_status(kube, "pi").get("failedIndexes") == ""
    _end(kube, again, 1)  # its second failure: past backoffLimitPerIndex 1
    wait_for(lambda: job_status(kube, "pi").get("failedIndexes") == "1", 10,
             what="failedIndexes 1")
    assert _active(kube, "pi", 1) == [] and "Failed" not in _conditions(kube, "pi")
    for index in (0, 2):  # the other indexes go on, and succeed
        _end(kube, _active(kube, "pi", index)[0], 0)
    wait_for(lambda: "Failed" in _conditions(kube, "pi"), 10, what="Failed")
    assert _conditions(kube, "pi") == {
        "FailureTarget": ("True", "FailedIndexes", "Job has failed indexes"),
        "Failed": ("True", "FailedIndexes", "Job has failed indexes")}
    status = job_status(kube, "pi")
    assert (status["completedIndexes"], status["failedIndexes"], status["failed"],
            status["succeeded"]) == ("0,2", "1", 2, 2)
    assert _active(kube, "pi", 1) == []


def test_failindex_fails_its_index_at_once_and_max_failed_indexes_the_job(kube, batch):
    """FailIndex (exit code 42) fails index 0 with retries left; index 2's ignored
    disruption is retried, its replacement carrying the ignored count; a second failed
    index is more than maxFailedIndexes 1: the Job fails, its other pods deleted."""
    batch.create_namespaced_job("default", _job(
        "fi", 3, backoffLimitPerIndex=3, maxFailedIndexes=1, podFailurePolicy={"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}))
    wait_for(lambda: len(_active(kube, "fi")) == 3, 10, what="three pods")
    _end(kube, _active(kube, "fi", 0)[0], 42)
    wait_for(lambda: job_status(kube, "fi").get("failedIndexes") == "0", 10,
             what="failedIndexes 0")
    assert _active(kube, "fi", 0) == [] and "Failed" not in _conditions(kube, "fi")
    (two,) = _active(kube, "fi", 2)
    _end(kube, two, 137, [{"type": "DisruptionTarget", "status": "True"}])
    wait_for(lambda: _active(kube, "fi", 2), 10, what="index 2 made again")
    annotations = _active(kube, "fi", 2)[0]["metadata"]["annotations"]
    assert (annotations[FAILURES], annotations[IGNORED]) == ("0", "1")
    assert job_status(kube, "fi")["failed"] == 1  # the ignored failure is not counted
    _end(kube, _active(kube, "fi", 1)[0], 42)
    wait_for(lambda: "Failed" in _conditions(kube, "fi"), 10, what="Failed")
    message = "Job has exceeded the specified maximal number of failed indexes"
    assert _conditions(kube, "fi")["Failed"] == ("True", "MaxFailedIndexesExceeded", message)
    assert job_status(kube, "fi")["failedIndexes"] == "0,1" and _active(kube, "fi") == []


def _refused(batch, job: dict) -> str:
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job("default", job)
    assert caught.value.status == 422
    return json.loads(caught.value.body)["message"]


def test_the_api_refuses_per_index_limits_where_they_cannot_apply(batch):
    job = _job("v", 2, backoffLimitPerIndex=1)
    job["spec"]["completionMode"] = "NonIndexed"
    assert _refused(batch, job) == ('Job.batch "v" is invalid: spec.backoffLimitPerIndex: '
                                    "Invalid value: 1: requires indexed completion mode")
    assert _refused(batch, _job("v", 2, maxFailedIndexes=1)) == (
        'Job.batch "v" is invalid: spec.backoffLimitPerIndex: Required value: when '
        "maxFailedIndexes is specified")
    assert _refused(batch, _job("v", 2, backoffLimitPerIndex=1, maxFailedIndexes=3)) == (
        'Job.batch "v" is invalid: spec.maxFailedIndexes: Invalid value: 3: must be less '
        "than or equal to completions")
    assert _refused(batch, _job("v", 2, backoffLimitPerIndex=-1)) == (
        'Job.batch "v" is invalid: spec.backoffLimitPerIndex: Invalid value: -1: must be '
        "greater than or equal to 0")
