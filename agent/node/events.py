"""Kubernetes Events about this node's broker (``kubectl describe node`` shows them).

Events are a courtesy to operators: a failure to post one is logged once and never
stops the agent. A Node is cluster-scoped, so its Events go in namespace ``default``, as
the kubelet posts them: the API server refuses (422, ``involvedObject.namespace: does not
match event.namespace``) an events.k8s.io Event about a cluster-scoped object anywhere
but ``default`` or ``kube-system`` (pkg/apis/core/validation/events.go). daemonset/rbac.yaml
grants ``create`` on events.k8s.io events in ``default`` and nowhere else.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fluxnode.agent.kube.api_error import api_errors
from fluxnode.agent.kube.timestamps import micro_time_now
from urllib3.exceptions import HTTPError

log = logging.getLogger("fluxnode.agent.events")

CONTROLLER = "fluxnode.io/agent"
EVENT_NAMESPACE = "default"  # where Events about cluster-scoped objects (Nodes) belong
_NAME_MAX = 253  # metadata.name: a DNS subdomain
_INSTANCE_MAX = 128  # reportingInstance, action, reason: at most 128 characters


class NodeEvents:
    def __init__(self, api: Any, namespace: str, node: str):
        """`api` has ``create_namespaced_event`` (agent_api.AgentApi, or the official
        EventsV1Api); `namespace` is the agent's own; the Events go in EVENT_NAMESPACE
        whatever it is."""
        self.api = api
        self.agent_namespace, self.node = namespace, node
        self.namespace = EVENT_NAMESPACE
        self.instance = f"fluxnode-agent-{node}"[:_INSTANCE_MAX]
        self._warned = False

    def record(self, reason: str, note: str, type_: str = "Normal", action: str = "Broker") -> None:
        now = micro_time_now()
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{self.node[: _NAME_MAX - 17].rstrip('.-')}.{uuid.uuid4().hex[:16]}",
                "namespace": self.namespace,
            },
            "eventTime": now,
            "reportingController": CONTROLLER,
            "reportingInstance": self.instance,
            "action": action[:_INSTANCE_MAX],
            "reason": reason[:_INSTANCE_MAX],
            "note": note[:1024],
            "type": type_,
            # the kubelet refers to its Node with the name as UID too
            "regarding": {"kind": "Node", "apiVersion": "v1", "name": self.node, "uid": self.node},
        }
        try:
            self.api.create_namespaced_event(self.namespace, body, _preload_content=False)
        except (*api_errors(), HTTPError, OSError) as exc:
            if not self._warned:
                log.warning(
                    "cannot post Events (%s); continuing without them", getattr(exc, "status", exc)
                )
                self._warned = True
