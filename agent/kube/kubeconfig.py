"""Where the node agent's API server is and how it proves who it is, without the official client.

The agent needs a server URL, TLS settings and a credential; the official client's loader
brings the whole ``kubernetes`` package with it (about 20 MiB of modules in a process whose
target is 60 MiB, issue 32). This reads the cases a node agent meets itself: the in-cluster
service account (how the DaemonSet runs) and kubeconfigs with a token, a token file, a client
certificate or a user name and password. Anything else (``exec`` and ``auth-provider``
credential plugins, a proxy, a $KUBECONFIG that merges several files) is handed to the
official loader, whose configuration is then used as it is: a workstation still works,
only heavier.

The order of sources is the binder's (api_client.py): an explicit kubeconfig, else the
service account in a pod, else $KUBECONFIG or ~/.kube/config.
"""

from __future__ import annotations

import base64
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from fluxnode.agent.kube.api_error import KubeConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD = 60.0
"""Seconds between reads of a token file: bound service-account tokens are rotated on disk
(the official client re-reads them every minute too)."""

POOL_SIZE = 8
"""Connections kept per server: one per watch (up to three) plus the reconcile's calls."""

Headers = Callable[[], dict[str, str]]


@dataclass(frozen=True)
class KubeTarget:
    """An API server: its URL, a connection pool with its TLS settings, and the headers that
    authenticate each request (called per request, so a rotated token is picked up)."""

    host: str
    pool: urllib3.PoolManager
    headers: Headers


class _TokenFile:
    """A bearer token read from a file, read again every TOKEN_REREAD seconds."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._token, self._read_at = self._read(), time.monotonic()

    def _read(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError as exc:
            raise KubeConfigError(f"cannot read token file {self.path}: "
                                  f"{exc.strerror or exc}") from None

    def __call__(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() - self._read_at > TOKEN_REREAD:
                try:
                    self._token = self._read()
                except KubeConfigError:
                    pass  # keep the last token; the API's 401 will say if it expired
                self._read_at = time.monotonic()
            return {"Authorization": f"Bearer {self._token}"}


def load_target(kubeconfig: str | None, service_account: Path = SERVICE_ACCOUNT) -> KubeTarget:
    """The API server from ``kubeconfig``, else the in-cluster service account, else
    $KUBECONFIG or ~/.kube/config."""
    if kubeconfig:
        return from_kubeconfig(Path(kubeconfig))
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(service_account)
    default = os.environ.get("KUBECONFIG") or "~/.kube/config"
    if os.pathsep in default:
        return _official(None)  # several files merged: the official loader's rules
    return from_kubeconfig(Path(default).expanduser())


def in_cluster(service_account: Path = SERVICE_ACCOUNT) -> KubeTarget:
    """The pod's service account: its token, the cluster CA and the service's address."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("Service host/port is not set.")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    ca = service_account / "ca.crt"
    if not ca.is_file():
        raise KubeConfigError(f"Service certification file {ca} does not exist.")
    token = _TokenFile(service_account / "token")
    return KubeTarget(f"https://{host}:{port}", _pool(ca_certs=str(ca)), token)


def from_kubeconfig(path: Path) -> KubeTarget:
    """The current context of one kubeconfig file."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a mapping")
    context = _named(doc, "contexts", doc.get("current-context"), "context", path)
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster", path)
    user = _named(doc, "users", context.get("user"), "user", path) if context.get("user") else {}
    if ({"exec", "auth-provider"} & user.keys()) or cluster.get("proxy-url"):
        return _official(path)
    server = cluster.get("server")
    if not server:
        raise KubeConfigError(f"kubeconfig {path}: cluster has no server")
    base = path.parent
    tls: dict[str, Any] = {}
    if cluster.get("insecure-skip-tls-verify"):
        tls.update(cert_reqs="CERT_NONE", assert_hostname=False)
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    else:
        ca = _file_or_data(cluster, "certificate-authority", base)
        if ca:
            tls["ca_certs"] = ca
    if cluster.get("tls-server-name"):
        tls["server_hostname"] = cluster["tls-server-name"]
    cert = _file_or_data(user, "client-certificate", base)
    key = _file_or_data(user, "client-key", base)
    if cert and key:
        tls.update(cert_file=cert, key_file=key)
    headers: Headers = dict
    if user.get("token"):
        fixed = {"Authorization": f"Bearer {user['token']}"}
        headers = fixed.copy
    elif user.get("tokenFile"):
        headers = _TokenFile(base / user["tokenFile"])
    elif user.get("username") and user.get("password"):
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        fixed = {"Authorization": f"Basic {basic}"}
        headers = fixed.copy
    return KubeTarget(str(server).rstrip("/"), _pool(**tls), headers)


def _named(doc: dict, section: str, name: object, field: str, path: Path) -> dict:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(field)
            return value if isinstance(value, dict) else {}
    raise KubeConfigError(f"kubeconfig {path}: no {field} named {name!r} in {section}")


def _file_or_data(section: dict, key: str, base: Path) -> str | None:
    """A path for ``key`` (relative to the kubeconfig) or ``key-data`` written to a private
    temporary file (urllib3 and ssl take client certificates only as files)."""
    data = section.get(f"{key}-data")
    if data:
        fd, name = tempfile.mkstemp(prefix="fluxnode-kube-", suffix=".pem")
        with os.fdopen(fd, "wb") as out:
            out.write(base64.b64decode(data))
        return name
    value = section.get(key)
    return str(base / value) if value else None


def _pool(**tls: Any) -> urllib3.PoolManager:
    tls.setdefault("cert_reqs", "CERT_REQUIRED")
    return urllib3.PoolManager(num_pools=4, maxsize=POOL_SIZE, **tls)


def _official(path: Path | None) -> KubeTarget:
    """The official client's loader for what this module does not read; its pool and its
    authentication settings (refreshed by its own hooks) serve the agent's requests."""
    from fluxnode.agent.kube.api_client import load_api_client

    api_client = load_api_client(str(path) if path else None)
    configuration = api_client.configuration

    def headers() -> dict[str, str]:
        out = {}
        for auth in configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                out[auth["key"]] = auth["value"]
        return out

    return KubeTarget(configuration.host.rstrip("/"), api_client.rest_client.pool_manager,
                      headers)
