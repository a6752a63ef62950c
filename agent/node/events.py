"""Kubernetes Events about this node's broker (``kubectl describe node`` shows them).

Events are a courtesy to operators: a failure to post one is logged once and never
stops the agent.
"""

from __future__ import annotations

import datetime
import logging
import uuid

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger("fluxnode.agent.events")

CONTROLLER = "fluxnode.io/agent"


class NodeEvents:
    def __init__(self, api_client: client.ApiClient, namespace: str, node: str):
        self.api = client.EventsV1Api(api_client)
        self.namespace, self.node = namespace, node
        self.instance = f"fluxnode-agent-{node}"
        self._warned = False

    def record(self, reason: str, note: str, type_: str = "Normal", action: str = "Broker") -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{self.node}.{uuid.uuid4().hex[:16]}",
                "namespace": self.namespace,
            },
            "eventTime": now,
            "reportingController": CONTROLLER,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            # the kubelet refers to its Node with the name as UID too
            "regarding": {"kind": "Node", "apiVersion": "v1", "name": self.node, "uid": self.node},
        }
        try:
            self.api.create_namespaced_event(self.namespace, body, _preload_content=False)
        except (ApiException, HTTPError, OSError) as exc:
            if not self._warned:
                log.warning(
                    "cannot post Events (%s); continuing without them", getattr(exc, "status", exc)
                )
                self._warned = True
