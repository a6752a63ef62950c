"""The graph the service schedules on: R's nodes, flat, as ``cluster0 -> <hostname> ->
core<N> / gpu<N> / memory<K>``, built straight from the parsed nodes (`NodeResources`).

Why flat while R keeps sockets: Fluxion's matcher (and ours, faithfully) matches a
``slot`` at a vertex only when that vertex has *direct* children of every type in
the slot. With R's ``node -> socket -> core`` and the memory pool under the node, a
slot of cores + memory never matches, a slot of more cores than one socket has never
matches, and ``node -> slot`` jobspecs select nothing. A pod's slot is node-local
and may use any of its node's cores, GPUs and memory, so the service graph puts
them all directly under the node (sockets are R's business: binding inside a node
is the kubelet's). R itself is unchanged; only the service's graph is flat.

Why memory is several vertices: a slot holds its resources exclusively, and an
exclusive pool vertex is taken whole (Fluxion's semantics), so one pool per node
would give all of a node's memory to its first pod. Each node's memory (MiB; none
when 0) is split into equal vertices of ``memory_granule_mib`` MiB (a remainder
smaller than one granule is left out): a request takes whole granules, so it gets
at most one granule - 1 MiB more than it asked for and never more than the node has.

Why straight from the nodes: the vertices are made with the graph's own API, no JGF
document in between, and `add_flat_nodes` also grows a live graph when brokers
join (the traverser is then told the shape changed; allocations stay).
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxnode.broker_conf.rv1 import MEMORY_UNIT, NodeResources, split_hostname
from fluxnode.scheduler.graph.resource_graph import CONTAINMENT, ResourceGraph, gc_paused

# A node's memory becomes at most this many equal vertices.
MEMORY_GRANULES = 128


def memory_granule_mib(memory_mib: int) -> int:
    """Size of one memory vertex of a node with `memory_mib`: the smallest power of two
    (MiB) that splits it into at most MEMORY_GRANULES vertices."""
    granule = 1
    while granule * MEMORY_GRANULES < memory_mib:
        granule *= 2
    return granule


def _vertex(g: ResourceGraph, type_: str, basename: str, name: str, id_: int, rank: int, path: str,
            size: int = 1, unit: str = ""):
    v = g.add_vertex(type_, basename, name, id_, rank=rank, size=size, unit=unit)
    g.set_path(v, CONTAINMENT, path)
    return v


def add_flat_nodes(g: ResourceGraph, nodes: Iterable[NodeResources]) -> bool:
    """Add `nodes` under the graph's cluster vertex, made when missing. The cluster's
    children stay in rank order whatever order brokers joined in (a rank below one already
    there goes into its place), so the walk, and with it every placement, is the same as
    in a graph built from the whole R at once. Returns whether a node went into place
    (its ids then follow the join order: see `renumber_in_rank_order`)."""
    with gc_paused():
        cluster = g.roots.get(CONTAINMENT)
        if cluster is None:
            cluster = _vertex(g, "cluster", "cluster", "cluster0", 0, -1, "/cluster0")
            g.roots[CONTAINMENT] = cluster
        last = cluster.children[-1].rank if cluster.children else -1
        nodes = sorted(nodes, key=lambda n: n.rank)
        for n in nodes:
            basename, node_id = split_hostname(n.hostname) or (n.hostname, n.rank)
            npath = f"/cluster0/{n.hostname}"
            node = _vertex(g, "node", basename or n.hostname, n.hostname, node_id, n.rank, npath)
            g.add_edge(cluster, node)
            leaves = [g.add_vertex(type_, type_, f"{type_}{i}", i, rank=n.rank)
                      for type_, ids in (("core", n.cores), ("gpu", n.gpus)) for i in ids]
            granule = memory_granule_mib(n.memory_mib)
            leaves += [g.add_vertex("memory", "memory", f"memory{k}", k, rank=n.rank,
                                    size=granule, unit=MEMORY_UNIT)
                       for k in range(n.memory_mib // granule)]
            g.add_leaves(node, leaves)
        reordered = bool(nodes) and nodes[0].rank < last  # joined out of rank order
        if reordered:
            cluster.children.sort(key=lambda v: v.rank)
        return reordered


def renumber_in_rank_order(g: ResourceGraph) -> dict[int, int]:
    """Give every vertex the ``uniq_id`` a graph built from the whole R at once would have
    given it (containment pre-order with nodes in rank order, the order `add_flat_nodes`
    makes them in), after nodes joined out of rank order. Ties between equal candidates
    break by ``uniq_id`` (Fluxion's rule), so without this the placement would depend on
    the order brokers joined in. Returns old id -> new id (for the traverser's state)."""
    order = list(g.walk())
    mapping = {}
    for new, v in enumerate(order):
        mapping[v.uniq_id] = new
        v.uniq_id = new
    g.vertices[:] = order
    for index in (g.by_type, g.name_index, g.by_rank, g.by_path):  # (name_index: {} when unindexed)
        for vertices in index.values():
            if type(vertices) is list:  # (by_path holds a lone vertex as itself)
                vertices.sort(key=lambda v: v.uniq_id)
    return mapping


def flat_graph(nodes: Iterable[NodeResources]) -> ResourceGraph:
    """A new service graph of `nodes` (just the cluster vertex when there are none), which
    keeps no list of vertices per name (`ResourceGraph.unindexed_names`)."""
    g = ResourceGraph()
    g.unindexed_names()
    add_flat_nodes(g, nodes)
    return g
