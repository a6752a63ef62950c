"""The Kubernetes API's refusals, whichever client made the call.

The node agent talks to the API through its own small client (rest.py), which raises
`ApiError`; the binder and the tests use the official client, which raises
``kubernetes.client.exceptions.ApiException``. Code shared by both (the informer, the rank
map, the Secret) catches `api_errors()`: the official class is only in that tuple once its
module is loaded, so the agent never imports the official client (about 20 MiB of modules,
issue 32) just to name an exception it cannot receive. Both carry ``status``, ``reason``
and ``body``.

A 401/403 is a configuration problem no retry fixes (missing RBAC, wrong token), so it
becomes ``KubeAccessError`` and the daemon exits non-zero with one clear line; the kubelet
restarts it with backoff.
"""

from __future__ import annotations

import json
import sys


class ApiError(Exception):
    """An HTTP error answer of the API server, as the agent's own client reports it."""

    def __init__(self, status: int, reason: str = "", body: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(f"({status}) Reason: {reason}")
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers or {}


def api_errors() -> tuple[type[Exception], ...]:
    """What an API call may raise for an HTTP error answer (for ``except api_errors():``)."""
    official = sys.modules.get("kubernetes.client.exceptions")
    return (ApiError,) if official is None else (ApiError, official.ApiException)


class KubeAccessError(Exception):
    """The API refused us (401/403) or cannot be reached/configured at all."""


class KubeConfigError(KubeAccessError):
    """No usable client configuration (kubeconfig or in-cluster service account)."""

    def __init__(self, reason: str):
        super().__init__(f"cannot load Kubernetes client configuration: {reason}")
        self.reason = reason  # what the configuration loader said


def status_message(exc: Exception) -> str:
    """The API server's own message from a Status body, else the HTTP reason."""
    try:
        body = json.loads(getattr(exc, "body", None) or "{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', exc)}"


def is_denied(exc: BaseException) -> bool:
    return isinstance(exc, api_errors()) and exc.status in (401, 403)


def denied(action: str, exc: Exception) -> KubeAccessError:
    """A fatal error for a refused request, naming what we tried and what RBAC must allow."""
    return KubeAccessError(f"{action}: permission denied ({getattr(exc, 'status', '?')}): "
                           f"{status_message(exc)}; "
                           "check the fluxnode-agent ServiceAccount's RBAC (daemonset/rbac.yaml)")
