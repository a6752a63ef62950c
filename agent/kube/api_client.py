"""How the node agent and the binder reach the Kubernetes API, and which API failures are fatal.

One order of configuration sources for both daemons: an explicit kubeconfig
(``--kubeconfig``, which both commands also read from ``$KUBECONFIG``) wins, as it
is what the operator asked for; else, in a pod (``KUBERNETES_SERVICE_HOST`` set),
the in-cluster service account, the identity the manifests' least-privilege RBAC
is written for, even if the image happens to carry a ~/.kube/config; else
kubectl's default (``$KUBECONFIG``, then ~/.kube/config) for debugging on a
workstation. Each call builds its own client configuration, never the library's
process-wide default, so several clients (tests) do not share one by accident.

A 401/403 is a configuration problem no retry fixes (missing RBAC, wrong token), so
it becomes ``KubeAccessError`` and the daemon exits non-zero with one clear line;
the kubelet restarts it with backoff.
"""

from __future__ import annotations

import json
import os

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


class KubeAccessError(Exception):
    """The API refused us (401/403) or cannot be reached/configured at all."""


class KubeConfigError(KubeAccessError):
    """No usable client configuration (kubeconfig or in-cluster service account)."""

    def __init__(self, reason: str):
        super().__init__(f"cannot load Kubernetes client configuration: {reason}")
        self.reason = reason  # what the configuration loader said


def load_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig``, else the in-cluster config, else $KUBECONFIG or
    ~/.kube/config."""
    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config()
    except (config.ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise KubeConfigError(str(exc)) from None


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
