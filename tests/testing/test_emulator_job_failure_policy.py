"""The emulated Job controller's podFailurePolicy, and the API validation of a Job's
podFailurePolicy and restartPolicy.

Oracles from outside the emulator, written out here as literals: kube-controller-manager's
pkg/controller/job (pod_failure_policy.go matchPodFailurePolicy: rules in order, the first
match decides; onExitCodes over terminated containers with a non-zero exit code; the
FailJob message "Container C for pod NS/P failed with exit code N matching FailJob rule at
index I"; Ignore not counted in status.failed nor toward backoffLimit; job_controller.go:
FailureTarget with reason PodFailurePolicy, the active pods deleted, Failed once they are
gone) and pkg/apis/batch/validation/validation.go (validatePodFailurePolicy and its rules,
the restartPolicy checks of validateJobSpec), worded as apimachinery's field.Error prints
them. The test plays the kubelet: it writes each failure's phase, container exit code and
conditions as the kubelet and the eviction API would."""

from __future__ import annotations

import datetime
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.job_emulator import job_emulator, job_pods, job_status

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for


@pytest.fixture
def kube(tmp_path):
    # a 0.05 s pod failure backoff: these tests fail pods and care about what the policy
    # makes of each failure, not about the delay before a replacement
    # (test_emulator_job_backoff.py)
    with job_emulator(tmp_path, job_backoff=0.05) as emulator:
        yield emulator


@pytest.fixture
def batch(kube):
    return client.BatchV1Api(kube.api_client())


def _job(name: str, rules: list[dict], **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "containers": [{"name": "main", "image": "busybox"}],
                "initContainers": [{"name": "setup", "image": "busybox"}],
                "restartPolicy": "Never"}},
                "podFailurePolicy": {"rules": rules}, **spec}}


def _active(kube: KubeEmulator, job: str) -> list[dict]:
    return [p for p in job_pods(kube, job) if p["status"]["phase"] not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]


def _conditions(kube: KubeEmulator, job: str) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"])
            for c in job_status(kube, job).get("conditions", [])}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminated(name: str, code: int) -> dict:
    return {"name": name, "ready": False, "restartCount": 0, "image": "busybox",
            "imageID": "", "state": {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "finishedAt": _now()}}}


def _fail(kube: KubeEmulator, name: str, code: int = 1, *, init_code: int = 0,
          conditions: list[dict] | None = None) -> None:
    """The kubelet reports the pod Failed: its init container exited `init_code`, its
    container `code`, with these pod conditions."""
    status: dict = {"phase": "Failed",
                    "initContainerStatuses": [_terminated("setup", init_code)],
                    "containerStatuses": [_terminated("main", code)]}
    if conditions is not None:
        status["conditions"] = conditions
    kube.patch("pods", name, {"status": status}, "default", "merge")


def test_a_failjob_rule_fails_the_job_once_its_pods_are_gone(kube, batch):
    kube.add_node("n1")
    kube.hold_terminations = True  # the kubelet stops the deleted pods when the test says
    job = _job("fj", [{"action": "FailJob", "onExitCodes": {
        "containerName": "main", "operator": "In", "values": [42]}}],
        parallelism=3, completions=3, backoffLimit=6)
    job["spec"]["template"]["spec"]["nodeName"] = "n1"  # bound as created: they terminate
    made = batch.create_namespaced_job("default", job)
    assert made.spec.pod_replacement_policy == "Failed"  # the default with a policy
    wait_for(lambda: len(_active(kube, "fj")) == 3, 10, what="three pods")
    failing = sorted(p["metadata"]["name"] for p in _active(kube, "fj"))[1]
    _fail(kube, failing, 42)
    message = (f"Container main for pod default/{failing} failed with exit code 42 matching "
               "FailJob rule at index 0")
    wait_for(lambda: "FailureTarget" in _conditions(kube, "fj"), 10, what="FailureTarget")
    assert _conditions(kube, "fj")["FailureTarget"] == ("True", "PodFailurePolicy", message)
    # the two others deleted; Failed only once they are gone, and no replacement meanwhile
    wait_for(lambda: job_status(kube, "fj").get("terminating") == 2, 10, what="terminating 2")
    assert "Failed" not in _conditions(kube, "fj") and len(job_pods(kube, "fj")) == 3
    assert job_status(kube, "fj")["failed"] == 1
    assert kube.finish_terminations() == 2
    wait_for(lambda: "Failed" in _conditions(kube, "fj"), 10, what="Failed")
    assert _conditions(kube, "fj") == {
        "FailureTarget": ("True", "PodFailurePolicy", message),
        "Failed": ("True", "PodFailurePolicy", message)}
    assert [p["metadata"]["name"] for p in job_pods(kube, "fj")] == [failing]


def test_an_ignored_failure_is_replaced_and_not_counted(kube, batch):
    # backoffLimit 0: one counted failure fails the Job; a disruption (the eviction's
    # DisruptionTarget condition) is ignored: the pod is replaced, status.failed stays 0
    batch.create_namespaced_job("default", _job("ig", [{
        "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}],
        backoffLimit=0))
    stored = kube.get("jobs.batch", "ig", "default")
    # the API server's default status of a pattern (pkg/apis/batch/v1/defaults.go)
    assert stored["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}]
    wait_for(lambda: len(_active(kube, "ig")) == 1, 10, what="a pod")
    (first,) = _active(kube, "ig")
    _fail(kube, first["metadata"]["name"], 137, conditions=[{
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "lastTransitionTime": _now()}])
    wait_for(lambda: [p for p in _active(kube, "ig") if p["metadata"]["uid"]
                      != first["metadata"]["uid"]], 10, what="the replacement")
    assert "failed" not in job_status(kube, "ig") and _conditions(kube, "ig") == {}
    # a failure no rule matches is counted: past backoffLimit 0
    (second,) = _active(kube, "ig")
    _fail(kube, second["metadata"]["name"], 1)
    wait_for(lambda: "Failed" in _conditions(kube, "ig"), 10, what="Failed")
    assert _conditions(kube, "ig")["Failed"][:2] == ("True", "BackoffLimitExceeded")
    assert job_status(kube, "ig")["failed"] == 1


def test_rules_are_matched_in_order_over_containers_then_init_containers(kube, batch):
    """Ignore exit code 3, else FailJob on any exit code but 3 (NotIn). Exit code 3 of the
    container is ignored; a container that exited 0 matches nothing (a zero exit code is
    never compared, even against NotIn); then an init container's exit code 5 fails the
    Job, named in the message."""
    batch.create_namespaced_job("default", _job("ord", [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [3]}}],
        backoffLimit=6))
    wait_for(lambda: len(_active(kube, "ord")) == 1, 10, what="a pod")
    (first,) = _active(kube, "ord")
    _fail(kube, first["metadata"]["name"], 3)
    wait_for(lambda: [p for p in _active(kube, "ord") if p["metadata"]["uid"]
                      != first["metadata"]["uid"]], 10, what="the replacement")
    assert "failed" not in job_status(kube, "ord")
    (second,) = _active(kube, "ord")
    # failed without a non-zero exit code anywhere (evicted before it ran): counted
    _fail(kube, second["metadata"]["name"], 0)
    wait_for(lambda: job_status(kube, "ord").get("failed") == 1, 10, what="failed 1")
    assert _conditions(kube, "ord") == {}
    wait_for(lambda: len(_active(kube, "ord")) == 1, 10, what="a third pod")
    (third,) = _active(kube, "ord")
    _fail(kube, third["metadata"]["name"], 0, init_code=5)
    wait_for(lambda: "Failed" in _conditions(kube, "ord"), 10, what="Failed")
    assert _conditions(kube, "ord")["Failed"] == (
        "True", "PodFailurePolicy", f"Container setup for pod default/"
        f"{third['metadata']['name']} failed with exit code 5 matching FailJob rule at "
        "index 1")
    assert job_status(kube, "ord")["failed"] == 2


def test_a_terminating_pod_is_replaced_only_once_it_is_gone(kube, batch):
    """podReplacementPolicy Failed (the default with a podFailurePolicy): a pod being
    deleted is not active, yet no replacement starts while it terminates
    (onlyReplaceFailedPods); an Indexed Job's index waits for its own pod."""
    kube.add_node("n1")
    kube.hold_terminations = True
    job = _job("rp", [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}],
               completionMode="Indexed", completions=2, parallelism=2)
    job["spec"]["template"]["spec"]["nodeName"] = "n1"
    batch.create_namespaced_job("default", job)
    wait_for(lambda: len(_active(kube, "rp")) == 2, 10, what="two pods")
    (zero,) = [p for p in _active(kube, "rp")
               if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"]
    kube.delete("pods", zero["metadata"]["name"], "default", grace_period=30)
    wait_for(lambda: job_status(kube, "rp").get("terminating") == 1, 10, what="terminating 1")
    assert job_status(kube, "rp")["active"] == 1 and len(job_pods(kube, "rp")) == 2
    assert kube.finish_terminations() == 1
    wait_for(lambda: len(_active(kube, "rp")) == 2, 10, what="index 0 made again")
    assert zero["metadata"]["uid"] not in {p["metadata"]["uid"] for p in job_pods(kube, "rp")}


def _refused(batch, job: dict) -> str:
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job("default", job)
    assert caught.value.status == 422
    return json.loads(caught.value.body)["message"]


def _one_rule(rule: dict, **spec: object) -> dict:
    return _job("v", [rule], **spec)


ON_EXIT = "spec.podFailurePolicy.rules[0].onExitCodes"


@pytest.mark.parametrize(("job", "error"), [
    (_one_rule({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 1]}}),
     f"{ON_EXIT}.values[0]: Invalid value: 0: must not be 0 for the In operator"),
    (_one_rule({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [2, 1]}}),
     f"{ON_EXIT}.values: Invalid value: []int32{{2, 1}}: must be ordered"),
    (_one_rule({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 1]}}),
     f"{ON_EXIT}.values[1]: Duplicate value: 1"),
    (_one_rule({"action": "FailJob", "onExitCodes": {"operator": "In", "values": []}}),
     f"{ON_EXIT}.values: Invalid value: []int32(nil): at least one value is required"),
    (_one_rule({"action": "FailJob", "onExitCodes": {"operator": "Is", "values": [1]}}),
     f'{ON_EXIT}.operator: Unsupported value: "Is": supported values: "In", "NotIn"'),
    (_one_rule({"action": "FailJob", "onExitCodes": {
        "containerName": "other", "operator": "In", "values": [1]}}),
     f'{ON_EXIT}.containerName: Invalid value: "other": must be one of the container or '
     "initContainer names in the pod template"),
    (_one_rule({"action": "Retry", "onExitCodes": {"operator": "In", "values": [1]}}),
     'spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: '
     '"Count", "FailIndex", "FailJob", "Ignore"'),
    (_one_rule({"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}),
     'spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the '
     "backoffLimitPerIndex to be set"),
    (_one_rule({"action": "Ignore"}),
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and "
     "OnPodConditions is required"),
    (_one_rule({"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]},
                "onPodConditions": [{"type": "DisruptionTarget"}]}),
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and "
     "OnPodConditions is not supported"),
    (_one_rule({"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "Maybe"}]}),
     'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Maybe": '
     'supported values: "False", "True", "Unknown"'),
    (_one_rule({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
               podReplacementPolicy="TerminatingOrFailed"),
     'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported '
     'values: "Failed"'),
], ids=["in-zero", "unordered", "duplicate", "no-values", "operator", "container",
        "action", "failindex", "no-requirement", "both", "status", "replacement"])
def test_the_api_refuses_an_invalid_pod_failure_policy(batch, job, error):
    assert _refused(batch, job) == f'Job.batch "v" is invalid: {error}'


def test_the_api_refuses_a_restart_policy_a_job_cannot_have(batch):
    job = _job("v", [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}])
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert _refused(batch, job) == (
        'Job.batch "v" is invalid: spec.template.spec.restartPolicy: Invalid value: '
        '"OnFailure": only "Never" is supported when podFailurePolicy is specified')
    del job["spec"]["podFailurePolicy"]
    batch.create_namespaced_job("default", job)  # OnFailure without a policy: allowed
    job["metadata"]["name"] = "always"
    del job["spec"]["template"]["spec"]["restartPolicy"]  # the pod default, Always
    assert _refused(batch, job) == (
        'Job.batch "always" is invalid: spec.template.spec.restartPolicy: Required value: '
        'valid values: "OnFailure", "Never"')
