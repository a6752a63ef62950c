"""Property tests for the webhook's answer to a request body (scheduler/binder/
webhook_answer.py, issue 30: "a webhook request that cannot be decoded gets an
AdmissionReview error"): whatever the body, the answer is an AdmissionReview v1 as the API
server reads one (k8s.io/api/admission/v1 AdmissionResponse: uid, allowed, status), and a
body that is not a well-formed review is refused with code 400, carrying the uid it names."""

from __future__ import annotations

import json

from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.webhook_answer import answer
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import JSON, PROFILE

ADMISSION = Admission()
FIELDS = st.sampled_from(["apiVersion", "kind", "request"])
REQUEST_FIELDS = st.sampled_from(["uid", "operation", "resource", "object", "namespace"])
REVIEWISH = st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1]),
     "kind": st.sampled_from(["AdmissionReview", "Pod", None])},
    optional={"request": st.dictionaries(REQUEST_FIELDS, JSON, max_size=5) | JSON})


def read(body: bytes) -> dict:
    review = json.loads(body)
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert isinstance(response["uid"], str) and isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] >= 400 and response["status"]["message"]
    return response


def well_formed(review: object) -> bool:
    """The test's own reading of AdmissionReview v1: the right apiVersion and kind, a
    request object with a non-empty string uid."""
    return (isinstance(review, dict) and review.get("apiVersion") == "admission.k8s.io/v1"
            and review.get("kind") == "AdmissionReview" and isinstance(review.get("request"), dict)
            and isinstance(review["request"].get("uid"), str) and review["request"]["uid"] != "")


@PROFILE
@given(st.binary(max_size=200))
def test_any_bytes_get_an_admission_review(body):
    response = read(answer(ADMISSION, body)[0])
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if not well_formed(parsed):
        assert response["allowed"] is False and response["status"]["code"] == 400


@PROFILE
@given(REVIEWISH)
def test_reviewish_bodies_are_answered_with_their_uid_or_refused_with_400(review):
    body, result = answer(ADMISSION, json.dumps(review).encode())
    response = read(body)
    request = review.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    if well_formed(review):
        assert response["uid"] == uid and result in ("allowed", "refused")
    else:
        assert result == "bad" and response["allowed"] is False
        assert response["status"]["code"] == 400
        assert response["uid"] == (uid if isinstance(uid, str) else "")
