"""broker.toml for the Kubernetes overlay: the rank map rendered through broker_conf.

Every agent renders the same file from the shared rank map and the node list: hosts
in rank order, each broker connected to at its node's InternalIP (node names need
not resolve) and its port (``--port``, or the node's ``fluxnode.io/broker-port``
annotation). ``placement`` is the part of the file that a given broker depends on
at start-up; the agent restarts (or reloads) its broker only when that changes, so
brokers elsewhere in the tree keep running when a node joins or leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluxnode.agent.node.ranks import RankMap
from fluxnode.agent.node.selection import broker_port, internal_address
from fluxnode.broker_conf.render import render_broker_toml
from fluxnode.broker_conf.topology import Topology


@dataclass(frozen=True)
class OverlaySettings:
    port: int
    bind_address: str
    topo: str
    cert_path: str
    tbon: tuple[
        tuple[str, object], ...
    ] = ()  # extra [tbon] keys (flux-config-tbon(5)), e.g. torpid_max
    allow_exec: bool = False  # [exec] allow: may `fluxnode exec` run commands on the nodes


def endpoints(
    rank_map: RankMap, nodes: dict[str, dict], s: OverlaySettings
) -> list[tuple[str, int, str]]:
    """(host, port, connect address) per rank."""
    out = []
    for host in rank_map.hosts:
        node = nodes.get(host)
        port = broker_port(node, s.port) if node else s.port
        address = (internal_address(node) if node else None) or host
        out.append((host, port, address))
    return out


def render(rank_map: RankMap, nodes: dict[str, dict], s: OverlaySettings) -> str:
    overrides: dict[str, dict[str, str]] = {}
    for host, port, address in endpoints(rank_map, nodes, s):
        extra = {}
        if address != host or port != s.port:
            extra["connect"] = f"tcp://{address}:{port}"
        if port != s.port:
            extra["bind"] = f"tcp://{s.bind_address}:{port}"
        if extra:
            overrides[host] = extra
    return render_broker_toml(
        list(rank_map.hosts),
        curve_cert=s.cert_path,
        port=s.port,
        topo=s.topo,
        bind=f"tcp://{s.bind_address}:%p",
        connect="tcp://%h:%p",
        host_overrides=overrides,
        tbon=dict(s.tbon),
        exec_table={"allow": True} if s.allow_exec else None,
    )


@dataclass(frozen=True)
class Placement:
    """What a broker depends on at start-up; a change means restart (or reload) that broker."""

    rank: int
    size: int | None  # only the leader's size matters to it (quorum, R, down ranks)
    port: int
    parent: tuple | None  # (rank, (host, port, address))
    children: tuple[tuple[int, str], ...]
    topo: str


def placement(
    rank_map: RankMap, nodes: dict[str, dict], s: OverlaySettings, node: str
) -> Placement | None:
    """``node``'s placement in the overlay described by ``rank_map`` (None: not ranked)."""
    rank = rank_map.rank_of(node)
    if rank is None:
        return None
    ends = endpoints(rank_map, nodes, s)
    topo = Topology.from_spec(s.topo, rank_map.size)
    parent = topo.parent(rank)
    return Placement(
        rank=rank,
        size=rank_map.size if rank == 0 else None,
        port=ends[rank][1],
        parent=(parent, ends[parent]) if parent is not None else None,
        children=tuple((c, rank_map.hosts[c]) for c in topo.children(rank)),
        topo=s.topo,
    )
