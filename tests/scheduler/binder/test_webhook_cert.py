"""The webhook's CA and serving certificate (scheduler/binder/webhook_cert.py) over time.

Time is a clock passed in, never waited for. Whether a client trusts a certificate at a
given time is asked of cryptography's own X.509 path validator (the WebPKI rules a TLS
client applies: names, validity, issuer, key usage), not of the code under test.
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from fluxnode.scheduler.binder.webhook_cert import (
    CA_LIFETIME,
    CERT_LIFETIME,
    CertDataError,
    WebhookCerts,
    service_names,
)

NAMES = service_names("fluxnode-webhook", "fluxnode")
T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)


def trusted_at(bundle: bytes, certs: WebhookCerts, when: datetime.datetime,
               name: str = "fluxnode-webhook.fluxnode.svc") -> bool:
    """Would a client holding `bundle` (the caBundle) accept `certs`' serving certificate
    for `name` at `when`?"""
    store = Store(x509.load_pem_x509_certificates(bundle))
    verifier = PolicyBuilder().store(store).time(when).build_server_verifier(x509.DNSName(name))
    try:
        verifier.verify(certs.cert, [])
        return True
    except VerificationError:
        return False


def test_issued_certificate_is_trusted_for_every_service_name():
    certs = WebhookCerts.issue(NAMES, T0)
    for name in NAMES:
        assert trusted_at(certs.ca_bundle, certs, T0, name)
    assert not trusted_at(certs.ca_bundle, certs, T0, "other.fluxnode.svc")
    assert certs.due(NAMES, T0) is None


def test_serving_certificate_renewed_at_two_thirds_with_the_same_ca():
    certs = WebhookCerts.issue(NAMES, T0)
    assert certs.due(NAMES, T0 + CERT_LIFETIME * 0.6) is None
    later = T0 + CERT_LIFETIME * 0.7
    assert "serving certificate" in certs.due(NAMES, later)
    renewed = certs.renewed(NAMES, later)
    assert renewed.cert.serial_number != certs.cert.serial_number
    assert renewed.ca == certs.ca and renewed.ca_bundle == certs.ca_bundle
    # the caBundle the API server already holds trusts the new certificate...
    assert trusted_at(certs.ca_bundle, renewed, later)
    # ...and the old one is still valid when it is replaced: no replica serves an expired one
    assert trusted_at(certs.ca_bundle, certs, later)
    assert not trusted_at(certs.ca_bundle, certs, T0 + CERT_LIFETIME + datetime.timedelta(1))


def test_ca_renewed_at_two_thirds_keeps_the_old_ca_trusted_meanwhile():
    certs = WebhookCerts.issue(NAMES, T0)
    when = T0 + CA_LIFETIME * 0.7
    # (the serving certificate was renewed on the way; renew it as a replica would have)
    step = certs.renewed(NAMES, T0 + CA_LIFETIME * 0.6)
    assert step.ca == certs.ca
    assert "CA" in step.due(NAMES, when)
    renewed = step.renewed(NAMES, when)
    assert renewed.ca != step.ca
    # the new bundle trusts both a replica that already serves the new certificate and
    # one still serving the old CA's, until that one reloads
    assert trusted_at(renewed.ca_bundle, renewed, when)
    assert trusted_at(renewed.ca_bundle, step, when)
    # once the old CA has expired it leaves the bundle at the next renewal
    much_later = T0 + CA_LIFETIME + datetime.timedelta(days=1)
    assert len(renewed.renewed(NAMES, much_later).trusted) == 1


def test_a_certificate_lacking_a_wanted_name_is_due_at_once():
    certs = WebhookCerts.issue(NAMES, T0)
    wanted = [*NAMES, "127.0.0.1"]
    assert "127.0.0.1" in certs.due(wanted, T0)
    renewed = certs.renewed(wanted, T0)
    assert renewed.due(wanted, T0) is None
    assert "127.0.0.1" in renewed.names()


def test_secret_data_round_trips():
    certs = WebhookCerts.issue(NAMES, T0)
    back = WebhookCerts.from_data(certs.to_data())
    assert back.to_data() == certs.to_data()


def test_damaged_secret_data_is_named():
    certs = WebhookCerts.issue(NAMES, T0)
    other = WebhookCerts.issue(NAMES, T0)
    data = certs.to_data()
    with pytest.raises(CertDataError, match="missing tls.key"):
        WebhookCerts.from_data({k: v for k, v in data.items() if k != "tls.key"})
    with pytest.raises(CertDataError, match="unreadable"):
        WebhookCerts.from_data({**data, "tls.crt": b"-----BEGIN CERTIFICATE-----\nxx\n"})
    with pytest.raises(CertDataError, match="does not match"):
        WebhookCerts.from_data({**data, "tls.key": other.to_data()["tls.key"]})
    with pytest.raises(CertDataError, match="not signed by ca.crt"):
        WebhookCerts.from_data({**data, "tls.crt": other.to_data()["tls.crt"],
                                "tls.key": other.to_data()["tls.key"]})
