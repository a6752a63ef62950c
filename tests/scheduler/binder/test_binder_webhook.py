"""A binder replica serving the admission webhook (issue 30), as deployed: its own service
account with exactly daemonset/binder.yaml's RBAC against the API emulator, a standby (the
Lease is someone else's, so readiness is the webhook's and the informers' alone), its
/readyz read over HTTP and its webhook called over HTTPS with the CA from the Secret."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest
import urllib3
import yaml
from fluxnode.scheduler.binder.webhook_server import PATH
from support.binder_cluster import BINDER_MANIFEST
from support.webhook_binder import held_lease, readyz, start

from fluxnode.testing.waiting import wait_for

SECRET = "fluxnode-webhook-cert"
SERVICE_NAME = "fluxnode-webhook.fluxnode.svc"


def manifests_without_secret_rules(path) -> list:
    docs = [d for d in yaml.safe_load_all(BINDER_MANIFEST.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "Role":
            doc["rules"] = [r for r in doc["rules"] if r["resources"] != ["secrets"]]
    path.write_text(yaml.safe_dump_all(docs))
    return [path]


@pytest.fixture
def binders():
    started = []
    yield started
    for b in started:
        b.stop()


def test_not_ready_while_it_cannot_get_a_certificate(kube, tmp_path, binders):
    held_lease(kube)
    b, denials = start(kube, manifests_without_secret_rules(tmp_path / "rbac.yaml"), tmp_path)
    binders.append(b)
    wait_for(lambda: "Secret" in readyz(b)[1], 30, what="readyz naming the Secret")
    code, text = readyz(b)
    assert code == 503
    assert text.startswith("not ok: admission webhook has no certificate yet")
    assert f"fluxnode/{SECRET}" in text
    assert denials and all(r.resource == "secrets" for r in denials)


def test_ready_replica_serves_the_webhook_with_the_manifest_rbac(kube, tmp_path, binders):
    held_lease(kube)
    b, denials = start(kube, [BINDER_MANIFEST], tmp_path)
    binders.append(b)
    wait_for(lambda: readyz(b)[0] == 200, 30, what="binder ready")
    assert not b.leading.is_set()  # a standby serves the webhook too
    secret = kube.get("secrets", SECRET, "fluxnode")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(base64.b64decode(secret["data"]["ca-bundle.crt"]))
    pool = urllib3.HTTPSConnectionPool("127.0.0.1", b.webhook.port, ca_certs=str(ca),
                                       server_hostname=SERVICE_NAME,
                                       assert_hostname=SERVICE_NAME, retries=False, timeout=10)
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-9", "operation": "CREATE",
                        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                        "object": {"metadata": {"name": "j", "labels": {
                            "fluxnode.io/queue": "q"}},
                                   "spec": {"template": {"spec": {"containers": []}}}}}}
    r = pool.request("POST", PATH, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
    pool.close()
    assert r.status == 200
    response = json.loads(r.data)["response"]
    assert response["uid"] == "u-9" and response["allowed"] is True
    assert {"op": "add", "path": "/spec/suspend", "value": True} in json.loads(
        base64.b64decode(response["patch"]))
    assert denials == []
    # the webhook's latency is exported with the binder's metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{b.health.port}/metrics", timeout=10) as m:
        assert 'fluxnode_binder_webhook_duration_seconds_count{result="allowed"} 1.0' in (
            m.read().decode())
