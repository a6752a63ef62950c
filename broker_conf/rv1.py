"""RFC 20 resource set *R* version 1, with Fluxion's JGF graph in the ``scheduling`` key.

The one place R is read and written: everything else that needs R or R_lite
(the broker's resource service, the scheduler service, the graph library's
rv1exec reader and match writers) goes through `build_R` / `parse_R` /
`R_lite` / `R_lite_ranks` / `R_hosts`, so R_lite grouping and idset/hostlist
encoding are decided once.

`build_R` turns what each broker discovered (`NodeResources`) into the instance R:

* ``execution.R_lite`` -- ``[{"rank": "0-3", "children": {"core": "0-7", "gpu": "0"}}]``,
  ranks with identical children grouped into one idset entry;
* ``execution.nodelist`` -- hostnames in rank order, RFC 29 encoded;
* ``execution.starttime`` / ``expiration`` -- ``0.0`` (no time bound);
* ``scheduling`` -- RFC 40 JGF: ``cluster0 -> <hostname> -> socketS -> coreC / gpuG`` plus one
  ``memory0`` pool vertex per node. **Memory is counted in MiB** (mebibytes, 2**20 bytes):
  the memory vertex has ``unit = "MiB"`` and ``size = memory_mib`` (from /proc/meminfo
  MemTotal), so a jobspec ``{"type": "memory", "count": 512}`` means 512 MiB.

`parse_R` is the inverse: ``parse_R(build_R(nodes)) == nodes``. Without a ``scheduling`` key
it falls back to R_lite alone (one socket, memory 0). `R_lite_ranks` reads R_lite alone and
keeps every child type (Fluxion's rv1exec reader builds a vertex for whatever R_lite lists).

`NodesR` is the same R kept as its nodes (the leader's: a JGF of a 1,000-node instance is
a dict per vertex, 85 MiB), its JGF written only when someone reads it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluxnode.broker_conf import hostlist, idset

__all__ = [
    "MEMORY_UNIT",
    "NodeResources",
    "NodesR",
    "RError",
    "R_hosts",
    "R_lite",
    "R_lite_ranks",
    "build_R",
    "node_children",
    "parse_R",
    "split_hostname",
]

MEMORY_UNIT = "MiB"
_UNIT_TO_MIB = {
    "MiB": 1,
    "MB": 1,
    "GiB": 1024,
    "GB": 1024,
    "TiB": 1024 * 1024,
    "KiB": 1 / 1024,
    "B": 1 / (1 << 20),
}
_DIGITS = re.compile(r"^(.*?)(\d+)$")


class RError(ValueError):
    """A malformed R or node description; the message names the offending part."""


def split_hostname(name: str) -> tuple[str, int] | None:
    """``("node", 12)`` for ``"node12"``: a host's basename and trailing number (None without
    one), as Fluxion names node vertices."""
    m = _DIGITS.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def _int_list(value: Any, what: str) -> list[int]:
    if isinstance(value, str):
        try:
            return idset.decode(value)
        except idset.IdsetError as exc:
            raise RError(f"{what}: {exc}") from None
    if not isinstance(value, list | tuple):
        raise RError(f"{what}: must be a list of non-negative integers, not {type(value).__name__}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise RError(f"{what}: {v!r} is not a non-negative integer")
    return list(value)


def _spread(count: int, sockets: int) -> list[int]:
    """Socket index of each of `count` items split into contiguous equal-ish blocks."""
    return [i * sockets // count for i in range(count)] if count else []


@dataclass
class NodeResources:
    """What one broker's node offers: logical core ids, GPU ids, sockets and memory (MiB).

    `core_sockets[i]` is the socket of `cores[i]` (`gpu_sockets` likewise); left empty,
    cores and GPUs are split over the sockets in contiguous blocks. Cores are kept sorted.
    """

    rank: int
    hostname: str
    cores: list[int]
    gpus: list[int] = field(default_factory=list)
    sockets: int = 1
    memory_mib: int = 0
    core_sockets: list[int] = field(default_factory=list)
    gpu_sockets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        who = f"node {self.hostname!r}" if isinstance(self.hostname, str) else "node"
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise RError(f"{who}: rank must be a non-negative integer, not {self.rank!r}")
        if not isinstance(self.hostname, str) or not self.hostname:
            raise RError(
                f"rank {self.rank}: hostname must be a non-empty string, not {self.hostname!r}"
            )
        try:
            hostlist.encode([self.hostname])
        except hostlist.HostlistError as exc:
            raise RError(f"rank {self.rank}: {exc}") from None
        if isinstance(self.sockets, bool) or not isinstance(self.sockets, int) or self.sockets < 1:
            raise RError(f"{who}: sockets must be an integer >= 1, not {self.sockets!r}")
        if (
            isinstance(self.memory_mib, bool)
            or not isinstance(self.memory_mib, int)
            or self.memory_mib < 0
        ):
            raise RError(
                f"{who}: memory_mib must be a non-negative integer, not {self.memory_mib!r}"
            )
        self.cores, self.core_sockets = self._placed("cores", self.cores, self.core_sockets)
        self.gpus, self.gpu_sockets = self._placed("gpus", self.gpus, self.gpu_sockets)

    def _placed(self, kind: str, ids: Any, sockets: Any) -> tuple[list[int], list[int]]:
        who = f"node {self.hostname!r}"
        ids = _int_list(ids, f"{who}: {kind}")
        if len(set(ids)) != len(ids):
            raise RError(f"{who}: {kind} {ids} has duplicates")
        where = _int_list(sockets, f"{who}: {kind[:-1]}_sockets")
        if not where:
            where = _spread(len(ids), self.sockets)
            order = sorted(range(len(ids)), key=lambda i: ids[i])
            return [ids[i] for i in order], where
        if len(where) != len(ids):
            raise RError(
                f"{who}: {kind[:-1]}_sockets has {len(where)} entries for {len(ids)} {kind}"
            )
        for s in where:
            if s >= self.sockets:
                raise RError(
                    f"{who}: {kind[:-1]}_sockets names socket {s} but the node has {self.sockets} "
                    "socket(s)"
                )
        pairs = sorted(zip(ids, where, strict=True))
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def socket_cores(self, socket: int) -> list[int]:
        return [c for c, s in zip(self.cores, self.core_sockets, strict=True) if s == socket]

    def socket_gpus(self, socket: int) -> list[int]:
        return [g for g, s in zip(self.gpus, self.gpu_sockets, strict=True) if s == socket]


def _vertex(uid: int, type_: str, basename: str, name: str, id_: int, rank: int, path: str,
            size: int = 1, unit: str = "") -> dict[str, Any]:
    return {
        "id": str(uid),
        "metadata": {
            "type": type_,
            "basename": basename,
            "name": name,
            "id": id_,
            "uniq_id": uid,
            "rank": rank,
            "exclusive": False,
            "unit": unit,
            "size": size,
            "paths": {"containment": path},
        },
    }


def _edge(source: dict, target: dict) -> dict[str, Any]:
    return {
        "source": source["id"],
        "target": target["id"],
        "metadata": {"subsystem": "containment"},
    }


def _jgf(nodes: Sequence[NodeResources]) -> dict[str, Any]:
    vertices: list[dict] = []
    edges: list[dict] = []

    def add(*args: Any, **kwargs: Any) -> dict:
        v = _vertex(len(vertices), *args, **kwargs)
        vertices.append(v)
        return v

    cluster = add("cluster", "cluster", "cluster0", 0, -1, "/cluster0")
    for n in nodes:
        basename, node_id = split_hostname(n.hostname) or (n.hostname, n.rank)
        npath = f"/cluster0/{n.hostname}"
        node = add("node", basename, n.hostname, node_id, n.rank, npath)
        edges.append(_edge(cluster, node))
        if n.memory_mib > 0:
            mem = add(
                "memory",
                "memory",
                "memory0",
                0,
                n.rank,
                f"{npath}/memory0",
                size=n.memory_mib,
                unit=MEMORY_UNIT,
            )
            edges.append(_edge(node, mem))
        for s in range(n.sockets):
            spath = f"{npath}/socket{s}"
            sock = add("socket", "socket", f"socket{s}", s, n.rank, spath)
            edges.append(_edge(node, sock))
            for c in n.socket_cores(s):
                edges.append(
                    _edge(sock, add("core", "core", f"core{c}", c, n.rank, f"{spath}/core{c}"))
                )
            for g in n.socket_gpus(s):
                edges.append(
                    _edge(sock, add("gpu", "gpu", f"gpu{g}", g, n.rank, f"{spath}/gpu{g}"))
                )
    return {"graph": {"nodes": vertices, "edges": edges}}


def node_children(cores: Iterable[int], gpus: Iterable[int]) -> dict[str, str]:
    """One rank's R_lite ``children``: ``core`` always, ``gpu`` only when it has some."""
    children = {"core": idset.encode(sorted(cores))}
    gpu = idset.encode(sorted(gpus))
    if gpu:
        children["gpu"] = gpu
    return children


def R_lite(children: Mapping[int, Mapping[str, str]]) -> list[dict[str, Any]]:
    """R_lite for rank -> children (type -> idset): ranks with identical children grouped
    into one idset entry, entries in order of their lowest rank."""
    groups: dict[tuple, list[int]] = {}
    for rank in sorted(children):
        groups.setdefault(tuple(children[rank].items()), []).append(rank)
    return [{"rank": idset.encode(ranks), "children": dict(kids)} for kids, ranks in groups.items()]


def _in_rank_order(nodes: Iterable[NodeResources]) -> list[NodeResources]:
    ordered = sorted(nodes, key=lambda n: n.rank)
    for a, b in zip(ordered, ordered[1:], strict=False):
        if a.rank == b.rank:
            raise RError(f"rank {a.rank} appears twice ({a.hostname!r} and {b.hostname!r})")
    return ordered


def _execution(ordered: Sequence[NodeResources], starttime: float,
               expiration: float) -> dict[str, Any]:
    return {
        "R_lite": R_lite({n.rank: node_children(n.cores, n.gpus) for n in ordered}),
        "nodelist": [hostlist.encode(n.hostname for n in ordered)] if ordered else [],
        "starttime": starttime,
        "expiration": expiration,
    }


def build_R(nodes: Iterable[NodeResources], *, scheduling: bool = True,
            starttime: float = 0.0, expiration: float = 0.0) -> dict[str, Any]:
    """RFC 20 R version 1 for `nodes` (with the Fluxion JGF ``scheduling`` key unless
    `scheduling` is False: an allocation's R names cores and GPUs, not a topology)."""
    ordered = _in_rank_order(nodes)
    R: dict[str, Any] = {"version": 1, "execution": _execution(ordered, starttime, expiration)}
    if scheduling:
        R["scheduling"] = _jgf(ordered)
    return R


class NodesR(Mapping[str, Any]):
    """The instance's R as the leader keeps it: the nodes it describes and its
    ``execution`` part; the ``scheduling`` JGF is written each time it is read.

    `build_R(nodes)` with JGF holds a dict per vertex (72 per node of 64 cores and 4
    GPUs: 85 MiB for 1,000 nodes), and the leader built a new one whenever brokers
    joined, though only ``resource.R`` ever prints it: the scheduler's graph comes
    from the nodes (`parse_R` hands them over as they are). Reading this R gives what
    `build_R(nodes)` gives, key for key; `to_dict` is that dict, made for a reader
    that needs one (the `resource.R` answer). Two are equal when their nodes are
    (R is a function of its nodes, and `parse_R` its inverse). Read-only: callers
    must not change what it hands out."""

    __slots__ = ("nodes", "_execution")

    def __init__(self, nodes: Iterable[NodeResources]) -> None:
        self.nodes: tuple[NodeResources, ...] = tuple(_in_rank_order(nodes))
        self._execution = _execution(self.nodes, 0.0, 0.0)

    def __getitem__(self, key: str) -> Any:
        if key == "version":
            return 1
        if key == "execution":
            return self._execution
        if key == "scheduling":
            return _jgf(self.nodes)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("version", "execution", "scheduling"))

    def __len__(self) -> int:
        return 3

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodesR):
            return self.nodes == other.nodes
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  (a Mapping, as a dict: unhashable)

    def to_dict(self) -> dict[str, Any]:
        """`build_R(self.nodes)`: a plain dict, its JGF written now."""
        return {"version": 1, "execution": self._execution, "scheduling": _jgf(self.nodes)}


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise RError(f"{where}.{key}: missing" if where else f"{key}: missing")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RError(
            f"{where + '.' if where else ''}{key}: must be {name}, not {type(value).__name__}"
        )
    return value


def _graph_layout(graph: Any) -> dict[int, dict[str, Any]]:
    """Per rank: sockets, core->socket, gpu->socket and memory (MiB) from a JGF graph."""
    g = _get(graph, "graph", dict, "scheduling")
    vertices = _get(g, "nodes", list, "scheduling.graph")
    edges = g.get("edges", [])
    if not isinstance(edges, list):
        raise RError("scheduling.graph.edges: must be list")
    meta: dict[str, dict] = {}
    for i, v in enumerate(vertices):
        where = f"scheduling.graph.nodes[{i}]"
        md = _get(v, "metadata", dict, where)
        if "id" not in v:
            raise RError(f"{where}.id: missing")
        _get(md, "type", str, f"{where}.metadata")
        meta[str(v["id"])] = md
    children: dict[str, list[str]] = {}
    for i, e in enumerate(edges):
        where = f"scheduling.graph.edges[{i}]"
        if not isinstance(e, Mapping) or "source" not in e or "target" not in e:
            raise RError(f"{where}: needs source and target")
        src, tgt = str(e["source"]), str(e["target"])
        for end, vid in (("source", src), ("target", tgt)):
            if vid not in meta:
                raise RError(f"{where}.{end}: no vertex with id {vid!r}")
        md = e.get("metadata") or {}
        subsystem = md.get("subsystem", "containment")
        if isinstance(
            md.get("name"), Mapping
        ):  # older Fluxion: {"name": {"containment": "contains"}}
            subsystem, relation = next(iter(md["name"].items()))
            if relation != "contains":
                continue
        if subsystem == "containment":
            children.setdefault(src, []).append(tgt)
    layout: dict[int, dict[str, Any]] = {}
    for vid, md in meta.items():
        if md["type"] != "node":
            continue
        rank = md.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise RError(f"scheduling: node vertex {md.get('name', vid)!r} has bad rank {rank!r}")
        info: dict[str, Any] = {
            "name": md.get("name"),
            "sockets": 0,
            "cores": {},
            "gpus": {},
            "memory_mib": 0,
        }
        sockets: list[str] = []
        stack = [(c, None) for c in children.get(vid, [])]
        while stack:
            cid, sock = stack.pop()
            cmd = meta[cid]
            t = cmd["type"]
            if t == "socket":
                sockets.append(cid)
                stack.extend((c, cid) for c in children.get(cid, []))
            elif t in ("core", "gpu"):
                info["cores" if t == "core" else "gpus"][int(cmd.get("id", 0))] = sock
            elif t == "memory":
                unit = cmd.get("unit") or MEMORY_UNIT
                if unit not in _UNIT_TO_MIB:
                    raise RError(
                        f"scheduling: memory vertex of {info['name']!r} has unknown unit {unit!r}"
                    )
                info["memory_mib"] += int(int(cmd.get("size", 0)) * _UNIT_TO_MIB[unit])
            else:
                stack.extend((c, sock) for c in children.get(cid, []))
        sockets.sort(key=lambda s: int(meta[s].get("id", 0)))
        index = {s: i for i, s in enumerate(sockets)}
        info["sockets"] = max(1, len(sockets))
        info["cores"] = {c: index.get(s, 0) for c, s in info["cores"].items()}
        info["gpus"] = {g: index.get(s, 0) for g, s in info["gpus"].items()}
        if rank in layout:
            raise RError(f"scheduling: rank {rank} has more than one node vertex")
        layout[rank] = info
    return layout


def R_lite_ranks(R: Any, types: Collection[str] | None = None) -> dict[int, dict[str, list[int]]]:
    """rank -> {type: ids} from an R's ``execution.R_lite``, in rank order. `types`, when
    given, are the only child types allowed (R version 1 has core and gpu); None keeps any."""
    if not isinstance(R, Mapping):
        raise RError(f"R must be a JSON object, not {type(R).__name__}")
    execution = _get(R, "execution", dict, "")
    r_lite = _get(execution, "R_lite", list, "execution")
    per_rank: dict[int, dict[str, list[int]]] = {}
    for i, entry in enumerate(r_lite):
        where = f"execution.R_lite[{i}]"
        ranks_s = _get(entry, "rank", str, where)
        children = _get(entry, "children", dict, where)
        if types is not None:
            unknown = sorted(set(children) - set(types))
            if unknown:
                raise RError(
                    f"{where}.children: unknown resource type {unknown[0]!r} (R version 1 has core "
                    "and gpu)"
                )
        if types is not None:
            _get(children, "core", str, f"{where}.children")
        for t, v in children.items():
            if not isinstance(v, str):
                raise RError(f"{where}.children.{t}: must be an idset string")
        try:
            ranks = idset.decode(ranks_s)
            ids = {t: idset.decode(v) for t, v in children.items()}
        except idset.IdsetError as exc:
            raise RError(f"{where}: {exc}") from None
        for r in ranks:
            if r in per_rank:
                raise RError(f"{where}.rank: rank {r} appears in more than one R_lite entry")
            per_rank[r] = ids
    return dict(sorted(per_rank.items()))


def R_hosts(R: Any) -> list[str]:
    """The hostnames of ``execution.nodelist``, in rank order (RFC 29 decoded)."""
    nodelist = _get(R, "execution", dict, "").get("nodelist", [])
    if not isinstance(nodelist, list) or not all(isinstance(x, str) for x in nodelist):
        raise RError("execution.nodelist: must be a list of hostlist strings")
    try:
        return [h for part in nodelist for h in hostlist.decode(part)]
    except hostlist.HostlistError as exc:
        raise RError(f"execution.nodelist: {exc}") from None


def parse_R(R: Any) -> list[NodeResources]:
    """The nodes of an RFC 20 R version 1, in rank order (inverse of `build_R`)."""
    if isinstance(R, NodesR):
        return list(R.nodes)
    if not isinstance(R, Mapping):
        raise RError(f"R must be a JSON object, not {type(R).__name__}")
    version = R.get("version")
    if version != 1:
        raise RError(f"version: must be 1, not {version!r}")
    per_rank = R_lite_ranks(R, ("core", "gpu"))
    hosts = R_hosts(R)
    ranks = list(per_rank)
    if len(hosts) != len(ranks):
        raise RError(
            f"execution.nodelist: {len(hosts)} hostnames for {len(ranks)} ranks "
            f"({idset.encode(ranks)})"
        )
    layout = _graph_layout(R["scheduling"]) if R.get("scheduling") is not None else {}
    nodes = []
    for rank, host in zip(ranks, hosts, strict=True):
        cores, gpus = per_rank[rank]["core"], per_rank[rank].get("gpu", [])
        info = layout.get(rank)
        if info is None:
            nodes.append(NodeResources(rank=rank, hostname=host, cores=cores, gpus=gpus))
            continue
        if sorted(info["cores"]) != cores or sorted(info["gpus"]) != gpus:
            raise RError(
                f"scheduling: rank {rank} ({host}) has cores {idset.encode(info['cores'])} gpus "
                f"{idset.encode(info['gpus'])} in the graph but cores {idset.encode(cores)} gpus "
                f"{idset.encode(gpus)} in R_lite"
            )
        nodes.append(
            NodeResources(
                rank=rank,
                hostname=host,
                cores=cores,
                gpus=gpus,
                sockets=info["sockets"],
                memory_mib=info["memory_mib"],
                core_sockets=[info["cores"][c] for c in cores],
                gpu_sockets=[info["gpus"][g] for g in gpus],
            )
        )
    return nodes
