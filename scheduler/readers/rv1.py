"""R (RFC 20) reader: the graph of an R document.

Uses R's ``scheduling`` key (JGF) when present, else builds ``cluster0 ->
<host> -> core<N>/gpu<N>`` from ``execution.R_lite`` and ``nodelist`` like
Fluxion's rv1exec reader.
"""

from __future__ import annotations

import re

from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.graph.resource_graph import CONTAINMENT, ResourceGraph, gc_paused
from fluxnode.scheduler.readers.jgf import JgfError, add_jgf


class RError(ValueError):
    """The R document is malformed (names the offending key)."""


def _split_host(name: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", name)
    if m:
        return m.group(1), int(m.group(2))
    return name, -1


def ranks_in_R(R: dict) -> list[int]:
    try:
        out: set[int] = set()
        for entry in R["execution"]["R_lite"]:
            out.update(idset.decode(str(entry["rank"])))
        return sorted(out)
    except (KeyError, TypeError, ValueError) as exc:
        raise RError(f"execution.R_lite: {exc}") from exc


def extend_rv1(g: ResourceGraph, R: dict) -> None:
    if not isinstance(R, dict):
        raise RError("R must be a mapping")
    if R.get("scheduling"):
        try:
            add_jgf(g, R["scheduling"])
        except JgfError as exc:
            raise RError(f"scheduling: {exc}") from exc
        return
    try:
        execution = R["execution"]
        rlite = execution["R_lite"]
    except (KeyError, TypeError) as exc:
        raise RError("execution.R_lite: missing") from exc
    hosts: list[str] = []
    for h in execution.get("nodelist") or []:
        hosts.extend(hostlist.decode(h))
    root = g.roots.get(CONTAINMENT)
    if root is None:
        root = g.add_vertex("cluster", "cluster", "cluster0", 0, size=1)
        g.set_path(root, CONTAINMENT, "/cluster0")
        g.roots[CONTAINMENT] = root
    entries = []
    for i, entry in enumerate(rlite):
        try:
            ranks = idset.decode(str(entry["rank"]))
            children = entry.get("children") or {}
        except (KeyError, TypeError, ValueError) as exc:
            raise RError(f"execution.R_lite[{i}]: {exc}") from exc
        for r in ranks:
            entries.append((r, children))
    entries.sort(key=lambda e: e[0])
    rank_pos = {r: k for k, r in enumerate(sorted({r for r, _ in entries}))}
    for r, children in entries:
        host = hosts[rank_pos[r]] if rank_pos[r] < len(hosts) else f"node{r}"
        path = f"{root.path}/{host}"
        # one node per rank, as Fluxion's rv1exec reader makes: two brokers on one host
        # are two nodes of the same name (a rank already in the graph is extended)
        existing = [v for v in g.by_path.get(path, ()) if v.rank == r]
        if existing:
            node = existing[0]
        else:
            base, nid = _split_host(host)
            node = g.add_vertex("node", base, host, nid, rank=r)
            g.set_path(node, CONTAINMENT, path)
            g.add_edge(root, node)
        have = {c.name for c in node.children}
        for t in sorted(children):
            try:
                ids = idset.decode(str(children[t]))
            except ValueError as exc:
                raise RError(f"execution.R_lite: children.{t}: {exc}") from exc
            for i in ids:
                cpath = f"{node.path}/{t}{i}"
                if f"{t}{i}" in have:
                    continue
                v = g.add_vertex(t, t, f"{t}{i}", i, rank=r)
                g.set_path(v, CONTAINMENT, cpath)
                g.add_edge(node, v)


def read_rv1(R: dict) -> ResourceGraph:
    g = ResourceGraph()
    with gc_paused():
        extend_rv1(g, R)
    if CONTAINMENT not in g.roots:
        raise RError("R has no resources")
    return g
