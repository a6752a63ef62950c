"""R (RFC 20) for the ranked nodes, from what Kubernetes reports about each node.

The brokers discover their own hardware; this R is the Kubernetes view (capacity:
cpu, memory, GPUs), written beside broker.toml so operators and the binder can see
what the cluster offers without asking the overlay.
"""

from __future__ import annotations

import re

from fluxnode.agent.ranks import RankMap
from fluxnode.broker_conf.rv1 import NodeResources, build_R

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "m": 1e-3}
_QUANTITY = re.compile(r"^([0-9.]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|m)?$")


def quantity(text: str | int | None) -> float:
    """A Kubernetes resource quantity ("4", "3500m", "16Gi") as a number; 0 if unreadable."""
    m = _QUANTITY.match(str(text or "0").strip())
    if not m:
        return 0.0
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


def node_resources(rank: int, node: dict) -> NodeResources:
    cap = (node.get("status") or {}).get("capacity") or {}
    cores = max(1, int(quantity(cap.get("cpu"))))
    gpus = int(sum(quantity(cap.get(k)) for k in GPU_RESOURCES))
    memory_mib = int(quantity(cap.get("memory")) // 2**20)
    return NodeResources(rank=rank, hostname=node["metadata"]["name"], cores=list(range(cores)),
                         gpus=list(range(gpus)), memory_mib=memory_mib)


def cluster_R(rank_map: RankMap, nodes: dict[str, dict]) -> dict:
    """R for the live ranks whose node we know."""
    return build_R(node_resources(r, nodes[h]) for h, r in sorted(rank_map.live().items(), key=lambda kv: kv[1])
                   if h in nodes)
