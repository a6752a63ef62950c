"""The API calls the node agent makes, under the official client's method names.

`AgentApi` answers the few ``CoreV1Api`` / ``AppsV1Api`` / ``EventsV1Api`` methods the agent
calls (informer.py, ranks.py, secret.py, events.py), with the same positional arguments
and keyword names, so that code runs unchanged on either client (the tests drive it with
the official one too). Every answer is a urllib3 response, as the official methods give
with ``_preload_content=False`` (that keyword is accepted and ignored): lists and watches
unread, the others read.
"""

from __future__ import annotations

from typing import Any

import urllib3
from fluxnode.agent.kube.rest import KubeRest, Timeout, segment

Response = urllib3.BaseHTTPResponse


class AgentApi:
    def __init__(self, rest: KubeRest):
        self.rest = rest

    @property
    def host(self) -> str:
        return self.rest.host

    # -- lists and watches (informer.py) --------------------------------------------------
    def list_node(self, **kwargs: Any) -> Response:
        return self._list("/api/v1/nodes", **kwargs)

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> Response:
        return self._list(f"/api/v1/namespaces/{segment(namespace)}/configmaps", **kwargs)

    def list_namespaced_daemon_set(self, namespace: str, **kwargs: Any) -> Response:
        return self._list(f"/apis/apps/v1/namespaces/{segment(namespace)}/daemonsets", **kwargs)

    # -- the rank map (ranks.py) ----------------------------------------------------------
    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Response:
        return self.rest.request("GET", self._cm(namespace, name))

    def create_namespaced_config_map(self, namespace: str, body: dict, **_: Any) -> Response:
        return self.rest.request("POST", self._cm(namespace), body=body)

    def replace_namespaced_config_map(self, name: str, namespace: str, body: dict,
                                      **_: Any) -> Response:
        return self.rest.request("PUT", self._cm(namespace, name), body=body)

    # -- the CURVE Secret (secret.py) -----------------------------------------------------
    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Response:
        return self.rest.request("GET", f"/api/v1/namespaces/{segment(namespace)}/secrets/"
                                 f"{segment(name)}")

    def create_namespaced_secret(self, namespace: str, body: dict, **_: Any) -> Response:
        return self.rest.request("POST", f"/api/v1/namespaces/{segment(namespace)}/secrets",
                                 body=body)

    # -- Events about the node (events.py) ------------------------------------------------
    def create_namespaced_event(self, namespace: str, body: dict, **_: Any) -> Response:
        return self.rest.request(
            "POST", f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events", body=body)

    # -------------------------------------------------------------------------------------
    @staticmethod
    def _cm(namespace: str, name: str | None = None) -> str:
        path = f"/api/v1/namespaces/{segment(namespace)}/configmaps"
        return f"{path}/{segment(name)}" if name else path

    def _list(self, path: str, *, _preload_content: bool = False,
              _request_timeout: Timeout = None, _continue: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              limit: int | None = None, watch: bool | None = None,
              resource_version: str | None = None, allow_watch_bookmarks: bool | None = None,
              timeout_seconds: int | None = None) -> Response:
        query = {"labelSelector": label_selector, "fieldSelector": field_selector,
                 "limit": limit, "continue": _continue, "watch": watch,
                 "resourceVersion": resource_version,
                 "allowWatchBookmarks": allow_watch_bookmarks,
                 "timeoutSeconds": timeout_seconds}
        return self.rest.request("GET", path, query, timeout=_request_timeout, stream=True)
