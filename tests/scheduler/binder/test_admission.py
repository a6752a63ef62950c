"""The admission webhook's decisions (scheduler/binder/admission.py), request by request.

Each patch is applied with the API emulator's RFC 6902 implementation
(fluxnode/testing/kube_patch.py), not the webhook's, and the result read as the API server
would store it; refusals must name the field the user wrote.
"""

from __future__ import annotations

import base64
import json

import pytest
from fluxnode.scheduler.binder.admission import (
    ADMISSION_GATE,
    Admission,
    ReviewError,
    parse_review,
)
from fluxnode.scheduler.binder.podgroup import SCHEDULER_PLUGINS, GroupKey, PodGroupObject

from fluxnode.testing.kube_patch import json_patch

QUEUE = "fluxnode.io/queue"


def review(obj: dict, resource: str = "pods", group: str = "", operation: str = "CREATE",
           uid: str = "3f7c-uid") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation,
                        "kind": {"group": group, "version": "v1",
                                 "kind": "Job" if resource == "jobs" else "Pod"},
                        "resource": {"group": group, "version": "v1", "resource": resource},
                        "namespace": "default", "object": obj}}


def answer(obj: dict, **kw) -> dict:
    body = json.dumps(review(obj, **kw)).encode()
    return Admission().review(parse_review(body)).review()


def mutated(obj: dict, **kw) -> dict:
    response = answer(obj, **kw)["response"]
    assert response["allowed"], response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    return json_patch(obj, json.loads(base64.b64decode(response["patch"])))


def pod(labels=None, annotations=None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def job(labels=None, template_meta=None, **spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "labels": labels or {}},
            "spec": {**spec, "template": {
                **({"metadata": template_meta} if template_meta is not None else {}),
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}


def refusal(obj: dict, **kw) -> str:
    response = answer(obj, **kw)["response"]
    assert response["allowed"] is False, response
    assert response["uid"] == "3f7c-uid"
    assert 400 <= response["status"]["code"] < 500
    return response["status"]["message"]


# -- Jobs ---------------------------------------------------------------------------------


def test_opted_in_job_is_created_suspended_with_its_template_opted_in():
    out = mutated(job({QUEUE: "batch"}, parallelism=8, completions=8,
                      completionMode="Indexed"), resource="jobs", group="batch")
    assert out["spec"]["suspend"] is True
    template = out["spec"]["template"]
    # the queue, and the label the configuration's pods webhook leaves out (its pods are not
    # sent to the webhook at all)
    assert template["metadata"]["labels"] == {QUEUE: "batch", "fluxnode.io/job-admitted": "true"}
    assert template["metadata"]["annotations"] == {"fluxnode.io/job": "train"}
    assert template["spec"]["schedulerName"] == "fluxnode"
    assert out["spec"]["parallelism"] == 8  # the rest is untouched


def test_a_job_already_suspended_or_with_labels_keeps_them():
    meta = {"labels": {"app": "x"}, "annotations": {"note": "y"}}
    out = mutated(job({QUEUE: "q"}, template_meta=meta, suspend=False),
                  resource="jobs", group="batch")
    assert out["spec"]["suspend"] is True
    assert out["spec"]["template"]["metadata"]["labels"] == {
        "app": "x", QUEUE: "q", "fluxnode.io/job-admitted": "true"}
    assert out["spec"]["template"]["metadata"]["annotations"] == {
        "note": "y", "fluxnode.io/job": "train"}


def test_a_job_not_opted_in_passes_unchanged():
    response = answer(job({"app": "x"}), resource="jobs", group="batch")["response"]
    assert response == {"uid": "3f7c-uid", "allowed": True}


def test_a_job_template_size_that_disagrees_with_its_pod_count_is_refused():
    meta = {"labels": {"fluxnode.io/group-size": "4"}}
    message = refusal(job({QUEUE: "q"}, template_meta=meta, parallelism=8, completions=8),
                      resource="jobs", group="batch")
    assert "spec.template.metadata.labels[fluxnode.io/group-size]" in message
    assert "4" in message and "8" in message
    # the count follows the API server's defaults: parallelism 1 when unset, capped by
    # completions
    meta = {"annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"}}
    assert mutated(job({QUEUE: "q"}, template_meta=meta, parallelism=5, completions=3),
                   resource="jobs", group="batch")["spec"]["suspend"] is True
    meta = {"labels": {"fluxnode.io/group-size": "1"}}
    assert mutated(job({QUEUE: "q"}, template_meta=meta, completions=6),
                   resource="jobs", group="batch")["spec"]["suspend"] is True


def test_a_job_naming_another_scheduler_is_refused():
    obj = job({QUEUE: "q"})
    obj["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    message = refusal(obj, resource="jobs", group="batch")
    assert "spec.template.spec.schedulerName" in message and "volcano" in message


def test_an_empty_queue_name_is_refused():
    message = refusal(job({QUEUE: ""}), resource="jobs", group="batch")
    assert f"metadata.labels[{QUEUE}]" in message


# -- pods ---------------------------------------------------------------------------------


def test_opted_in_pod_gets_the_admission_gate_and_fluxnode():
    out = mutated(pod({QUEUE: "q"}, schedulerName="default-scheduler"))
    assert out["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert out["spec"]["schedulerName"] == "fluxnode"


def test_gates_the_user_set_are_kept_and_ours_added_once():
    out = mutated(pod({QUEUE: "q"}, schedulingGates=[{"name": "example.com/wait"}]))
    assert out["spec"]["schedulingGates"] == [{"name": "example.com/wait"},
                                              {"name": ADMISSION_GATE}]
    again = mutated(out)
    assert again["spec"]["schedulingGates"] == out["spec"]["schedulingGates"]


def test_pods_of_a_job_fluxnode_admitted_pass_unchanged():
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1",
             "controller": True}
    obj = pod({QUEUE: "q"}, {"fluxnode.io/job": "train"}, schedulerName="fluxnode")
    obj["metadata"]["ownerReferences"] = [owner]
    assert answer(obj)["response"] == {"uid": "3f7c-uid", "allowed": True}
    # the annotation alone (no controller reference to that Job) is a plain pod: gated
    obj["metadata"]["ownerReferences"] = [{**owner, "name": "other"}]
    assert mutated(obj)["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]


@pytest.mark.parametrize("labels, annotations, field", [
    ({"scheduling.x-k8s.io/pod-group": "g", "fluxnode.io/group-size": "4"},
     {"fluence.flux-framework.org/group-size": "3"},
     "metadata.annotations[fluence.flux-framework.org/group-size]"),
    ({"kueue.x-k8s.io/pod-group-name": "g", "fluxnode.io/group-size": "2"},
     {"kueue.x-k8s.io/pod-group-total-count": "5"},
     "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"),
    ({"kueue.x-k8s.io/pod-group-name": "g"}, {},
     "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"),
    ({}, {"kueue.x-k8s.io/pod-group-total-count": "5"},
     "metadata.labels[kueue.x-k8s.io/pod-group-name]"),
    ({"kueue.x-k8s.io/pod-group-name": "g"}, {"kueue.x-k8s.io/pod-group-total-count": "0"},
     "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"),
    ({"scheduling.x-k8s.io/pod-group": "g", "fluxnode.io/group-size": "four"}, {},
     "metadata.labels[fluxnode.io/group-size]"),
    ({"fluxnode.io/group-size": "2"}, {}, "metadata.labels[fluxnode.io/group-size]"),
])
def test_malformed_groups_are_refused_naming_the_field(labels, annotations, field):
    message = refusal(pod({QUEUE: "q", **labels}, annotations))
    assert message.startswith("fluxnode: ") and field in message, message


def test_well_formed_groups_are_admitted():
    for labels, notes in [
        ({"scheduling.x-k8s.io/pod-group": "g", "fluxnode.io/group-size": "4"},
         {"fluence.flux-framework.org/group-size": "4"}),
        ({"kueue.x-k8s.io/pod-group-name": "g"}, {"kueue.x-k8s.io/pod-group-total-count": "3"}),
    ]:
        assert mutated(pod({QUEUE: "q", **labels}, notes))["spec"]["schedulingGates"]


def test_other_operations_and_resources_pass_unchanged():
    assert answer(pod({QUEUE: "q"}), operation="UPDATE")["response"]["allowed"] is True
    assert "patch" not in answer(pod({QUEUE: "q"}), operation="UPDATE")["response"]
    assert "patch" not in answer({"metadata": {}}, resource="configmaps")["response"]


@pytest.mark.parametrize("obj, field", [
    ({"metadata": "x", "spec": {}}, "metadata"),
    ({"metadata": {"labels": ["a"]}, "spec": {}}, "metadata.labels"),
    ({"metadata": {"labels": {QUEUE: "q"}}, "spec": {"schedulingGates": "x"}},
     "spec.schedulingGates"),
])
def test_objects_of_the_wrong_shape_are_refused_naming_the_field(obj, field):
    assert refusal(obj).startswith(f"fluxnode: {field}:")


def test_job_counts_of_the_wrong_type_are_refused():
    message = refusal(job({QUEUE: "q"}, parallelism="many"), resource="jobs", group="batch")
    assert "spec.parallelism" in message


@pytest.mark.parametrize("body, words", [
    (b"\xff\xfe", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "v1beta1"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
     "request.uid"),
])
def test_undecodable_reviews_say_what_is_wrong(body, words):
    with pytest.raises(ReviewError, match=words):
        parse_review(body)


# -- a group larger than its declared size is refused -----------------------------------



def capped(obj: dict, counts: dict, podgroups=None, namespace: str = "default") -> dict:
    request = review(obj)["request"]
    request["namespace"] = namespace
    return Admission(members=lambda key: counts.get(key, 0),
                     podgroups=podgroups).review(request).review()["response"]


def test_a_pod_beyond_its_groups_declared_size_is_refused_naming_group_size_and_count():
    member = pod({QUEUE: "batch", "scheduling.x-k8s.io/pod-group": "g",
                  "fluxnode.io/group-size": "2"})
    assert capped(member, {GroupKey("default", "group", "g"): 1})["allowed"]
    refused = capped(member, {GroupKey("default", "group", "g"): 2})
    assert not refused["allowed"] and refused["status"]["code"] == 422
    assert refused["status"]["message"] == (
        "fluxnode: group default/g is full: its size is 2 (declared) and it has 2 members "
        "already; delete one or raise the size before adding a pod")
    # the count is the request's namespace's group, not another's of the same name
    assert capped(member, {GroupKey("default", "group", "g"): 2}, namespace="team")["allowed"]


def test_a_group_without_a_declared_size_is_not_capped():
    member = pod({QUEUE: "batch", "scheduling.x-k8s.io/pod-group": "g"})
    assert capped(member, {GroupKey("default", "group", "g"): 7})["allowed"]


def test_a_podgroups_min_member_caps_its_group():
    class Directory:
        def installed(self, kind):
            return kind is SCHEDULER_PLUGINS

        def get(self, kind, namespace, name):
            return PodGroupObject(kind, namespace, name, "u", 3) if name == "g" else None

    member = pod({QUEUE: "batch", "scheduling.x-k8s.io/pod-group": "g"})
    refused = capped(member, {GroupKey("default", "group", "g"): 3}, Directory())
    assert "its size is 3 (PodGroup default/g spec.minMember) and it has 3 members" in \
        refused["status"]["message"]
    # a PodGroup that does not exist yet sizes nothing: the pod is admitted, and waits
    other = pod({QUEUE: "batch", "scheduling.x-k8s.io/pod-group": "h"})
    assert capped(other, {GroupKey("default", "group", "h"): 9}, Directory())["allowed"]


def test_a_volcano_group_name_is_a_group_for_a_size():
    member = pod({QUEUE: "batch", "fluxnode.io/group-size": "1"},
                 {"scheduling.k8s.io/group-name": "vg"})
    assert capped(member, {})["allowed"]
    assert not capped(member, {GroupKey("default", "volcano", "vg"): 1})["allowed"]


def test_an_opted_in_job_is_stamped_with_when_the_webhook_saw_it_to_the_microsecond():
    """The stamp orders Jobs created in one second (creationTimestamp has whole seconds);
    the clock is the webhook's, injected here; a stamp the user wrote is replaced."""
    body = json.dumps(review(job({QUEUE: "batch"}), resource="jobs", group="batch")).encode()
    response = Admission(clock=lambda: 1_790_000_000.25).review(parse_review(body)).review()
    out = json_patch(job({QUEUE: "batch"}), json.loads(base64.b64decode(
        response["response"]["patch"])))
    assert out["metadata"]["annotations"] == {
        "fluxnode.io/submitted": "2026-09-21T14:13:20.250000Z"}  # date -u -d @1790000000
    forged = job({QUEUE: "batch"})
    forged["metadata"]["annotations"] = {"fluxnode.io/submitted": "2000-01-01T00:00:00.000000Z",
                                         "note": "kept"}
    body = json.dumps(review(forged, resource="jobs", group="batch")).encode()
    response = Admission(clock=lambda: 1_790_000_000.25).review(parse_review(body)).review()
    out = json_patch(forged, json.loads(base64.b64decode(response["response"]["patch"])))
    assert out["metadata"]["annotations"] == {
        "fluxnode.io/submitted": "2026-09-21T14:13:20.250000Z", "note": "kept"}
