"""Which Kubernetes nodes run a fluxnode broker: exactly those where the DaemonSet runs an
agent pod.

In a cluster (``--daemonset NAME``, set by the manifest) a node is a member when the
DaemonSet's pod template would be placed there, judged as the DaemonSet controller does:
the template's nodeSelector and required node affinity, and every NoSchedule/NoExecute
taint tolerated by the template's tolerations or by the ones the controller adds to every
daemon pod (not-ready, unreachable, disk/memory/pid pressure, unschedulable, and
network-unavailable for hostNetwork pods). The rules are evaluated by the same code the
binder uses for pods (``agent/kube/node_affinity.py``). So a node with a taint the
DaemonSet does not tolerate gets no rank (it would show down for good), and a cordoned
node keeps its rank and its broker: a cordon is a drain (the binder drains it in the
scheduler), not a removal.

Without a DaemonSet to follow (tests, an agent run by hand): every node except
control-plane ones (role label or taint) unless ``--include-control-plane``. In both
cases ``--selector`` narrows the nodes server-side (a label selector). To *join* the
overlay a member must also be Ready; a node that already has a rank keeps it while
NotReady so it shows as down in ``fluxnode resource list`` instead of vanishing.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluxnode.agent.kube.node_affinity import (
    NodeTraits,
    PodPlacement,
    Toleration,
    pod_placement,
)

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


# Tolerations the DaemonSet controller adds to every daemon pod
# (pkg/controller/daemon/util AddOrUpdateDaemonPodTolerations), so its pods run on nodes
# that are cordoned, under pressure or not ready.
DAEMON_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/disk-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/pid-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),
)
HOST_NETWORK_TOLERATION = Toleration(
    "node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule"
)


def daemon_placement(daemonset: dict) -> PodPlacement:
    """Where the DaemonSet's pods may run: its template's rules plus the controller's
    tolerations. Raises NodeAffinityError (naming the field) for a malformed template."""
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    placement = pod_placement(
        {"metadata": {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")},
         "spec": spec}
    )
    extra = DAEMON_TOLERATIONS + ((HOST_NETWORK_TOLERATION,) if spec.get("hostNetwork") else ())
    return PodPlacement(placement.selector, placement.terms, placement.tolerations + extra)


@dataclass(frozen=True)
class NodeSelection:
    include_control_plane: bool = False
    daemon: PodPlacement | None = None  # the DaemonSet's placement; None: no DaemonSet to follow

    def reason_against(self, node: dict) -> str | None:
        """Why ``node`` may not hold a rank (kube-scheduler's words for the DaemonSet's
        rules), or None if it may."""
        if self.daemon is not None:
            return self.daemon.reason_against(NodeTraits.from_node(node))
        if not self.include_control_plane and is_control_plane(node):
            return "control-plane node (pass --include-control-plane)"
        return None

    def admits(self, node: dict) -> bool:
        return self.reason_against(node) is None

    def members(self, nodes: dict[str, dict]) -> dict[str, dict]:
        """Nodes that may hold a rank (Ready or not, cordoned or not)."""
        return {name: n for name, n in nodes.items() if self.admits(n)}

    def joinable(self, nodes: dict[str, dict]) -> list[str]:
        """Members that are Ready, in join order."""
        ready = [n for n in self.members(nodes).values() if is_ready(n)]
        return [n["metadata"]["name"] for n in sorted(ready, key=creation_key)]
