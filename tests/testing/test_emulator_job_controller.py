"""The emulated Job controller: pods from a Job's template, counted, suspended, finished.

Oracles from outside the emulator: what kube-controller-manager's Job controller and the
batch API are documented and coded to do (pkg/controller/job/job_controller.go,
pkg/apis/batch/v1/defaults.go, pkg/registry/batch/job/strategy.go: the labels and selector,
``JOB-INDEX-xxxxx`` names, the conditions and their reasons), written out here as literals;
the test plays the kubelet (it sets pod phases); kubectl prints the Jobs."""

from __future__ import annotations

import datetime
import json
import re

import pytest
from kubernetes import client
from support.job_emulator import job_emulator, job_pods, job_status
from support.kubectl import kubectl, parse_table
from support.webhook_server import WebhookServer

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for

UID_LABEL, NAME_LABEL = "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def kube(tmp_path):
    with job_emulator(tmp_path) as emulator:
        yield emulator


@pytest.fixture
def batch(kube):
    return client.BatchV1Api(kube.api_client())


def _job(name: str, **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "restartPolicy": "Never"}}, **spec}}


def _active(kube: KubeEmulator, job: str) -> list[dict]:
    return [p for p in job_pods(kube, job) if p["status"]["phase"] not in ("Succeeded", "Failed")]


def _conditions(kube: KubeEmulator, job: str) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in job_status(kube, job).get("conditions",
                                                                                    [])}


def test_pods_up_to_parallelism_with_the_controllers_labels_then_complete(kube, batch):
    made = batch.create_namespaced_job("default", _job("train", completions=3, parallelism=2))
    uid = made.metadata.uid
    # the API server's defaults and generated selector
    assert made.spec.selector.match_labels == {UID_LABEL: uid}
    assert made.spec.backoff_limit == 6 and made.spec.completion_mode == "NonIndexed"
    wait_for(lambda: len(_active(kube, "train")) == 2, 10, what="two pods")
    pods = job_pods(kube, "train")
    for pod in pods:
        assert re.fullmatch(r"train-[a-z0-9]{5}", pod["metadata"]["name"])
        assert pod["metadata"]["labels"] == {"app": "train", UID_LABEL: uid, NAME_LABEL: "train",
                                             "controller-uid": uid, "job-name": "train"}
        assert pod["metadata"]["ownerReferences"] == [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
            "controller": True, "blockOwnerDeletion": True}]
    wait_for(lambda: job_status(kube, "train").get("active") == 2, 10, what="active 2")
    assert job_status(kube, "train")["startTime"]
    kube.set_pod_phase(pods[0]["metadata"]["name"], "Succeeded")  # the kubelet's part
    wait_for(lambda: len(job_pods(kube, "train")) == 3, 10, what="a third pod")
    wait_for(lambda: (job_status(kube, "train").get("succeeded"), job_status(kube, "train").get(
        "active")) == (1, 2), 10, what="succeeded 1, active 2")
    for pod in _active(kube, "train"):
        kube.set_pod_phase(pod["metadata"]["name"], "Succeeded")
    wait_for(lambda: "Complete" in _conditions(kube, "train"), 10, what="Complete")
    assert _conditions(kube, "train") == {"SuccessCriteriaMet": ("True", "CompletionsReached"),
                                          "Complete": ("True", "CompletionsReached")}
    status = job_status(kube, "train")
    assert status["succeeded"] == 3 and "active" not in status and status["completionTime"]
    assert len(job_pods(kube, "train")) == 3  # no more pods after completion
    rows = parse_table(kubectl(kube, "get", "jobs").check().stdout)[0]
    assert [(r["NAME"], r["STATUS"], r["COMPLETIONS"]) for r in rows] == [
        ("train", "Complete", "3/3")]


def test_an_indexed_job_names_and_marks_each_pods_index(kube, batch):
    batch.create_namespaced_job("default", _job("idx", completions=3, parallelism=2,
                                                 completionMode="Indexed"))
    wait_for(lambda: len(_active(kube, "idx")) == 2, 10, what="two pods")
    by_index = {int(p["metadata"]["annotations"][INDEX]): p for p in job_pods(kube, "idx")}
    assert sorted(by_index) == [0, 1]  # the lowest indexes first
    for index, pod in by_index.items():
        assert re.fullmatch(rf"idx-{index}-[a-z0-9]{{5}}", pod["metadata"]["name"])
        assert pod["metadata"]["labels"][INDEX] == str(index)
        assert pod["spec"]["hostname"] == f"idx-{index}"
        assert pod["spec"]["containers"][0]["env"] == [{
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}}]
    kube.set_pod_phase(by_index[0]["metadata"]["name"], "Succeeded")
    wait_for(lambda: {int(p["metadata"]["annotations"][INDEX]) for p in _active(kube, "idx")}
             == {1, 2}, 10, what="index 2 started")
    wait_for(lambda: job_status(kube, "idx").get("completedIndexes") == "0", 10,
             what="completedIndexes 0")


def test_suspend_resume_and_suspend_again(kube, batch):
    batch.create_namespaced_job("default", _job("s", parallelism=2, completions=4, suspend=True))
    wait_for(lambda: "Suspended" in _conditions(kube, "s"), 10, what="Suspended")
    assert _conditions(kube, "s") == {"Suspended": ("True", "JobSuspended")}
    assert job_pods(kube, "s") == [] and "startTime" not in job_status(kube, "s")
    assert parse_table(kubectl(kube, "get", "jobs").check().stdout)[0][0]["STATUS"] == \
        "Suspended"
    batch.patch_namespaced_job("s", "default", {"spec": {"suspend": False}})
    wait_for(lambda: len(_active(kube, "s")) == 2, 10, what="two pods on resume")
    wait_for(lambda: _conditions(kube, "s") == {"Suspended": ("False", "JobResumed")}, 10,
             what="JobResumed")
    assert job_status(kube, "s")["startTime"]
    batch.patch_namespaced_job("s", "default", {"spec": {"suspend": True}})
    wait_for(lambda: job_pods(kube, "s") == [], 10, what="the active pods deleted")
    wait_for(lambda: _conditions(kube, "s") == {"Suspended": ("True", "JobSuspended")}, 10,
             what="suspended again")
    wait_for(lambda: "active" not in job_status(kube, "s"), 10, what="active 0")


def test_more_failures_than_the_backoff_limit_fail_the_job(kube, batch):
    assert kube.job_controller is not None
    # only the replacement matters here, not its delay (test_emulator_job_backoff.py)
    kube.job_controller.backoff = 0.05
    batch.create_namespaced_job("default", _job("f", backoffLimit=1))
    wait_for(lambda: len(_active(kube, "f")) == 1, 10, what="a pod")
    kube.set_pod_phase(_active(kube, "f")[0]["metadata"]["name"], "Failed")
    wait_for(lambda: len(_active(kube, "f")) == 1 and len(job_pods(kube, "f")) == 2, 10,
             what="a replacement")
    assert "Failed" not in _conditions(kube, "f")
    kube.set_pod_phase(_active(kube, "f")[0]["metadata"]["name"], "Failed")
    wait_for(lambda: "Failed" in _conditions(kube, "f"), 10, what="Failed")
    assert _conditions(kube, "f") == {"FailureTarget": ("True", "BackoffLimitExceeded"),
                                      "Failed": ("True", "BackoffLimitExceeded")}
    assert job_status(kube, "f")["failed"] == 2 and len(job_pods(kube, "f")) == 2
    assert parse_table(kubectl(kube, "get", "jobs").check().stdout)[0][0]["STATUS"] == "Failed"


def test_ready_pods_are_counted(kube, batch):
    batch.create_namespaced_job("default", _job("r", parallelism=2, completions=2))
    wait_for(lambda: len(_active(kube, "r")) == 2, 10, what="two pods")
    name = _active(kube, "r")[0]["metadata"]["name"]
    kube.patch("pods", name, {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}, "default", "merge")
    wait_for(lambda: job_status(kube, "r").get("ready") == 1, 10, what="ready 1")
    assert job_status(kube, "r")["active"] == 2


def test_the_controllers_pods_go_through_admission_webhooks(kube, batch, tmp_path):
    def gate(request: dict) -> dict:
        return {"allowed": True, "patch": [{"op": "add", "path": "/spec/schedulingGates",
                                            "value": [{"name": "fluxnode.io/queue"}]}]}

    with WebhookServer(tmp_path / "hook", "gate", "fluxnode", gate) as server:
        kube.service_endpoints[server.service] = server.address
        client.AdmissionregistrationV1Api(kube.api_client()).create_mutating_webhook_configuration(
            {"metadata": {"name": "gate"}, "webhooks": [{
                "name": "gate.fluxnode.io", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "clientConfig": server.service_config(),
                "objectSelector": {"matchExpressions": [
                    {"key": NAME_LABEL, "operator": "Exists"}]},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}]}]})
        batch.create_namespaced_job("default", _job("w"))
        wait_for(lambda: len(job_pods(kube, "w")) == 1, 10, what="a pod")
        [pod] = job_pods(kube, "w")
        assert pod["spec"]["schedulingGates"] == [{"name": "fluxnode.io/queue"}]
        assert pod["status"]["conditions"][0]["reason"] == "SchedulingGated"
        [review] = server.reviews
        assert review["request"]["userInfo"]["username"] == \
            "system:serviceaccount:kube-system:job-controller"
        assert review["request"]["object"]["metadata"]["generateName"] == "w-"
        assert [r["name"] for r in review["request"]["object"]["metadata"][
            "ownerReferences"]] == ["w"]


def test_the_controllers_requests_are_authorized_as_its_service_account(kube, batch):
    # the controller's requests reach the API handler in process: they must still be
    # authorized, and refused with the API server's Forbidden wording
    # (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go)
    rule = kube.forbid("create", "pods")
    batch.create_namespaced_job("default", _job("w"))
    controller = kube.job_controller
    assert controller is not None
    wait_for(lambda: controller.errors, 10, what="the controller's refused pod create")
    assert job_pods(kube, "w") == []
    where, _, status = controller.errors[0].partition(": 403 ")
    assert where == "default/w"
    assert json.loads(status)["message"] == (
        'pods is forbidden: User "system:serviceaccount:kube-system:job-controller" cannot '
        'create resource "pods" in API group "" in the namespace "default"')
    assert kube.count_requests("create", "pods") >= 1
    kube.allow(rule)
    controller.errors.clear()
    batch.patch_namespaced_job("w", "default", {"metadata": {"labels": {"retry": "1"}}})
    wait_for(lambda: len(job_pods(kube, "w")) == 1, 10, what="the pod once allowed")


def test_a_deleted_jobs_pods_are_orphaned_by_default_and_deleted_by_kubectl(kube, batch):
    for name in ("keep", "drop"):
        batch.create_namespaced_job("default", _job(name))
    wait_for(lambda: len(job_pods(kube, "keep")) == 1 and len(job_pods(kube, "drop")) == 1, 10,
             what="a pod each")
    batch.delete_namespaced_job("keep", "default")  # no policy: batch/v1 orphans
    wait_for(lambda: "ownerReferences" not in job_pods(kube, "keep")[0]["metadata"], 10,
             what="the pod orphaned")
    assert kubectl(kube, "delete", "job", "drop").check().stdout == \
        'job.batch "drop" deleted from default namespace\n'
    wait_for(lambda: job_pods(kube, "drop") == [], 10, what="the pod deleted (Background)")
    assert len(job_pods(kube, "keep")) == 1


def _seconds(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC).timestamp()


def test_active_deadline_fails_the_job_and_deletes_its_pods(kube, batch):
    # job_controller.go: pastActiveDeadline (startTime + activeDeadlineSeconds, never while
    # suspended), newFailureCondition with delayTerminalCondition (FailureTarget, then Failed
    # once the deleted pods are gone), reason DeadlineExceeded and its message
    kube.add_node("n1")
    kube.hold_terminations = True  # the kubelet stops the pods when the test says
    job = _job("d", parallelism=2, completions=2, activeDeadlineSeconds=1)
    job["spec"]["template"]["spec"]["nodeName"] = "n1"  # bound as created: they terminate
    batch.create_namespaced_job("default", job)
    batch.create_namespaced_job("default", _job("held", activeDeadlineSeconds=1, suspend=True))
    message = "Job was active longer than specified deadline"
    wait_for(lambda: "FailureTarget" in _conditions(kube, "d"), 20, what="FailureTarget")
    status = job_status(kube, "d")
    target = next(c for c in status["conditions"] if c["type"] == "FailureTarget")
    assert (target["status"], target["reason"], target["message"]) == \
        ("True", "DeadlineExceeded", message)
    # not before its deadline (whole seconds, as startTime is written)
    assert _seconds(target["lastTransitionTime"]) - _seconds(status["startTime"]) >= 1
    # its pods deleted: they terminate (the kubelet's part held), and no Failed meanwhile
    wait_for(lambda: len(job_pods(kube, "d")) == 2 and all(
        p["metadata"].get("deletionTimestamp") for p in job_pods(kube, "d")), 10,
        what="both pods terminating")
    wait_for(lambda: job_status(kube, "d").get("terminating") == 2, 10, what="terminating 2")
    assert "Failed" not in _conditions(kube, "d") and "active" not in job_status(kube, "d")
    assert kube.finish_terminations() == 2
    wait_for(lambda: "Failed" in _conditions(kube, "d"), 10, what="Failed")
    assert _conditions(kube, "d") == {"FailureTarget": ("True", "DeadlineExceeded"),
                                      "Failed": ("True", "DeadlineExceeded")}
    failed = next(c for c in job_status(kube, "d")["conditions"] if c["type"] == "Failed")
    assert failed["message"] == message and job_pods(kube, "d") == []
    assert parse_table(kubectl(kube, "get", "jobs", "d").check().stdout)[0][0]["STATUS"] == \
        "Failed"
    # a suspended Job's deadline does not run: well past its second, it is only Suspended
    wait_for(lambda: "Suspended" in _conditions(kube, "held"), 10, what="held Suspended")
    assert _conditions(kube, "held") == {"Suspended": ("True", "JobSuspended")}
    assert "startTime" not in job_status(kube, "held")


def test_active_deadline_counts_from_the_resume(kube, batch):
    # a resumed Job gets a new startTime; its deadline runs from there
    batch.create_namespaced_job("default", _job("r", activeDeadlineSeconds=1, suspend=True))
    wait_for(lambda: "Suspended" in _conditions(kube, "r"), 10, what="Suspended")
    batch.patch_namespaced_job("r", "default", {"spec": {"suspend": False}})
    wait_for(lambda: "Failed" in _conditions(kube, "r"), 20, what="Failed")
    status = job_status(kube, "r")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    resumed = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"], failed["reason"]) == \
        ("False", "JobResumed", "DeadlineExceeded")
    assert _seconds(failed["lastTransitionTime"]) - _seconds(status["startTime"]) >= 1
    assert _seconds(status["startTime"]) >= _seconds(resumed["lastTransitionTime"])


def test_pod_creation_stops_at_the_first_batch_with_a_failure(kube, batch):
    # slowStartBatch (pkg/controller/job/job_controller.go, controller_utils.go) creates
    # in batches of 1, 2, 4, ... and sends no further batch once one had an error: with pod
    # creation refused, a Job of parallelism 8 costs one create request, not eight
    rule = kube.forbid("create", "pods")
    batch.create_namespaced_job("default", _job("w", parallelism=8, completions=8))
    controller = kube.job_controller
    assert controller is not None
    wait_for(lambda: controller.errors, 10, what="the controller's refused pod create")
    assert kube.count_requests("create", "pods") == 1
    assert job_pods(kube, "w") == []
    kube.allow(rule)
    controller.errors.clear()
    batch.patch_namespaced_job("w", "default", {"metadata": {"labels": {"retry": "1"}}})
    wait_for(lambda: job_status(kube, "w").get("active") == 8, 10,
             what="the 8 pods once allowed, in the Job's status")
    assert len(job_pods(kube, "w")) == 8
    assert kube.count_requests("create", "pods") == 1 + 8


def _index_of(pod: dict) -> int:
    return int(pod["metadata"]["annotations"][INDEX])


def _running(kube: KubeEmulator, name: str, ready: bool) -> None:
    kube.patch("pods", name, {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}, "default", "merge")


def test_lowering_parallelism_deletes_the_pods_least_worth_keeping(kube, batch):
    """manageJob deletes the active pods beyond parallelism, in ActivePods' order
    (controller_utils.go): Pending before Running, not Ready before Ready. Here index 2 is
    Pending and index 1 Running but not Ready: those two go, whatever their index or age."""
    batch.create_namespaced_job("default", _job("low", completions=4, parallelism=4,
                                                 completionMode="Indexed"))
    wait_for(lambda: len(_active(kube, "low")) == 4, 10, what="four pods")
    by_index = {_index_of(p): p["metadata"]["name"] for p in job_pods(kube, "low")}
    _running(kube, by_index[1], ready=False)
    for index in (0, 3):
        _running(kube, by_index[index], ready=True)
    wait_for(lambda: job_status(kube, "low").get("ready") == 2, 10, what="ready 2")
    batch.patch_namespaced_job("low", "default", {"spec": {"parallelism": 2}})
    wait_for(lambda: sorted(_index_of(p) for p in job_pods(kube, "low")
                            if not p["metadata"].get("deletionTimestamp")) == [0, 3], 10,
             what="indexes 1 and 2 deleted")
    wait_for(lambda: job_status(kube, "low").get("active") == 2, 10, what="active 2")
    # raised again: the missing indexes, lowest first, up to the new parallelism
    batch.patch_namespaced_job("low", "default", {"spec": {"parallelism": 3}})
    wait_for(lambda: sorted(_index_of(p) for p in _active(kube, "low")) == [0, 1, 3], 10,
             what="index 1 made again")


def test_a_duplicated_index_keeps_the_pod_worth_keeping(kube, batch):
    """Two active pods of one index (a pod the controller's cache had not seen yet when it
    made another): activePodsForRemoval deletes all but the one ActivePods keeps longest,
    even when no pod is beyond parallelism."""
    job = batch.create_namespaced_job("default", _job("dup", completions=2, parallelism=2,
                                                       completionMode="Indexed"))
    wait_for(lambda: len(_active(kube, "dup")) == 2, 10, what="two pods")
    (first,) = [p for p in job_pods(kube, "dup") if _index_of(p) == 0]
    _running(kube, first["metadata"]["name"], ready=True)
    twin = {k: first[k] for k in ("apiVersion", "kind", "spec")}
    twin["spec"] = {k: v for k, v in first["spec"].items() if k != "nodeName"}
    twin["metadata"] = {"name": "dup-0-twin", "labels": first["metadata"]["labels"],
                        "annotations": first["metadata"]["annotations"],
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": "dup", "uid": job.metadata.uid,
                                             "controller": True, "blockOwnerDeletion": True}]}
    kube.create("pods", twin, "default")
    wait_for(lambda: "dup-0-twin" not in {p["metadata"]["name"] for p in job_pods(kube, "dup")
                                          if not p["metadata"].get("deletionTimestamp")},
             10, what="the Pending twin deleted")
    assert first["metadata"]["name"] in {p["metadata"]["name"] for p in _active(kube, "dup")}
    wait_for(lambda: job_status(kube, "dup").get("active") == 2, 10, what="active 2")


def test_a_work_queue_that_had_a_success_keeps_what_runs_when_lowered(kube, batch):
    """Completions unset (a work queue): once a pod succeeded the controller wants what is
    active to finish (wantActive = active), so lowering parallelism deletes nothing."""
    batch.create_namespaced_job("default", _job("wq", parallelism=3))
    wait_for(lambda: len(_active(kube, "wq")) == 3, 10, what="three pods")
    kube.set_pod_phase(_active(kube, "wq")[0]["metadata"]["name"], "Succeeded")
    wait_for(lambda: job_status(kube, "wq").get("succeeded") == 1, 10, what="succeeded 1")
    batch.patch_namespaced_job("wq", "default", {"spec": {"parallelism": 1}})
    wait_for(lambda: kube.get("jobs.batch", "wq", "default")["metadata"]["generation"] == 2,
             10, what="the lowered spec stored")
    kube.set_pod_phase(_active(kube, "wq")[0]["metadata"]["name"], "Running")  # a sync
    wait_for(lambda: job_status(kube, "wq").get("active") == 2, 10, what="active 2 synced")
    assert not [p for p in job_pods(kube, "wq") if p["metadata"].get("deletionTimestamp")]
    assert len(_active(kube, "wq")) == 2
