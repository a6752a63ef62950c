"""The cluster's one CURVE certificate, kept in a Kubernetes Secret.

All brokers share one keypair (flux-config-bootstrap(5)). The first agent to find the
Secret missing generates a keypair and creates it; when several agents race, the API
server accepts exactly one create and the others get 409 and read the winner's. The
key never enters the image or the repository; on the node it is written mode 0600.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from fluxnode.agent.kube.api_error import (
    KubeAccessError,
    api_errors,
    denied,
    is_denied,
    status_message,
)
from fluxnode.broker_conf import certificate

log = logging.getLogger("fluxnode.agent.secret")

DATA_KEY = "curve.cert"


class SecretError(Exception):
    """The Secret exists but does not hold a usable certificate."""


def _decode(secret: dict, where: str) -> certificate.Certificate:
    raw = (secret.get("data") or {}).get(DATA_KEY)
    if not raw:
        raise SecretError(f"{where}: has no {DATA_KEY!r} key")
    try:
        text = base64.b64decode(raw).decode()
        return certificate.loads(text, f"{where}[{DATA_KEY}]")
    except (ValueError, certificate.CertificateError) as exc:
        raise SecretError(f"{where}[{DATA_KEY}]: {exc}") from None


def ensure_curve_secret(
    api: Any, namespace: str, name: str
) -> certificate.Certificate:
    """Read the certificate Secret, creating it first if it does not exist (create-if-absent)."""
    where = f"Secret {namespace}/{name}"
    for _ in range(5):
        try:
            resp = api.read_namespaced_secret(name, namespace, _preload_content=False)
            return _decode(json.loads(resp.data), where)
        except api_errors() as exc:
            if is_denied(exc):
                raise denied(f"cannot read {where}", exc) from None
            if exc.status != 404:
                raise KubeAccessError(f"cannot read {where}: {status_message(exc)}") from None
        cert = certificate.generate(name="fluxnode")
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/name": "fluxnode",
                    "app.kubernetes.io/component": "curve-cert",
                },
            },
            "data": {DATA_KEY: base64.b64encode(certificate.dumps(cert).encode()).decode()},
        }
        try:
            api.create_namespaced_secret(namespace, body, _preload_content=False)
            log.info("created %s with a new CURVE certificate", where)
            return cert
        except api_errors() as exc:
            if exc.status == 409:
                continue  # another agent won the race: read theirs
            if is_denied(exc):
                raise denied(f"cannot create {where}", exc) from None
            raise KubeAccessError(f"cannot create {where}: {status_message(exc)}") from None
    raise KubeAccessError(f"{where}: kept disappearing between create and read")
