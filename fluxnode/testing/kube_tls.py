"""The API emulator's TLS: its own CA and a serving certificate for 127.0.0.1, made at start.

A real API server serves only HTTPS, and its clients send a bearer token only over TLS
(client-go's transport drops it on plain ``http://``, so kubectl against an HTTP server is
always ``Unauthorized``). The emulator does the same: a fresh CA per emulator (its
certificate goes into the kubeconfig's ``certificate-authority-data``, which both kubectl and
the Python client verify against), and a serving certificate signed by it for the IP
127.0.0.1 and the name localhost. P-256 keys: made in milliseconds, so every emulator has
its own and nothing is shared between tests or committed.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCerts:
    """Where the emulator's CA certificate and serving key pair were written."""

    ca_pem: bytes
    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_path, self.key_path)
        # HTTP/1.1 only: the server speaks no HTTP/2, and says so in ALPN as a real one
        # configured without it would
        context.set_alpn_protocols(["http/1.1"])
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_serving_certs(directory: Path, *, dns_names: tuple[str, ...] = ("localhost",),
                       ips: tuple[str, ...] = ("127.0.0.1",),
                       name: str = "apiserver") -> ServingCerts:
    """A CA and a certificate it signed for `ips` and `dns_names` (by default the API
    server's: 127.0.0.1/localhost; an admission webhook's test server asks for its Service's
    ``NAME.NAMESPACE.svc``), written to `directory` as ``ca.crt``, ``NAME.crt`` and
    ``NAME.key`` (the private key mode 0600)."""
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("fluxnode-emulator-ca"))
        .issuer_name(_name("fluxnode-emulator-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver" if name == "apiserver" else name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
                + [x509.DNSName(dns) for dns in dns_names]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    return ServingCerts(ca_pem, cert_path, key_path)
