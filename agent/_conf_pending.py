"""TEMPORARY stand-ins for fluxnode.broker_conf.rv1 and fluxnode.agent.resources until they land.

Delete when conf's modules are in git (overlay switches to them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class NodeResources:
    rank: int
    hostname: str
    cores: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    sockets: int = 1
    memory_mib: int = 0


def build_R(nodes: list[NodeResources]) -> dict:
    return {"version": 1, "execution": {"R_lite": [
        {"rank": str(n.rank), "children": {"core": ",".join(map(str, n.cores))}} for n in nodes],
        "nodelist": [n.hostname for n in nodes]}}


def discover(rank: int, hostname: str, override: str | None = None) -> NodeResources:
    import json

    if override:
        d = json.load(open(override))
        return NodeResources(rank, hostname, list(range(d.get("cores", 1))), list(range(d.get("gpus", 0))))
    return NodeResources(rank, hostname, list(range(os.cpu_count() or 1)))
