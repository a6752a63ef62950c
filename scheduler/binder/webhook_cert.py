"""The webhook's certificates as data: a CA, a serving certificate it signed, their rotation.

The API server calls the webhook over HTTPS and trusts the ``caBundle`` of the
MutatingWebhookConfiguration, so fluxnode makes its own CA rather than needing
cert-manager (Kueue's internal certificate management is the model). `WebhookCerts` is the
set kept in one Secret; webhook_cert_keeper.py keeps that Secret, the configuration's
caBundle and the server in step.

- **Keys**: ECDSA P-256, made in milliseconds (an RSA key takes a replica's CPU for a
  visible moment), accepted by the API server's TLS client.
- **Lifetimes and rotation**: the CA lives `Lifetimes.ca` (5 years), the serving
  certificate `Lifetimes.cert` (1 year; both set by ``--webhook-ca-lifetime`` and
  ``--webhook-cert-lifetime``); each is renewed once two thirds of its lifetime has passed
  (counted from its issue, not from the backdated start), so a replica that cannot reach
  the API server for a third of a lifetime still serves a valid certificate. A serving
  certificate is renewed with the same CA (the caBundle does not change).
- **The overlap**: whenever a new CA is made (its rotation, or a Secret deleted or
  damaged), the CAs trusted before stay in the bundle (``ca-bundle.crt``) beside it, so a
  replica still serving a certificate of an older CA stays trusted until it reloads. An
  older CA leaves the bundle once no certificate it signed can still be valid: one serving
  certificate's lifetime after the current CA was issued (no replica signs with an old CA
  after that), or when it expires; at most `MAX_TRUSTED` CAs are kept.
- **Names**: the serving certificate names the Service (``NAME``, ``NAME.NAMESPACE``,
  ``NAME.NAMESPACE.svc`` and ``.svc.cluster.local``, the name the API server verifies) and
  any extra names given (an IP address becomes an IP SAN); a set whose certificate lacks a
  wanted name is renewed at once.
- Every time is `now`, passed in: rotation is tested with a clock, not with waiting.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = datetime.timedelta(days=5 * 365)
CERT_LIFETIME = datetime.timedelta(days=365)
RENEW_AT = 2 / 3  # of a certificate's lifetime
BACKDATE = datetime.timedelta(minutes=5)  # clocks of the API server and the node may differ
SECRET_KEYS = ("ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key")
MAX_TRUSTED = 4  # CAs in the bundle: the current one and up to three before it
MIN_LIFETIME = datetime.timedelta(seconds=3)  # shorter: renewed before a replica could reload


class CertDataError(ValueError):
    """A Secret's certificate data cannot be read (missing key, not PEM, key mismatch)."""


@dataclass(frozen=True)
class Lifetimes:
    """How long a CA and a serving certificate are valid; a serving certificate cannot
    outlive its CA (it is cut at the CA's end)."""

    ca: datetime.timedelta = CA_LIFETIME
    cert: datetime.timedelta = CERT_LIFETIME

    def __post_init__(self) -> None:
        if self.cert < MIN_LIFETIME:
            raise ValueError(f"serving certificate lifetime {self.cert.total_seconds():g} s "
                             f"is under {MIN_LIFETIME.total_seconds():g} s")
        if self.ca < self.cert:
            raise ValueError(f"CA lifetime {self.ca.total_seconds():g} s is shorter than the "
                             f"serving certificate's {self.cert.total_seconds():g} s")


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names a Service answers to inside the cluster."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False,
                         encipher_only=False, decipher_only=False)


def issued(cert: x509.Certificate) -> datetime.datetime:
    """When a certificate was made (its start is backdated by `BACKDATE`)."""
    return cert.not_valid_before_utc + BACKDATE


def renew_time(cert: x509.Certificate) -> datetime.datetime:
    """When two thirds of a certificate's lifetime, counted from its issue, have passed."""
    start = issued(cert)
    return start + (cert.not_valid_after_utc - start) * RENEW_AT


def _due(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return now >= renew_time(cert)


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def salvage_cas(data: dict[str, bytes], now: datetime.datetime) -> tuple[x509.Certificate, ...]:
    """The CA certificates still valid at `now` that a damaged Secret's ``ca-bundle.crt`` and
    ``ca.crt`` hold (whatever of them parses): replicas may be serving certificates they
    signed, so a fresh set keeps trusting them for the overlap."""
    found: list[x509.Certificate] = []
    for key in ("ca-bundle.crt", "ca.crt"):
        try:
            certs = x509.load_pem_x509_certificates(data.get(key) or b"")
        except ValueError:
            continue
        found += [c for c in certs if is_ca(c) and c.not_valid_after_utc > now
                  and c not in found]
    return tuple(found)


def new_ca(now: datetime.datetime, lifetime: datetime.timedelta = CA_LIFETIME
           ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(f"fluxnode-webhook-ca@{int(now.timestamp())}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def new_serving_cert(names: Sequence[str], ca: x509.Certificate,
                     ca_key: ec.EllipticCurvePrivateKey, now: datetime.datetime,
                     lifetime: datetime.timedelta = CERT_LIFETIME
                     ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0])).issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + lifetime, ca.not_valid_after_utc))
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


@dataclass(frozen=True)
class WebhookCerts:
    """A CA, the CAs to trust (the current one first), and a serving certificate."""

    ca: x509.Certificate
    ca_key: ec.EllipticCurvePrivateKey
    trusted: tuple[x509.Certificate, ...]
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def issue(cls, names: Sequence[str], now: datetime.datetime,
              lifetimes: Lifetimes = Lifetimes(),
              previous: Sequence[x509.Certificate] = ()) -> WebhookCerts:
        """A fresh CA and a serving certificate for `names`; the `previous` CAs (those a
        replica may still serve a certificate of) stay trusted for the overlap."""
        ca, ca_key = new_ca(now, lifetimes.ca)
        cert, key = new_serving_cert(names, ca, ca_key, now, lifetimes.cert)
        return cls(ca, ca_key, _kept(ca, previous, now, lifetimes), cert, key)

    # -- rotation -------------------------------------------------------------------

    def names(self) -> set[str]:
        san = self.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
            str(ip) for ip in san.get_values_for_type(x509.IPAddress)}

    def due(self, names: Sequence[str], now: datetime.datetime,
            lifetimes: Lifetimes = Lifetimes()) -> str | None:
        """Why this set must be renewed now, or None."""
        if _due(self.ca, now):
            return f"CA past {RENEW_AT:.0%} of its lifetime (expires {self.ca.not_valid_after_utc})"
        if _due(self.cert, now):
            return (f"serving certificate past {RENEW_AT:.0%} of its lifetime "
                    f"(expires {self.cert.not_valid_after_utc})")
        missing = set(names) - self.names()
        if missing:
            return f"serving certificate lacks {', '.join(sorted(missing))}"
        if _kept(self.ca, self.trusted, now, lifetimes) != self.trusted:
            return "the bundle holds a CA past its overlap"
        return None

    def next_due(self, lifetimes: Lifetimes = Lifetimes()) -> datetime.datetime:
        """The earliest time `due` can answer something other than None (names aside)."""
        times = [renew_time(self.ca), renew_time(self.cert)]
        older = [c for c in self.trusted if c != self.ca]
        if older:
            overlap_end = issued(self.ca) + lifetimes.cert
            times += [min(overlap_end, *(c.not_valid_after_utc for c in older))]
        return min(times)

    def renewed(self, names: Sequence[str], now: datetime.datetime,
                lifetimes: Lifetimes = Lifetimes()) -> WebhookCerts:
        """The next set: a new CA (the CAs trusted before still trusted for the overlap)
        when the CA is due, and always a new serving certificate."""
        if _due(self.ca, now):
            return WebhookCerts.issue(names, now, lifetimes, self.trusted)
        cert, key = new_serving_cert(names, self.ca, self.ca_key, now, lifetimes.cert)
        trusted = _kept(self.ca, self.trusted, now, lifetimes)
        return WebhookCerts(self.ca, self.ca_key, trusted, cert, key)

    # -- the Secret's data ----------------------------------------------------------

    @property
    def ca_bundle(self) -> bytes:
        """PEM of every CA to trust: what the caBundle of the configuration holds."""
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.trusted)

    @property
    def cert_chain(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def to_data(self) -> dict[str, bytes]:
        return {
            "ca.crt": self.ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": _pem_key(self.ca_key),
            "ca-bundle.crt": self.ca_bundle,
            "tls.crt": self.cert_chain,
            "tls.key": self.key_pem,
        }

    @classmethod
    def from_data(cls, data: dict[str, bytes]) -> WebhookCerts:
        """Read a Secret's data back; CertDataError names what is wrong."""
        missing = [k for k in SECRET_KEYS if not data.get(k)]
        if missing:
            raise CertDataError(f"missing {', '.join(missing)}")
        try:
            ca = x509.load_pem_x509_certificate(data["ca.crt"])
            cert = x509.load_pem_x509_certificate(data["tls.crt"])
            trusted = tuple(x509.load_pem_x509_certificates(data["ca-bundle.crt"]))
            ca_key = serialization.load_pem_private_key(data["ca.key"], None)
            key = serialization.load_pem_private_key(data["tls.key"], None)
        except ValueError as exc:
            raise CertDataError(f"unreadable certificate or key: {exc}") from None
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or not isinstance(
                key, ec.EllipticCurvePrivateKey):
            raise CertDataError("keys are not ECDSA keys")
        if ca_key.public_key() != ca.public_key() or key.public_key() != cert.public_key():
            raise CertDataError("a key does not match its certificate")
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            raise CertDataError("the serving certificate is not signed by ca.crt") from None
        if ca not in trusted:
            raise CertDataError("ca-bundle.crt does not hold ca.crt")
        return cls(ca, ca_key, trusted, cert, key)


def _kept(ca: x509.Certificate, previous: Sequence[x509.Certificate], now: datetime.datetime,
          lifetimes: Lifetimes) -> tuple[x509.Certificate, ...]:
    """The bundle for current CA `ca`: it first, then the `previous` CAs still in their
    overlap (valid, and within one serving certificate's lifetime of `ca`'s issue)."""
    if now >= issued(ca) + lifetimes.cert:
        return (ca,)
    older = [c for c in previous if c != ca and c.not_valid_after_utc > now]
    return (ca, *older[:MAX_TRUSTED - 1])
