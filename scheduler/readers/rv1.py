"""R (RFC 20) reader: the graph of an R document.

Uses R's ``scheduling`` key (JGF) when present, else builds ``cluster0 ->
<host> -> core<N>/gpu<N>`` from ``execution.R_lite`` and ``nodelist`` like
Fluxion's rv1exec reader. R itself is decoded by `broker_conf.rv1` (the one
reader and writer of R); this module only turns what it says into vertices.
"""

from __future__ import annotations

import bisect

from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import R_hosts, R_lite_ranks, RError
from fluxnode.scheduler.graph.resource_graph import (
    CONTAINMENT,
    ResourceGraph,
    freeze_built_graph,
    gc_paused,
)
from fluxnode.scheduler.readers.hostname import HostnameIdError, node_name_parts
from fluxnode.scheduler.readers.jgf import JgfError, add_jgf


def ranks_in_R(R: dict) -> list[int]:
    return list(R_lite_ranks(R))


INF_ID = 2**64  # above every id an idset names


def _node_properties(R: dict) -> list[tuple[str, list[tuple[int, int]]]]:
    """``execution.properties`` as Fluxion's rv1exec reader takes it (build_pmap): each
    property name -> the ranks whose node has it (an idset string; read as ranges, never
    expanded), set on those nodes with the value ""."""
    props = R.get("execution", {}).get("properties") if isinstance(R.get("execution"),
                                                                    dict) else None
    if props is None:
        return []
    if not isinstance(props, dict):
        raise RError("execution.properties: must be a mapping of property names to idsets")
    out = []
    for name, ranks in props.items():
        if not isinstance(ranks, str):
            raise RError(f"execution.properties.{name}: must be an idset string")
        try:
            out.append((name, sorted(idset.decode_ranges(ranks))))
        except idset.IdsetError as exc:
            raise RError(f"execution.properties.{name}: {exc}") from None
    return out


def extend_rv1(g: ResourceGraph, R: dict) -> None:
    if not isinstance(R, dict):
        raise RError("R must be a mapping")
    if R.get("scheduling"):
        try:
            add_jgf(g, R["scheduling"])
        except JgfError as exc:
            raise RError(f"scheduling: {exc}") from exc
        return
    per_rank = R_lite_ranks(R)
    hosts = R_hosts(R)
    props = _node_properties(R)
    root = g.roots.get(CONTAINMENT)
    if root is None:
        root = g.add_vertex("cluster", "cluster", "cluster0", 0, size=1)
        g.set_path(root, CONTAINMENT, "/cluster0")
        g.roots[CONTAINMENT] = root
    for pos, (r, children) in enumerate(per_rank.items()):
        host = hosts[pos] if pos < len(hosts) else f"node{r}"
        path = f"{root.path}/{host}"
        # one node per rank, as Fluxion's rv1exec reader makes: two brokers on one host
        # are two nodes of the same name (a rank already in the graph is extended)
        existing = [v for v in g.lookup(path) if v.rank == r]
        if existing:
            node = existing[0]
        else:
            try:
                base, nid = node_name_parts(host)
            except HostnameIdError:
                raise RError(f"unpack_rank: error splitting hostname={host}") from None
            node = g.add_vertex("node", base, host, nid, rank=r)
            g.set_path(node, CONTAINMENT, path)
            g.add_edge(root, node)
        for name, ranges in props:
            k = bisect.bisect_right(ranges, (r, INF_ID)) - 1
            if k >= 0 and ranges[k][0] <= r <= ranges[k][1]:
                node.set_property(name, "")
        have = {c.name for c in node.children}
        for t in sorted(children):
            for i in children[t]:
                if f"{t}{i}" in have:
                    continue
                v = g.add_vertex(t, t, f"{t}{i}", i, rank=r)
                g.set_path(v, CONTAINMENT, f"{node.path}/{t}{i}")
                g.add_edge(node, v)


def read_rv1(R: dict) -> ResourceGraph:
    g = ResourceGraph()
    with gc_paused():
        extend_rv1(g, R)
        freeze_built_graph(g)
    if CONTAINMENT not in g.roots:
        raise RError("R has no resources")
    return g
