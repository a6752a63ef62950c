"""The instance CURVE certificate, in the ZPL file format `flux keygen` writes.

All brokers of an instance share one keypair (flux-config-bootstrap(5)); whoever holds
the secret key can join the overlay, so the file is created owner-only (mode 0600 at
``open`` time, never loosened and re-tightened) and never silently overwritten.

File layout (ZeroMQ RFC 4 ZPL, as czmq's zcert_save / flux-core's cert_write)::

    #  ZeroMQ CURVE **Secret** Certificate
    #  DO NOT DISTRIBUTE

    metadata
        name = "cluster"
        keygen.fluxnode-version = "0.1.0"
        keygen.hostname = "node0"
        keygen.time = "2026-11-22T04:20:00"
        keygen.userid = "0"
        keygen.zmq-version = "4.3.5"
    curve
        public-key = "<40 Z85 characters>"
        secret-key = "<40 Z85 characters>"
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# libzmq's CURVE calls straight from pyzmq's compiled backend: a broker that has not loaded
# pyzmq's sugar (agent/broker/zmq_core.py, issue 32) does not load it for its certificate
from zmq.backend.cython._zmq import curve_keypair, curve_public, zmq_version_info

__all__ = ["Certificate", "CertificateError", "generate", "write", "load", "loads", "dumps"]

_Z85_CHARS = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.")
_VALUE_EXTRA = frozenset(".-:+=^!/*?&<>()[]{}@%$# \t_,~")


class CertificateError(ValueError):
    """A certificate that cannot be generated, written or read (message names the file)."""


@dataclass(frozen=True)
class Certificate:
    """A CURVE keypair with Z85-encoded keys (40 ASCII bytes each) and ZPL metadata."""

    public_key: bytes
    secret_key: bytes | None
    metadata: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str | None:
        return self.metadata.get("name")


def _check_key(key: bytes | str, what: str) -> bytes:
    raw = key.encode("ascii", "replace") if isinstance(key, str) else bytes(key)
    text = raw.decode("ascii", "replace")
    if len(raw) != 40:
        raise CertificateError(f"{what} must be 40 Z85 characters, got {len(raw)}")
    bad = next((c for c in text if c not in _Z85_CHARS), None)
    if bad is not None:
        raise CertificateError(f"{what} contains {bad!r}, which is not a Z85 character")
    return raw


def _check_pair(public_key: bytes, secret_key: bytes) -> None:
    if curve_public(secret_key) != public_key:
        raise CertificateError("public-key does not belong to secret-key")


def generate(name: str | None = None) -> Certificate:
    """A fresh keypair from libzmq, with flux-keygen-style metadata."""
    public_key, secret_key = curve_keypair()
    try:
        # Lazy: importlib.metadata costs ~30 ms, paid by every CLI command that reads a certificate.
        from importlib.metadata import version

        our_version = version("fluxnode")
    except Exception:  # not installed as a distribution (e.g. running from a checkout)
        our_version = "unknown"
    import socket  # here: a broker that only loads its certificate never imports it

    hostname = socket.gethostname()
    meta = {
        "name": name or hostname,
        "keygen.fluxnode-version": our_version,
        "keygen.hostname": hostname,
        "keygen.time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "keygen.userid": str(os.getuid()),
        "keygen.zmq-version": ".".join(map(str, zmq_version_info())),
    }
    return Certificate(public_key=public_key, secret_key=secret_key, metadata=meta)


def _check_meta(key: str, value: str) -> None:
    if not key or any(c not in _KEY_CHARS for c in key):
        raise CertificateError(
            f"metadata key {key!r} may only contain letters, digits, '-' and '.'"
        )
    bad = next(
        (c for c in value if not (c.isascii() and c.isalnum()) and c not in _VALUE_EXTRA), None
    )
    if bad is not None:
        raise CertificateError(
            f"metadata {key} value {value!r} contains {bad!r}, which ZPL cannot hold"
        )


def dumps(cert: Certificate) -> str:
    """The ZPL text of `cert` (secret certificates only: brokers need both keys)."""
    if cert.secret_key is None:
        raise CertificateError("cannot write a certificate without a secret key")
    public_key = _check_key(cert.public_key, "public-key")
    secret_key = _check_key(cert.secret_key, "secret-key")
    lines = ["#  ZeroMQ CURVE **Secret** Certificate", "#  DO NOT DISTRIBUTE", "", "metadata"]
    for key, value in cert.metadata.items():
        _check_meta(key, value)
        lines.append(f'    {key} = "{value}"')
    lines += [
        "curve",
        f'    public-key = "{public_key.decode()}"',
        f'    secret-key = "{secret_key.decode()}"',
        "",
    ]
    return "\n".join(lines)


def write(path: str | Path, cert: Certificate, *, force: bool = False) -> Path:
    """Write `cert` to `path` with mode 0600, creating parent directories (0700).

    Refuses to replace an existing file unless `force`; with `force` the new file is
    written beside it (also 0600) and renamed over it, so the old key is never
    left half-overwritten.
    """
    p = Path(path)
    text = dumps(cert).encode()
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CertificateError(
            f"{p}: cannot create directory {p.parent}: {exc.strerror or exc}"
        ) from None
    if p.is_dir():
        raise CertificateError(f"{p}: is a directory")
    if p.exists() and not force:
        raise CertificateError(f"{p}: already exists (use --force to replace it)")
    target = p.with_name(f".{p.name}.{os.getpid()}.tmp") if force else p
    try:
        fd = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600
        )
    except FileExistsError:
        raise CertificateError(f"{p}: already exists (use --force to replace it)") from None
    except OSError as exc:
        raise CertificateError(f"{p}: cannot create: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if target != p:
            os.replace(target, p)
    except OSError as exc:
        if target != p:
            target.unlink(missing_ok=True)
        raise CertificateError(f"{p}: cannot write: {exc.strerror or exc}") from None
    return p


def _parse_keyval(line: str, path: Path, lineno: int) -> tuple[str, str]:
    key, sep, rest = line.partition("=")
    key, rest = key.strip(), rest.strip()
    if not sep or not key or any(c not in _KEY_CHARS for c in key):
        raise CertificateError(f"{path}:{lineno}: expected 'name = \"value\"', got {line!r}")
    if len(rest) < 2 or rest[0] != '"' or rest[-1] != '"':
        raise CertificateError(f"{path}:{lineno}: value of {key} must be in double quotes")
    return key, rest[1:-1]


def loads(
    text: str, path: str | Path = "<certificate>", *, require_secret: bool = True
) -> Certificate:
    """Parse ZPL certificate text; `path` names the source in errors."""
    p = Path(path)
    section = None
    meta: dict[str, str] = {}
    keys: dict[str, bytes] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indented = raw[0] in " \t"
        if not indented:
            if stripped not in ("metadata", "curve"):
                raise CertificateError(
                    f"{p}:{lineno}: unknown section {stripped!r} (expected 'metadata' or 'curve')"
                )
            section = stripped
            continue
        if section is None:
            raise CertificateError(f"{p}:{lineno}: indented line outside a section")
        key, value = _parse_keyval(stripped, p, lineno)
        if section == "metadata":
            if key in meta:
                raise CertificateError(f"{p}:{lineno}: metadata {key} is set twice")
            meta[key] = value
        else:
            if key not in ("public-key", "secret-key"):
                raise CertificateError(
                    f"{p}:{lineno}: unknown curve key {key!r} (expected public-key or secret-key)"
                )
            try:
                keys[key] = _check_key(value, key)
            except CertificateError as exc:
                raise CertificateError(f"{p}:{lineno}: {exc}") from None
    if "public-key" not in keys:
        raise CertificateError(
            f"{p}: no curve public-key (is this a certificate from 'fluxnode keygen'?)"
        )
    secret = keys.get("secret-key")
    if secret is None and require_secret:
        raise CertificateError(f"{p}: no curve secret-key (brokers need the secret certificate)")
    if secret is not None:
        try:
            _check_pair(keys["public-key"], secret)
        except CertificateError as exc:
            raise CertificateError(f"{p}: {exc}") from None
    return Certificate(public_key=keys["public-key"], secret_key=secret, metadata=meta)


def load(path: str | Path, *, require_secret: bool = True) -> Certificate:
    """Read and validate a certificate file written by `write` or `flux keygen`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CertificateError(
            f"{p}: no such file (create one with 'fluxnode keygen {p}')"
        ) from None
    except IsADirectoryError:
        raise CertificateError(f"{p}: is a directory") from None
    except OSError as exc:
        raise CertificateError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CertificateError(f"{p}: not a ZPL text certificate (non-ASCII bytes)") from None
    return loads(text, p, require_secret=require_secret)

