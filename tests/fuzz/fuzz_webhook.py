"""Fuzz target: the admission webhook's answer to a request body (what the API server, or
anything that reaches the webhook's port, sends). Allowed outcome: an AdmissionReview v1
answer (webhook_answer.py); any exception is a finding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).parent))
with atheris.instrument_imports():
    from fluxnode.scheduler.binder import webhook_answer
    from fluxnode.scheduler.binder.admission import Admission

from common import run  # noqa: E402

ADMISSION = Admission()


def one_input(data: bytes) -> None:
    body, _ = webhook_answer.answer(ADMISSION, data)
    review = json.loads(body)
    if review["kind"] != "AdmissionReview" or not isinstance(review["response"]["allowed"], bool):
        raise AssertionError(f"not an AdmissionReview answer: {body[:200]!r}")


def seeds() -> list[bytes]:
    container = {"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
    pod = {"metadata": {"name": "p", "labels": {"fluxnode.io/queue": "q",
                                                "scheduling.x-k8s.io/pod-group": "g",
                                                "fluxnode.io/group-size": "2"}},
           "spec": {"containers": [container]}}
    job = {"metadata": {"name": "j", "labels": {"fluxnode.io/queue": "q"}},
           "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                    "template": {"spec": {"containers": [container]}}}}
    out = []
    for group, resource, obj in (("", "pods", pod), ("batch", "jobs", job)):
        out.append(json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": "default",
                        "resource": {"group": group, "version": "v1", "resource": resource},
                        "object": obj}}).encode())
    return out + [b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}']


if __name__ == "__main__":
    run(one_input, seeds)
