"""How the binder reaches the Kubernetes API through the official client.

One order of configuration sources for both daemons: an explicit kubeconfig
(``--kubeconfig``, which both commands also read from ``$KUBECONFIG``) wins, as it
is what the operator asked for; else, in a pod (``KUBERNETES_SERVICE_HOST`` set),
the in-cluster service account, the identity the manifests' least-privilege RBAC
is written for, even if the image happens to carry a ~/.kube/config; else
kubectl's default (``$KUBECONFIG``, then ~/.kube/config) for debugging on a
workstation. Each call builds its own client configuration, never the library's
process-wide default, so several clients (tests) do not share one by accident.

The node agent does not use this module: it loads its configuration with
kubeconfig.py and calls the API with its own small client (rest.py, issue 32). The errors
both share are in api_error.py, re-exported here.
"""

from __future__ import annotations

import os

import yaml
from fluxnode.agent.kube.api_error import (  # noqa: F401 (re-exported for the binder)
    KubeAccessError,
    KubeConfigError,
    denied,
    is_denied,
    status_message,
)
from kubernetes import client, config


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
