"""The webhook's certificate kept current while the API emulator calls the webhook (issue 30):
real binder replicas (standbys with exactly daemonset/binder.yaml's RBAC) serving the webhook
as daemonset/workloads/webhook.yaml installs it, objects created with the official client.

Oracles from outside the binder: the API server's verdict on each opted-in creation (the
emulator verifies the webhook's certificate against the configuration's caBundle, as
k8s.io/apiserver's webhook client does), and the certificate a new connection of the test's
own gets, checked by cryptography's X.509 path validator against that caBundle for the
Service's name at the real time (expiry included).
Every check interval is left at its default (300 s): what happens here within seconds is
the replicas watching the Secret and the configuration, not their timed checks."""

from __future__ import annotations

import base64
import datetime
import json
import socket
import ssl

import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.paths import REPO
from support.webhook_binder import held_lease, readyz, start

from fluxnode.testing.waiting import wait_for

WEBHOOK_MANIFEST = REPO / "daemonset" / "workloads" / "webhook.yaml"
BINDER_MANIFEST = REPO / "daemonset" / "binder.yaml"
CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
SECRET = "fluxnode-webhook-cert"
SERVICE = ("fluxnode", "fluxnode-webhook")
SERVICE_NAME = "fluxnode-webhook.fluxnode.svc"
QUEUE = {"fluxnode.io/queue": "batch"}


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": QUEUE},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def config_bundle(kube) -> str:
    bundles = {h["clientConfig"].get("caBundle", "") for h in kube.get(CONFIG, "fluxnode")[
        "webhooks"]}
    return bundles.pop() if len(bundles) == 1 else ""


def secret_certs(kube) -> tuple[int, int] | None:
    """(CA serial, serving certificate serial) of the Secret, None while it is missing."""
    try:
        data = kube.get("secrets", SECRET, "fluxnode")["data"]
    except Exception:
        return None
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    return ca.serial_number, cert.serial_number


def served(port: int) -> x509.Certificate:
    """The certificate a new connection gets (verified below, against the caBundle read
    after the handshake: a replica serves a pair only once the bundle vouches for it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def trusted(cert: x509.Certificate, bundle_b64: str) -> str | None:
    """Why a client holding the caBundle would refuse `cert` for the Service's name now
    (cryptography's X.509 path validator: names, validity, issuer), or None."""
    roots = x509.load_pem_x509_certificates(base64.b64decode(bundle_b64)) if bundle_b64 else []
    if not roots:
        return "empty caBundle"
    verifier = PolicyBuilder().store(Store(roots)).time(
        datetime.datetime.now(datetime.UTC)).build_server_verifier(x509.DNSName(SERVICE_NAME))
    try:
        verifier.verify(cert, [])
        return None
    except VerificationError as exc:
        return str(exc)


class Calls:
    """Opted-in creations (dry run: nothing stored, the webhook called all the same) routed
    to each replica in turn, and a handshake of the test's own with each; what failed."""

    def __init__(self, kube, replicas):
        self.kube, self.replicas = kube, replicas
        self.core = client.CoreV1Api(kube.api_client())
        self.made = 0
        self.failures: list[str] = []
        self.served: set[int] = set()

    def round(self) -> dict[int, int]:
        """One creation through, and one handshake with, every replica: their serials."""
        serials = {}
        for i, b in enumerate(self.replicas):
            self.kube.service_endpoints[SERVICE] = ("127.0.0.1", b.webhook.port)
            self.made += 1
            try:
                made = self.core.create_namespaced_pod("default", pod(f"p{self.made}"),
                                                       dry_run="All")
                if [g.name for g in made.spec.scheduling_gates or []] != ["fluxnode.io/admission"]:
                    self.failures.append(f"replica {i}: not gated: {made.spec}")
            except ApiException as exc:
                self.failures.append(f"replica {i}: {exc.status} {json.loads(exc.body)['message']}")
            cert = served(b.webhook.port)
            why = trusted(cert, config_bundle(self.kube))
            if why is not None:
                self.failures.append(f"replica {i}: certificate {cert.serial_number:x}: {why}")
            serials[i] = cert.serial_number
            self.served.add(cert.serial_number)
        return serials


@pytest.fixture
def replicas(kube, tmp_path, request):
    """Two standby replicas serving the webhook, the configuration installed and trusted;
    `request.param` (if any) are more BinderConfig fields for both."""
    settings = getattr(request, "param", {})
    client.AdmissionregistrationV1Api(kube.api_client()).create_mutating_webhook_configuration(
        yaml.safe_load(WEBHOOK_MANIFEST.read_text()))
    held_lease(kube)
    started, all_denials = [], []
    try:
        for name in ("a", "b"):
            b, denials = start(kube, [BINDER_MANIFEST], tmp_path / name, **settings)
            started.append(b)
            all_denials.append(denials)
        for b in started:
            wait_for(lambda b=b: readyz(b)[0] == 200, 30, what="binder ready")
        wait_for(lambda: secret_certs(kube) is not None and config_bundle(kube) == kube.get(
            "secrets", SECRET, "fluxnode")["data"]["ca-bundle.crt"], 30,
            what="the caBundle set by the binders")
        yield started
        assert all_denials == [[], []]
    finally:
        for b in started:
            b.stop()


def test_a_wiped_ca_bundle_is_restored_at_once(kube, replicas):
    calls = Calls(kube, replicas)
    calls.round()
    assert calls.failures == []
    wiped = [{"op": "remove", "path": f"/webhooks/{i}/clientConfig/caBundle"} for i in range(2)]
    client.AdmissionregistrationV1Api(kube.api_client()).patch_mutating_webhook_configuration(
        "fluxnode", wiped)
    assert config_bundle(kube) == ""
    secret_bundle = kube.get("secrets", SECRET, "fluxnode")["data"]["ca-bundle.crt"]
    wait_for(lambda: config_bundle(kube) == secret_bundle, 30,
             what="the caBundle put back (the replicas' timed check is 300 s away)")
    calls.round()
    assert calls.failures == []


def test_a_deleted_secret_is_made_again_and_no_call_is_refused_meanwhile(kube, replicas):
    calls = Calls(kube, replicas)
    before = calls.round()
    first = secret_certs(kube)
    assert calls.failures == [] and set(before.values()) == {first[1]}
    kube.delete("secrets", SECRET, "fluxnode")

    def both_serve_the_new_secret() -> bool:
        serials = calls.round()
        now = secret_certs(kube)
        return now is not None and now[0] != first[0] and set(serials.values()) == {now[1]}

    wait_for(both_serve_the_new_secret, 30, interval=0.05,
             what="a new Secret, served by both replicas (the timed check is 300 s away)")
    assert calls.failures == []


LIFETIMES = {"webhook_cert_lifetime": 6.0, "webhook_ca_lifetime": 12.0}


@pytest.mark.parametrize("replicas", [LIFETIMES], indirect=True)
def test_short_lived_certificates_rotate_while_the_api_server_calls_the_webhook(kube, replicas):
    """A 6 s serving certificate and a 12 s CA (--webhook-cert-lifetime, --webhook-ca-lifetime):
    the certificate is renewed at 4 s, the CA at 8 s, and the API server's calls through
    either replica never fail (nor the test's handshakes, verified at the real time)."""
    calls = Calls(kube, replicas)
    first = secret_certs(kube)
    certs_seen = {first}

    def rotated() -> bool:
        calls.round()
        now = secret_certs(kube)
        certs_seen.add(now)
        # a serving certificate renewed under the first CA (at 4 s), then the CA (at 8 s)
        return len({ca for ca, _ in certs_seen}) >= 2 and len(certs_seen) >= 3

    wait_for(rotated, 60, interval=0.05, what="a certificate renewed, then the CA")
    # the replicas load the pair the Secret holds on its watch event, a moment after it is
    # written: calls go on until the handshakes have met the rotations too (a fresh-clone CI
    # run under load saw the third pair in the Secret before either replica served it)
    wait_for(lambda: calls.round() is not None and len(calls.served) >= 3, 30, interval=0.05,
             what="the handshakes serving the rotated certificates")
    assert calls.failures == []
    assert len(calls.served) >= 3  # the handshakes saw the rotations, not one pair throughout
