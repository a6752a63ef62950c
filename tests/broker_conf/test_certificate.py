"""CURVE certificates: generation, ZPL round trip, mode 0600, refusal to overwrite, CLI."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import zmq
from fluxnode.broker_conf import certificate
from fluxnode.broker_conf.certificate import CertificateError


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_generate_write_load_round_trip(tmp_path):
    cert = certificate.generate(name="cluster0")
    path = certificate.write(tmp_path / "sub" / "curve.cert", cert)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    loaded = certificate.load(path)
    assert loaded == cert
    assert loaded.metadata == cert.metadata and loaded.name == "cluster0"
    assert len(loaded.public_key) == 40 and zmq.curve_public(loaded.secret_key) == loaded.public_key
    text = path.read_text()
    assert text.startswith("#  ZeroMQ CURVE **Secret** Certificate\n")
    for line in (
        "metadata\n",
        '    name = "cluster0"\n',
        "curve\n",
        f'    public-key = "{cert.public_key.decode()}"\n',
        f'    secret-key = "{cert.secret_key.decode()}"\n',
    ):
        assert line in text
    assert "keygen.zmq-version" in loaded.metadata and "keygen.hostname" in loaded.metadata


def test_keys_work_for_zmq_curve(tmp_path):
    """A loaded certificate secures a real CURVE connection (server and client share it, like
    brokers)."""
    cert = certificate.load(certificate.write(tmp_path / "c", certificate.generate()))
    ctx = zmq.Context()
    try:
        server = ctx.socket(zmq.ROUTER)
        server.curve_server = True
        server.curve_publickey, server.curve_secretkey = cert.public_key, cert.secret_key
        port = server.bind_to_random_port("tcp://127.0.0.1")
        client = ctx.socket(zmq.DEALER)
        client.curve_serverkey = cert.public_key
        client.curve_publickey, client.curve_secretkey = cert.public_key, cert.secret_key
        client.connect(f"tcp://127.0.0.1:{port}")
        client.send(b"hello")
        assert server.poll(5000) and server.recv_multipart()[-1] == b"hello"
    finally:
        ctx.destroy(linger=0)


def test_refuses_to_overwrite_without_force(tmp_path):
    path = certificate.write(tmp_path / "curve.cert", certificate.generate())
    before = path.read_text()
    with pytest.raises(CertificateError, match="already exists"):
        certificate.write(path, certificate.generate())
    assert path.read_text() == before
    certificate.write(path, certificate.generate(), force=True)
    assert path.read_text() != before and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["curve.cert"]


def test_mode_is_0600_even_with_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        path = certificate.write(tmp_path / "c", certificate.generate())
    finally:
        os.umask(old)
    assert mode(path) == 0o600


def test_reads_czmq_style_certificate(tmp_path):
    """Older flux keygen (czmq zcert_save) output with its banner and no metadata."""
    pub, sec = zmq.curve_keypair()
    path = tmp_path / "old.cert"
    path.write_text(
        "#   ****  Generated on 2015-02-16 01:23:56 by CZMQ  ****\n"
        "#   ZeroMQ CURVE **Secret** Certificate\n"
        "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n"
        f"metadata\ncurve\n    public-key = \"{pub.decode()}\"\n    secret-key = "
        f"\"{sec.decode()}\"\n"
    )
    cert = certificate.load(path)
    assert cert.public_key == pub and cert.secret_key == sec and cert.metadata == {}


def good_text() -> tuple[str, bytes, bytes]:
    pub, sec = zmq.curve_keypair()
    return (
        f'metadata\n    name = "x"\ncurve\n    public-key = "{pub.decode()}"\n    secret-key = '
        f'"{sec.decode()}"\n',
        pub,
        sec,
    )


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (
            lambda t, p, s: t.replace(s.decode(), s.decode()[:-1]),
            ":5: secret-key must be 40 Z85 characters, got 39",
        ),
        (lambda t, p, s: t.replace(s.decode(), "~" + s.decode()[1:]), "is not a Z85 character"),
        (
            lambda t, p, s: t.replace(p.decode(), zmq.curve_keypair()[0].decode()),
            "public-key does not belong to secret-key",
        ),
        (lambda t, p, s: t.replace("    secret-key", "#"), "no curve secret-key"),
        (lambda t, p, s: t.replace("    public-key", "#"), "no curve public-key"),
        (lambda t, p, s: t.replace("curve\n", "kurve\n"), ":3: unknown section 'kurve'"),
        (
            lambda t, p, s: t.replace('name = "x"', "name = x"),
            ":2: value of name must be in double quotes",
        ),
        (lambda t, p, s: t.replace('name = "x"', 'name "x"'), ":2: expected 'name = \"value\"'"),
        (lambda t, p, s: "    " + t, ":1: indented line outside a section"),
        (lambda t, p, s: t + '    other-key = "1"\n', "unknown curve key 'other-key'"),
    ],
)
def test_bad_certificates_name_file_and_problem(tmp_path, mutate, fragment):
    text, pub, sec = good_text()
    path = tmp_path / "bad.cert"
    path.write_text(mutate(text, pub, sec))
    with pytest.raises(CertificateError) as exc:
        certificate.load(path)
    assert str(exc.value).startswith(str(path))
    assert fragment in str(exc.value)


def test_public_only_certificate(tmp_path):
    text, pub, _ = good_text()
    path = tmp_path / "pub.cert"
    path.write_text(text.split("    secret-key")[0])
    cert = certificate.load(path, require_secret=False)
    assert cert.public_key == pub and cert.secret_key is None
    with pytest.raises(CertificateError, match="without a secret key"):
        certificate.write(tmp_path / "x", cert)


def test_load_missing_and_binary(tmp_path):
    with pytest.raises(CertificateError, match="no such file"):
        certificate.load(tmp_path / "nope")
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(CertificateError, match="non-ASCII"):
        certificate.load(tmp_path / "bin")
    with pytest.raises(CertificateError, match="is a directory"):
        certificate.load(tmp_path)


def test_metadata_is_validated_before_writing(tmp_path):
    cert = certificate.generate(name='bad"name')
    with pytest.raises(CertificateError, match="ZPL cannot hold"):
        certificate.write(tmp_path / "c", cert)
    assert not (tmp_path / "c").exists()


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fluxnode", *args], capture_output=True, text=True, timeout=60
    )


def test_keygen_cli(tmp_path):
    path = tmp_path / "etc" / "curve.cert"
    r = run_cli("keygen", "--name", "mycluster", str(path))
    assert r.returncode == 0, r.stderr
    assert mode(path) == 0o600 and certificate.load(path).name == "mycluster"
    r = run_cli("keygen", str(path))
    assert r.returncode == 1
    assert (
        r.stderr.strip() == f"fluxnode-keygen: {path}: already exists (use --force to replace it)"
    )
    assert "Traceback" not in r.stderr
    r = run_cli("keygen", "--force", str(path))
    assert r.returncode == 0 and certificate.load(path).name != "mycluster"
