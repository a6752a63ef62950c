"""The webhook's answer to one request body: always an AdmissionReview, never a bare error.

The API server reads whatever a webhook answers as an AdmissionReview. A plain-text 400 or
500 is a failed call to it: under ``failurePolicy: Fail`` the object is refused with
"failed calling webhook", and a client that retries sends the same body into the same
error. So, as controller-runtime's webhook handler does (pkg/webhook/admission/http.go:
a body it cannot decode is answered ``Errored(400, err)``, written with HTTP 200), a body
that is not an AdmissionReview v1 (not JSON, nested past what the decoder takes, not an
object, another apiVersion or kind, no ``request``, no ``request.uid``) is answered with an
AdmissionReview whose response is ``allowed: false``, ``status.code: 400`` and a message
naming what is wrong, carrying the request's uid when one can be read. An unexpected
exception in a decision is answered the same way with code 500 (the handler logs it).
What an object fluxnode refuses gets is admission.py's `Verdict` (its code, 422 or 400).
"""

from __future__ import annotations

import json

import orjson
from fluxnode.scheduler.binder.admission import (
    REVIEW_API_VERSION,
    Admission,
    ReviewError,
    parse_review,
)

BAD, INTERNAL = 400, 500


def error_review(uid: str, code: int, message: str) -> bytes:
    """An AdmissionReview v1 that refuses with `code` and `message` (reason as the API
    server's StatusReason for the code)."""
    reason = "BadRequest" if code == BAD else "InternalError"
    return json.dumps({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
                       "response": {"uid": uid, "allowed": False,
                                    "status": {"code": code, "reason": reason,
                                               "message": message}}}).encode()


def readable_uid(body: bytes) -> str:
    """``request.uid`` of a body that may be anything, or "" when none can be read."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return ""
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


def answer(admission: Admission, body: bytes) -> tuple[bytes, str]:
    """(AdmissionReview body, result: allowed, refused or bad) for one request body."""
    try:
        request = parse_review(body)
    except ReviewError as exc:
        return error_review(readable_uid(body), BAD,
                            f"fluxnode: not an AdmissionReview v1: {exc}"), "bad"
    verdict = admission.review(request)
    return orjson.dumps(verdict.review()), "allowed" if verdict.allowed else "refused"


def failed(body: bytes) -> bytes:
    """The answer when deciding raised: refused with 500, the uid kept when readable."""
    return error_review(readable_uid(body), INTERNAL,
                        "fluxnode: internal error in the admission webhook (logged by the "
                        "binder replica)")
