"""The webhook certificate's keeper (scheduler/binder/webhook_cert_keeper.py) against the API
emulator, through the official client: the Secret created once by racing replicas, rotation
by a clock passed in (one replica rotates, the other adopts it), a damaged Secret replaced,
the files 0600, and the server serving what the Secret holds."""

from __future__ import annotations

import base64
import datetime
import socket
import ssl
import stat
import threading

import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from fluxnode.scheduler.binder.admission import Admission
from fluxnode.scheduler.binder.webhook_cert import CA_LIFETIME, CERT_LIFETIME, WebhookCerts
from fluxnode.scheduler.binder.webhook_cert_keeper import CertKeeper, CertTarget, target_names
from fluxnode.scheduler.binder.webhook_server import WebhookServer
from kubernetes import client
from support.paths import REPO
from support.webhook_server import WebhookServer as HoldingWebhook

SECRET = "fluxnode-webhook-cert"
WEBHOOK_MANIFEST = REPO / "daemonset" / "workloads" / "webhook.yaml"


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Replica:
    """One binder replica's webhook half: a server and its keeper, with its own client."""

    def __init__(self, kube, directory):
        self.api_client = kube.api_client()
        self.server = WebhookServer("127.0.0.1", 0, Admission()).start()
        names = target_names("fluxnode-webhook", "fluxnode", ["127.0.0.1"])
        self.keeper = CertKeeper(
            client.CoreV1Api(self.api_client), client.AdmissionregistrationV1Api(self.api_client),
            CertTarget("fluxnode", SECRET, "fluxnode", names, directory), self.server.use)

    def served_serial(self) -> int:
        # which certificate a new connection gets (not verified: a clock in the future
        # made it, so OpenSSL's clock would call it not yet valid)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as raw:
            with context.wrap_socket(raw) as tls:
                der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number

    def close(self) -> None:
        self.server.stop()
        self.api_client.close()


@pytest.fixture
def replicas(kube, tmp_path):
    made = [Replica(kube, tmp_path / f"r{i}") for i in range(2)]
    yield made
    for r in made:
        r.close()


def stored(kube) -> WebhookCerts:
    secret = kube.get("secrets", SECRET, "fluxnode")
    assert secret["type"] == "kubernetes.io/tls"
    return WebhookCerts.from_data({k: base64.b64decode(v) for k, v in secret["data"].items()})


def _hold_secret_creates(tmp_path, count: int) -> tuple[HoldingWebhook, threading.Barrier]:
    """A mutating webhook of the test's own on Secret creations that answers none until
    `count` have arrived: every racing replica has read "no Secret" and sent its create before
    any create is stored, whatever the threads' timing (the race made certain, not likely)."""
    arrived = threading.Barrier(count, timeout=60)

    def hold(request: dict) -> dict:
        try:
            arrived.wait()
        except threading.BrokenBarrierError:
            pass  # fewer creates than replicas: the count assertion says so
        return {"allowed": True}

    return HoldingWebhook(tmp_path / "hold", "hold-secrets", "fluxnode", hold), arrived


def test_racing_replicas_create_one_secret_and_serve_it(kube, replicas, tmp_path):
    start = threading.Barrier(len(replicas))
    results: dict[int, WebhookCerts] = {}
    hook, arrived = _hold_secret_creates(tmp_path, len(replicas))

    def run(i: int) -> None:
        start.wait()
        results[i] = replicas[i].keeper.sync(now())

    with hook:
        kube.service_endpoints[hook.service] = hook.address
        client.AdmissionregistrationV1Api(kube.api_client()).create_mutating_webhook_configuration({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "hold-secrets"},
            "webhooks": [{
                "name": "hold-secrets.test.io", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 30,
                "clientConfig": hook.service_config(),
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["secrets"]}]}]})
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(replicas))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(hook.reviews) == 2 and not arrived.broken  # both creates reached admission
    secret = stored(kube)
    assert {r.cert.serial_number for r in results.values()} == {secret.cert.serial_number}
    assert kube.count_requests("create", "secrets") == 2  # both tried; one got 409
    for r in replicas:
        assert r.server.serving and r.served_serial() == secret.cert.serial_number
        for path in (r.keeper.cert_path, r.keeper.key_path):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert r.keeper.key_path.read_bytes() == secret.key_pem


def test_one_replica_rotates_at_two_thirds_and_the_other_adopts_it(kube, replicas):
    a, b = replicas
    t0 = now()
    first = a.keeper.sync(t0)
    assert b.keeper.sync(t0).cert.serial_number == first.cert.serial_number
    version = kube.get("secrets", SECRET, "fluxnode")["metadata"]["resourceVersion"]
    not_due = a.keeper.sync(t0 + CERT_LIFETIME * 0.6)
    assert not_due.cert.serial_number == first.cert.serial_number
    assert kube.get("secrets", SECRET, "fluxnode")["metadata"]["resourceVersion"] == version
    later = t0 + CERT_LIFETIME * 0.7
    rotated = a.keeper.sync(later)
    assert rotated.cert.serial_number != first.cert.serial_number
    assert rotated.ca == first.ca  # the caBundle the API server holds stays right
    assert stored(kube).cert.serial_number == rotated.cert.serial_number
    version = kube.get("secrets", SECRET, "fluxnode")["metadata"]["resourceVersion"]
    assert b.keeper.sync(later).cert.serial_number == rotated.cert.serial_number
    assert kube.get("secrets", SECRET, "fluxnode")["metadata"]["resourceVersion"] == version
    assert a.served_serial() == b.served_serial() == rotated.cert.serial_number


def test_a_damaged_secret_is_replaced(kube, replicas):
    a, _ = replicas
    first = a.keeper.sync(now())
    kube.patch("secrets", SECRET, {"data": {"tls.key": base64.b64encode(b"junk").decode()}},
               "fluxnode")
    again = a.keeper.sync(now())
    assert again.cert.serial_number != first.cert.serial_number
    assert stored(kube).cert.serial_number == again.cert.serial_number
    assert a.served_serial() == again.cert.serial_number


def test_the_ca_bundle_of_the_webhook_configuration_is_kept(kube, replicas):
    a, b = replicas
    a.keeper.sync(now())
    assert a.keeper.ca_bundle_patched is False  # not installed yet: logged, retried, serving
    assert a.server.serving
    # the configuration as daemonset/workloads/ installs it (no caBundle: the binder's to set)
    config = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
    assert all("caBundle" not in h["clientConfig"] for h in config["webhooks"])
    admission = client.AdmissionregistrationV1Api(a.api_client)
    admission.create_mutating_webhook_configuration(config)
    certs = a.keeper.sync(now())
    assert a.keeper.ca_bundle_patched is True
    stored_config = kube.get("mutatingwebhookconfigurations.admissionregistration.k8s.io",
                             "fluxnode")
    bundle = base64.b64decode(kube.get("secrets", SECRET, "fluxnode")["data"]["ca-bundle.crt"])
    assert bundle == certs.ca_bundle
    assert [base64.b64decode(h["clientConfig"]["caBundle"]) for h in stored_config["webhooks"]] \
        == [bundle] * len(config["webhooks"])
    # a second replica finds it current and writes nothing
    version = stored_config["metadata"]["resourceVersion"]
    b.keeper.sync(now())
    assert b.keeper.ca_bundle_patched is True
    assert kube.get("mutatingwebhookconfigurations.admissionregistration.k8s.io",
                    "fluxnode")["metadata"]["resourceVersion"] == version


# -- the overlap: replicas still serving an older CA's certificate stay trusted ---------------

CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"


def config_bundle(kube) -> list[x509.Certificate]:
    """The CAs the API server trusts now (the caBundle of the configuration's webhooks)."""
    hooks = kube.get(CONFIG, "fluxnode")["webhooks"]
    bundles = {h["clientConfig"].get("caBundle", "") for h in hooks}
    assert len(bundles) == 1, "the webhooks' caBundles differ"
    pem = base64.b64decode(bundles.pop())
    return x509.load_pem_x509_certificates(pem) if pem else []


def trusted_by(bundle: list[x509.Certificate], cert: x509.Certificate) -> bool:
    """Is `cert` signed by one of the bundle's CAs (cryptography's signature check)?"""
    for ca in bundle:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, InvalidSignature):
            continue
    return False


def served_cert(replica: Replica) -> x509.Certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", replica.server.port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


@pytest.fixture
def installed(kube):
    client.AdmissionregistrationV1Api(kube.api_client()).create_mutating_webhook_configuration(
        yaml.safe_load(WEBHOOK_MANIFEST.read_text()))


@pytest.mark.parametrize("damage", ["deleted", "key replaced by junk"])
def test_a_new_ca_after_the_secret_is_lost_still_trusts_the_replica_not_yet_reloaded(
        kube, replicas, installed, damage):
    """Replica a notices first and makes a new CA; replica b still serves the old CA's
    certificate until it reloads: the caBundle a writes must still trust it."""
    a, b = replicas
    t0 = now()
    first = a.keeper.sync(t0)
    b.keeper.sync(t0)
    if damage == "deleted":
        kube.delete("secrets", SECRET, "fluxnode")
    else:
        kube.patch("secrets", SECRET, {"data": {"tls.key": base64.b64encode(b"junk").decode()}},
                   "fluxnode")
    fresh = a.keeper.sync(t0)
    assert fresh.ca != first.ca  # a new CA, in the Secret and first in the bundle
    assert stored(kube).ca == fresh.ca
    bundle = config_bundle(kube)
    assert bundle[0] == fresh.ca
    assert trusted_by(bundle, served_cert(a))
    assert served_cert(b).serial_number == first.cert.serial_number  # not reloaded yet
    assert trusted_by(bundle, served_cert(b))
    # and once b reloads, both serve the new CA's certificate
    b.keeper.sync(t0)
    assert served_cert(b).serial_number == fresh.cert.serial_number


def test_a_replica_that_starts_against_a_damaged_secret_keeps_its_cas_trusted(kube, tmp_path,
                                                                             installed):
    """No set in memory to carry the old CA over (a restarted replica): the CAs the damaged
    Secret still shows are kept."""
    a = Replica(kube, tmp_path / "a")
    try:
        first = a.keeper.sync(now())
        kube.patch("secrets", SECRET, {"data": {"ca.key": base64.b64encode(b"junk").decode()}},
                   "fluxnode")
        late = Replica(kube, tmp_path / "late")
        try:
            fresh = late.keeper.sync(now())
        finally:
            late.close()
        assert fresh.ca != first.ca
        assert trusted_by(config_bundle(kube), served_cert(a))  # a, not reloaded yet
    finally:
        a.close()


def test_a_new_ca_is_in_the_ca_bundle_before_its_certificate_is_served(kube, tmp_path, installed):
    """At the moment the server is handed a new pair, the API server already trusts it."""
    checked: list[bool] = []
    replica = Replica(kube, tmp_path / "r")

    def use(cert_path, key_path) -> None:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        checked.append(trusted_by(config_bundle(kube), cert))
        replica.server.use(cert_path, key_path)

    replica.keeper.use = use
    try:
        t0 = now()
        first = replica.keeper.sync(t0)
        replica.keeper.sync(t0 + CA_LIFETIME * 0.6)  # the serving certificate renewed
        rotated = replica.keeper.sync(t0 + CA_LIFETIME * 0.7)  # the CA renewed
        assert rotated.ca != first.ca
        assert checked == [True, True, True]
        assert [c.serial_number for c in config_bundle(kube)] == [
            rotated.ca.serial_number, first.ca.serial_number]  # the old CA kept meanwhile
    finally:
        replica.close()
