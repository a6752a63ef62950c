"""Which Kubernetes nodes run a fluxnode broker.

By default: worker nodes (no control-plane role label or taint) that are schedulable;
``--selector`` narrows them server-side (a label selector). To *join* the overlay a
node must also be Ready; a node that already has a rank keeps it while NotReady so
it shows as down in ``fluxnode resource list`` instead of vanishing.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTROL_PLANE_KEYS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
PORT_ANNOTATION = "fluxnode.io/broker-port"


def is_control_plane(node: dict) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return any(k in labels for k in CONTROL_PLANE_KEYS) or any(
        t.get("key") in CONTROL_PLANE_KEYS for t in taints
    )


def is_ready(node: dict) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def is_schedulable(node: dict) -> bool:
    return not (node.get("spec") or {}).get("unschedulable", False)


def creation_key(node: dict) -> tuple[str, str]:
    """Order in which new nodes join: oldest first, then by name (same on every agent)."""
    meta = node.get("metadata", {})
    return (meta.get("creationTimestamp") or "", meta["name"])


def internal_address(node: dict) -> str | None:
    addresses = (node.get("status") or {}).get("addresses") or []
    for kind in ("InternalIP", "ExternalIP", "Hostname"):
        for addr in addresses:
            if addr.get("type") == kind and addr.get("address"):
                return addr["address"]
    return None


def broker_port(node: dict, default: int) -> int:
    """A node may override the broker port with an annotation (e.g. port clashes, tests)."""
    value = (node.get("metadata", {}).get("annotations") or {}).get(PORT_ANNOTATION)
    try:
        port = int(value) if value else default
    except ValueError:
        return default
    return port if 0 < port < 65536 else default


@dataclass(frozen=True)
class NodeSelection:
    include_control_plane: bool = False

    def members(self, nodes: dict[str, dict]) -> dict[str, dict]:
        """Nodes that may hold a rank (Ready or not)."""
        return {name: n for name, n in nodes.items()
                if is_schedulable(n) and (self.include_control_plane or not is_control_plane(n))}

    def joinable(self, nodes: dict[str, dict]) -> list[str]:
        """Members that are Ready, in join order."""
        ready = [n for n in self.members(nodes).values() if is_ready(n)]
        return [n["metadata"]["name"] for n in sorted(ready, key=creation_key)]
