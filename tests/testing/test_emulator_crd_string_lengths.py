"""minLength and maxLength of a CRD's schema in the API emulator (kube_crd_schema.py), with
fluxnode's own FluxJob CRD (daemonset/workloads/fluxjob-crd.yaml: spec.queue has minLength 1).

Oracle: kube-openapi's validation errors (pkg/validation/errors: TooShortFailCode ``%s in body
should be at least %d chars long``, TooLongFailCode ``... at most %d chars long``) as the API
server words a 422 field error (``FIELD: Invalid value: "VALUE": MESSAGE``); lengths are
counted in characters (Go's utf8.RuneCountInString), not bytes."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.paths import REPO

CRD = REPO / "daemonset" / "workloads" / "fluxjob-crd.yaml"


def record(queue: str) -> dict:
    return {"apiVersion": "fluxnode.io/v1alpha1", "kind": "FluxJob", "metadata": {"name": "j"},
            "spec": {"queue": queue, "pods": 1,
                     "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": "j"}}}


@pytest.fixture
def custom(kube):
    crd = yaml.safe_load(CRD.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["queue"]["maxLength"] = 3
    client.ApiextensionsV1Api(kube.api_client()).create_custom_resource_definition(crd)
    return client.CustomObjectsApi(kube.api_client())


def _refusal(custom, queue: str) -> str:
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object("fluxnode.io", "v1alpha1", "default", "fluxjobs",
                                               record(queue))
    assert exc.value.status == 422
    return json.loads(exc.value.body)["message"]


def test_a_string_shorter_than_min_length_is_refused(custom):
    assert ('spec.queue: Invalid value: "": spec.queue in body should be at least 1 chars long'
            in _refusal(custom, ""))


def test_a_string_longer_than_max_length_is_refused_counting_characters(custom):
    assert ('spec.queue: Invalid value: "abcd": spec.queue in body should be at most 3 chars '
            'long' in _refusal(custom, "abcd"))
    made = custom.create_namespaced_custom_object(  # 3 characters, 6 bytes in UTF-8
        "fluxnode.io", "v1alpha1", "default", "fluxjobs", record("ééé"))
    assert made["spec"]["queue"] == "ééé"
