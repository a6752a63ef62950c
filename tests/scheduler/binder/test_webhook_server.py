"""The admission webhook's HTTPS server (scheduler/binder/webhook_server.py), over a real
socket with TLS: urllib3 (the Kubernetes client's transport) posts AdmissionReviews and
verifies the certificate against the CA bundle for the Service's name, as the API server
does; OpenSSL reports which certificate a new connection gets."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import socket
import ssl

import pytest
import urllib3
from cryptography import x509
from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.webhook_cert import WebhookCerts, service_names
from fluxnode.scheduler.binder.webhook_server import MAX_BODY, PATH, WebhookServer

SERVICE_NAME = "fluxnode-webhook.fluxnode.svc"


def write_pair(certs: WebhookCerts, directory, tag: str):
    cert, key = directory / f"{tag}.crt", directory / f"{tag}.key"
    cert.write_bytes(certs.cert_chain)
    key.write_bytes(certs.key_pem)
    return cert, key


@pytest.fixture
def served(tmp_path):
    certs = WebhookCerts.issue(service_names("fluxnode-webhook", "fluxnode"),
                               datetime.datetime.now(datetime.UTC))
    server = WebhookServer("127.0.0.1", 0, Admission())
    assert not server.serving
    server.use(*write_pair(certs, tmp_path, "a"))
    server.start()
    assert server.serving
    (tmp_path / "ca.pem").write_bytes(certs.ca_bundle)
    pool = urllib3.HTTPSConnectionPool(
        "127.0.0.1", server.port, ca_certs=str(tmp_path / "ca.pem"),
        server_hostname=SERVICE_NAME, assert_hostname=SERVICE_NAME,
        cert_reqs="CERT_REQUIRED", timeout=10, retries=False)
    yield server, pool, certs, tmp_path
    pool.close()
    server.stop()


def review(obj: dict) -> bytes:
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "default", "object": obj}}).encode()


POD = {"metadata": {"name": "p", "labels": {"fluxnode.io/queue": "q"}},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def post(pool, body: bytes, **headers):
    return pool.request("POST", PATH, body=body,
                        headers={"Content-Type": "application/json", **headers})


def test_admission_review_over_https(served):
    _, pool, _, _ = served
    r = post(pool, review(POD))
    assert r.status == 200
    answer = json.loads(r.data)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "u-1" and answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/schedulingGates",
            "value": [{"name": "fluxnode.io/admission"}]} in patch


UNDECODABLE = [
    # (body, what the message must name, the uid the answer carries)
    (b"{not json", "body is not JSON", ""),
    (b"\xff\xfe", "body is not JSON", ""),
    (b"[" * 100_000, "body is not JSON", ""),  # past the decoder's nesting
    (b"[1, 2]", "body is not a JSON object", ""),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", '
     b'"request": {"uid": "u-7"}}', "apiVersion 'admission.k8s.io/v1beta1'", "u-7"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u-8"}}',
     "kind 'Pod'", "u-8"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request", ""),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
     "request.uid is missing", ""),
]


@pytest.mark.parametrize(("body", "named", "uid"), UNDECODABLE, ids=[
    "not-json", "not-utf8", "nested-too-deep", "array", "v1beta1", "wrong-kind", "no-request",
    "no-uid"])
def test_an_undecodable_request_gets_an_admission_review_error(served, body, named, uid):
    """controller-runtime's answer to a body it cannot decode (pkg/webhook/admission/http.go:
    Errored(http.StatusBadRequest, err), written with HTTP 200): allowed false, status.code
    400, the message naming what is wrong; here with the uid when the body has one."""
    server, pool, _, _ = served
    r = post(pool, body)
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    answer = json.loads(r.data)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid and response["allowed"] is False
    assert response["status"]["code"] == 400 and response["status"]["reason"] == "BadRequest"
    assert response["status"]["message"].startswith("fluxnode: not an AdmissionReview v1: ")
    assert named in response["status"]["message"]
    assert "patch" not in response
    assert post(pool, review(POD)).status == 200  # and the server goes on
    counted = {s.labels["result"]: s.value for m in server.requests.collect()
               for s in m.samples if s.name.endswith("_count")}
    assert counted == {"bad": 1.0, "allowed": 1.0}


def test_refusal_is_an_admission_review_naming_the_field(served):
    _, pool, _, _ = served
    bad = json.loads(json.dumps(POD))
    bad["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    answer = json.loads(post(pool, review(bad)).data)["response"]
    assert answer["allowed"] is False
    assert "kueue.x-k8s.io/pod-group-total-count" in answer["status"]["message"]


def headers_only(port: int, ca: bytes, headers: dict) -> tuple[int, bytes]:
    """POST with these headers and no body sent yet: what the server answers at once."""
    context = ssl.create_default_context(cadata=ca.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                    server_hostname=SERVICE_NAME)
    conn.putrequest("POST", PATH)
    for key, value in headers.items():
        conn.putheader(key, value)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body


def test_bodies_are_bounded(served):
    server, pool, certs, _ = served
    status, body = headers_only(server.port, certs.ca_bundle,
                                {"Content-Length": str(MAX_BODY + 1)})
    assert status == 413 and str(MAX_BODY).encode() in body
    status, body = headers_only(server.port, certs.ca_bundle, {"Transfer-Encoding": "chunked"})
    assert status == 411 and b"Content-Length" in body
    assert pool.request("GET", PATH).status == 405
    assert post(pool, review(POD)).status == 200


def served_serial(port: int, ca: bytes) -> int:
    context = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=SERVICE_NAME) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_a_rotated_certificate_is_served_to_new_connections(served):
    server, pool, certs, tmp_path = served
    assert served_serial(server.port, certs.ca_bundle) == certs.cert.serial_number
    renewed = certs.renewed(service_names("fluxnode-webhook", "fluxnode"),
                            datetime.datetime.now(datetime.UTC))
    server.use(*write_pair(renewed, tmp_path, "b"))
    assert served_serial(server.port, certs.ca_bundle) == renewed.cert.serial_number
    assert post(pool, review(POD)).status == 200


def test_a_silent_client_does_not_hold_up_others(served):
    server, pool, _, _ = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=10):
        # connected, never says a word (no TLS hello): another request is answered anyway
        assert post(pool, review(POD)).status == 200
