"""Where the lead broker is, from the rank map the node agents keep in a ConfigMap.

In a cluster the leader (rank 0) is whichever node the agents' rank map names
first, and it can move (when its node goes away). The binder therefore looks it
up on every (re)connect instead of being configured with an address: rank 0's
hostname (the Kubernetes node name), that node's InternalIP, and the broker
port (the node annotation fluxnode.io/broker-port overrides the default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fluxnode.agent.kube import raw as kube_raw

RANKS_KEY = "ranks.json"
PORT_ANNOTATION = "fluxnode.io/broker-port"


class LeaderNotFound(RuntimeError):
    """The rank map or rank 0's node cannot be read; the message says which."""


@dataclass
class LeaderLocator:
    core: Any  # kubernetes.client.CoreV1Api
    namespace: str = "fluxnode"
    configmap: str = "fluxnode-ranks"
    port: int = 8050

    def __call__(self) -> str:
        try:
            cm = kube_raw.call(self.core.read_namespaced_config_map, self.configmap, self.namespace)
            hosts = json.loads((cm.get("data") or {})[RANKS_KEY])["hosts"]
        except Exception as exc:
            raise LeaderNotFound(
                f"configmap {self.namespace}/{self.configmap}: no usable {RANKS_KEY} ({exc})"
            ) from None
        if not hosts:
            raise LeaderNotFound(
                f"configmap {self.namespace}/{self.configmap}: the rank map is empty"
            )
        try:
            node = kube_raw.call(self.core.read_node, hosts[0])
        except Exception as exc:
            raise LeaderNotFound(f"node {hosts[0]} (rank 0): {exc}") from None
        addresses = {
            a.get("type"): a.get("address")
            for a in (node.get("status") or {}).get("addresses") or []
        }
        address = (
            addresses.get("InternalIP") or addresses.get("ExternalIP") or addresses.get("Hostname")
        )
        if not address:
            raise LeaderNotFound(f"node {hosts[0]} (rank 0) has no address")
        port = int(
            ((node.get("metadata") or {}).get("annotations") or {}).get(PORT_ANNOTATION)
            or self.port
        )
        host = f"[{address}]" if ":" in address else address
        return f"tcp://{host}:{port}"
