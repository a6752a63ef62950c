"""How the node agent reaches the Kubernetes API, and which API failures are fatal.

In a pod the agent uses the in-cluster service account; elsewhere (tests, debugging)
a kubeconfig from ``--kubeconfig`` or ``$KUBECONFIG``. A 401/403 is a configuration
problem no retry fixes (missing RBAC, wrong token), so it becomes ``KubeAccessError``
and the agent exits non-zero with one clear line; the kubelet restarts it with backoff.
"""

from __future__ import annotations

import json
import os

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


class KubeAccessError(Exception):
    """The API refused us (401/403) or cannot be reached/configured at all."""


def load_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig``, else the in-cluster config, else ~/.kube/config."""
    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config()
    except (config.ConfigException, OSError, TypeError, ValueError) as exc:
        raise KubeAccessError(f"cannot load Kubernetes client configuration: {exc}") from None


def status_message(exc: ApiException) -> str:
    """The API server's own message from a Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{exc.status} {exc.reason}"


def is_denied(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status in (401, 403)


def denied(action: str, exc: ApiException) -> KubeAccessError:
    """A fatal error for a refused request, naming what we tried and what RBAC must allow."""
    return KubeAccessError(f"{action}: permission denied ({exc.status}): {status_message(exc)}; "
                           "check the fluxnode-agent ServiceAccount's RBAC (daemonset/rbac.yaml)")
