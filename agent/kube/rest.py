"""HTTP requests to the API server over a urllib3 pool: the node agent's whole transport.

The official client's generated methods validate arguments and build model objects the
agent never reads, and its package costs about 20 MiB of RSS to import (issue 32). The
agent's calls (list and watch three kinds, read and write a ConfigMap and a Secret, post an
Event) are a handful of JSON requests; this sends them over the pool kubeconfig.py set
up. Answers come back as urllib3 responses, as the official client returns them with
``_preload_content=False``: lists and watches unread (the informer streams them and
releases the connection), other calls already read (callers take ``.data``) with their
connection back in the pool; an HTTP error answer is read and raised as `ApiError`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from fluxnode.agent.kube.api_error import ApiError
from fluxnode.agent.kube.kubeconfig import KubeTarget

USER_AGENT = "fluxnode-agent"

REQUEST_TIMEOUT = urllib3.Timeout(connect=10.0, read=60.0)
"""For calls that are not watches: a stalled API server fails the call (the control loop
retries it) instead of holding the agent's loop forever."""

Timeout = float | tuple[float, float] | None


class KubeRest:
    """Requests to one API server (a `KubeTarget`)."""

    def __init__(self, target: KubeTarget):
        self.target = target
        self.host = target.host

    def request(self, method: str, path: str, query: dict[str, Any] | None = None,
                body: Any = None, timeout: Timeout = None,
                stream: bool = False) -> urllib3.BaseHTTPResponse:
        """Send one request. With ``stream`` the answer is returned unread (the caller reads
        and releases it); else it is read and its connection back in the pool. >= 400
        raises ApiError."""
        url = self.host + path
        params = {k: _param(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode(params)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT,
                   **self.target.headers()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        response = self.target.pool.request(
            method, url, body=data, headers=headers, preload_content=False,
            timeout=_timeout(timeout),  # urllib3's default retries, as the official client
        )
        if not stream and response.status < 400:
            response.read(cache_content=True)
            response.release_conn()
        if response.status >= 400:
            try:
                text = response.data.decode(errors="replace")
            finally:
                response.release_conn()
            raise ApiError(response.status, response.reason or "", text, dict(response.headers))
        return response


def segment(name: str) -> str:
    """One path segment (a namespace or an object name), escaped."""
    return quote(name, safe="")


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _timeout(value: Timeout) -> urllib3.Timeout:
    if value is None:
        return REQUEST_TIMEOUT
    if isinstance(value, tuple):
        return urllib3.Timeout(connect=value[0], read=value[1])
    return urllib3.Timeout(total=value)
