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
    MAX_TRUSTED,
    CertDataError,
    Lifetimes,
    WebhookCerts,
    salvage_cas,
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


SECOND = datetime.timedelta(seconds=1)


def test_short_lifetimes_renew_at_two_thirds_of_the_time_since_issue():
    """Certificates start 5 minutes back (clock skew); a 6 s certificate is still renewed 4 s
    after its issue, not at once."""
    short = Lifetimes(ca=12 * SECOND, cert=6 * SECOND)
    certs = WebhookCerts.issue(NAMES, T0, short)
    assert certs.cert.not_valid_after_utc == T0 + 6 * SECOND
    assert certs.ca.not_valid_after_utc == T0 + 12 * SECOND
    assert certs.due(NAMES, T0 + 3.9 * SECOND, short) is None
    assert "serving certificate" in certs.due(NAMES, T0 + 4 * SECOND, short)
    assert certs.next_due(short) == T0 + 4 * SECOND
    assert trusted_at(certs.ca_bundle, certs, T0 + 5 * SECOND)
    assert not trusted_at(certs.ca_bundle, certs, T0 + 7 * SECOND)


@pytest.mark.parametrize(("ca", "cert", "message"), [
    (10, 2, "serving certificate lifetime 2 s is under 3 s"),
    (5, 6, "CA lifetime 5 s is shorter than the serving certificate's 6 s"),
])
def test_lifetimes_that_cannot_work_are_refused(ca, cert, message):
    with pytest.raises(ValueError, match=message):
        Lifetimes(ca=ca * SECOND, cert=cert * SECOND)


def test_an_older_ca_stays_trusted_for_one_certificate_lifetime_after_a_new_one():
    short = Lifetimes(ca=12 * SECOND, cert=6 * SECOND)
    old = WebhookCerts.issue(NAMES, T0, short)
    when = T0 + 2 * SECOND  # e.g. the Secret deleted: a fresh set made, the old CA known
    fresh = WebhookCerts.issue(NAMES, when, short, old.trusted)
    assert fresh.trusted == (fresh.ca, old.ca)
    assert trusted_at(fresh.ca_bundle, old, when) and trusted_at(fresh.ca_bundle, fresh, when)
    assert fresh.next_due(short) == T0 + 6 * SECOND  # its serving certificate's renewal
    assert fresh.due(NAMES, T0 + 5 * SECOND, short) is None
    step = fresh.renewed(NAMES, T0 + 6 * SECOND, short)
    assert step.trusted == (fresh.ca, old.ca)
    # every certificate the old CA signed has expired 6 s after the new CA: it is due to leave
    assert step.next_due(short) == T0 + 8 * SECOND
    assert step.due(NAMES, T0 + 7.9 * SECOND, short) is None
    assert not trusted_at(step.ca_bundle, old, T0 + 8 * SECOND)  # (expired: nothing lost)
    assert step.due(NAMES, T0 + 8 * SECOND, short) == "the bundle holds a CA past its overlap"
    assert step.renewed(NAMES, T0 + 8 * SECOND, short).trusted == (fresh.ca,)


def test_the_overlap_ends_at_the_new_cas_issue_plus_a_certificate_lifetime():
    old = WebhookCerts.issue(NAMES, T0)
    when = T0 + datetime.timedelta(days=10)
    fresh = WebhookCerts.issue(NAMES, when, Lifetimes(), old.trusted)
    assert fresh.next_due() == when + CERT_LIFETIME * (2 / 3)  # the serving certificate first
    assert fresh.due(NAMES, when + CERT_LIFETIME - SECOND) is not None  # (renewed meanwhile)
    step = fresh.renewed(NAMES, when + CERT_LIFETIME * 0.7)
    assert step.trusted == (fresh.ca, old.ca)
    assert step.next_due() == when + CERT_LIFETIME
    assert step.due(NAMES, when + CERT_LIFETIME) == "the bundle holds a CA past its overlap"


def test_the_bundle_keeps_at_most_max_trusted_cas():
    sets = [WebhookCerts.issue(NAMES, T0)]
    for i in range(1, MAX_TRUSTED + 2):  # the Secret lost again and again
        sets.append(WebhookCerts.issue(NAMES, T0 + i * SECOND, Lifetimes(), sets[-1].trusted))
    last = sets[-1]
    assert len(last.trusted) == MAX_TRUSTED
    assert last.trusted == tuple(s.ca for s in reversed(sets[-MAX_TRUSTED:]))


def test_cas_are_salvaged_from_damaged_secret_data():
    certs = WebhookCerts.issue(NAMES, T0)
    other = WebhookCerts.issue(NAMES, T0)
    data = {**certs.to_data(), "tls.key": b"junk"}
    assert salvage_cas(data, T0) == (certs.ca,)
    data = {"ca-bundle.crt": b"junk", "ca.crt": other.to_data()["ca.crt"] + certs.cert_chain}
    assert salvage_cas(data, T0) == (other.ca,)  # a serving certificate is not a CA
    assert salvage_cas(certs.to_data(), T0 + CA_LIFETIME + SECOND) == ()  # expired
