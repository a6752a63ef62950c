"""R (RFC 20) for the ranked nodes, from what Kubernetes reports about each node.

The brokers discover their own hardware; this R is the Kubernetes view (capacity:
cpu, memory, GPUs), written beside broker.toml so operators and the binder can see
what the cluster offers without asking the overlay.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from fluxnode.agent.kube.quantity import QuantityError, parse
from fluxnode.agent.node.ranks import RankMap
from fluxnode.broker_conf.rv1 import NodeResources, build_R

log = logging.getLogger("fluxnode.agent")

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")


def _capacity(node: dict, key: str) -> Decimal:
    """One capacity entry; absent or unreadable counts as 0 (logged: the agent keeps running)."""
    value = ((node.get("status") or {}).get("capacity") or {}).get(key)
    if value is None:
        return Decimal(0)
    try:
        return parse(value, f"node {node['metadata']['name']} status.capacity.{key}")
    except QuantityError as exc:
        log.warning("%s; counted as 0", exc)
        return Decimal(0)


def node_resources(rank: int, node: dict) -> NodeResources:
    cores = max(1, int(_capacity(node, "cpu")))
    gpus = int(sum(_capacity(node, k) for k in GPU_RESOURCES))
    memory_mib = int(_capacity(node, "memory") // 2**20)
    return NodeResources(rank=rank, hostname=node["metadata"]["name"], cores=list(range(cores)),
                         gpus=list(range(gpus)), memory_mib=memory_mib)


def cluster_R(rank_map: RankMap, nodes: dict[str, dict]) -> dict:
    """R for the live ranks whose node we know."""
    return build_R(
        node_resources(r, nodes[h])
        for h, r in sorted(rank_map.live().items(), key=lambda kv: kv[1])
        if h in nodes
    )
