"""An earlier match's allocation read back as vertices, for resource-query's ``update``.

``update`` replays what a match wrote (as R or as JGF) on this graph; each
reader here turns that document into ``(vertex, units, exclusive)`` picks for
``Traverser.replay``, raising ValueError naming what does not fit the graph. The
rv1exec reader also says which vertices it plans itself (``Rv1execPicks.planned``):
Fluxion's update walk after it plans none.
"""

from __future__ import annotations

import dataclasses

from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.graph.resource_graph import ResourceGraph, Vertex
from fluxnode.scheduler.readers.hostname import HostnameIdError, node_name_parts
from fluxnode.scheduler.readers.jgf import fetch_jgf_keys
from fluxnode.scheduler.traversers.dfu_impl import free_during


class SilentReaderError(ValueError):
    """A reader refuses an update without a word of its own (update_run's line only)."""


def _hosts(doc: dict) -> list[str]:
    """R's nodelist as one list of hosts (the rv1exec reader's hostlist)."""
    try:
        return [h for entry in doc["execution"]["nodelist"] for h in hostlist.decode(entry)]
    except (KeyError, TypeError, ValueError):
        raise SilentReaderError() from None


def _check_free(v: Vertex, window: tuple[int, int] | None, then: str) -> None:
    """The rv1exec reader's update_vertex: a vertex R names must be free, all of it,
    during the job's window, else the update fails in its words."""
    if window is None or v.schedule is None:
        return
    if free_during(v.schedule, *window) < v.size:
        raise ValueError(f"update_vertex: {v.name} is unavailable.\n{then}.")


def _find_vertex(graph: ResourceGraph, path: str, rank: int, vid: int,
                 vtype: str) -> Vertex | None:
    """resource_reader_rv1exec_t::find_vertex: the vertex at ``path`` (its parent's path
    and its name: a node right below the root, a child right below its node) with this
    rank, id and type, and size 1."""
    for v in graph.lookup(path):
        if v.rank == rank and v.id == vid and v.size == 1 and v.type == vtype:
            return v
    return None


@dataclasses.dataclass
class Rv1execPicks:
    """What the rv1exec reader's update reads from an R: the picks the update walk takes
    (every vertex R names exclusively, through the edges its update_edges marks, the
    root shared) and the vertices the reader itself plans (``planned``, uniq_ids: each
    child R names, and a rank's node only when R names every other vertex of its rank,
    update_exclusivity). The walk plans no vertex of its own (its upd_plan runs with
    ``full`` false), so what it takes beyond ``planned`` (the rest of a node under a
    node-exclusive policy) is tagged and emitted, never planned."""

    picks: list[tuple[Vertex, int, bool]]
    planned: set[int]


def rv1exec_picks(graph: ResourceGraph, doc: dict,
                  window: tuple[int, int] | None = None) -> Rv1execPicks:
    """Read an R as Fluxion's rv1exec reader updates the graph with it
    (resource_reader_rv1exec_t::unpack_rank and unpack_child): each rank's node is the
    vertex named by R's nodelist right below the root, each child ``TYPE`` ``ID`` the
    vertex ``TYPEID`` right below that node; the first one missing or busy fails the
    update in the reader's words (ValueError)."""
    try:
        entries = doc["execution"]["R_lite"]
        ranked = [(idset.decode(str(e["rank"])), e.get("children", {})) for e in entries]
    except (KeyError, TypeError, ValueError):  # IdsetError is a ValueError
        raise SilentReaderError() from None  # the rv1exec reader says nothing of these
    hosts = _hosts(doc)
    # build_rmap: the n-th of R's ranks, in order, is the n-th host
    rmap = {r: i for i, r in enumerate(sorted({r for rs, _ in ranked for r in rs}))}
    root = graph.root
    picks: dict[int, tuple] = {root.uniq_id: (root, 1, False)}
    planned: set[int] = set()
    updated: dict[int, int] = {}
    for ranks, children in ranked:
        if not isinstance(children, dict):
            raise ValueError(f"R_lite children must be a mapping, not {children!r}")
        for rank in ranks:
            if rmap[rank] >= len(hosts):
                raise SilentReaderError()
            host = hosts[rmap[rank]]
            try:
                _base, nid = node_name_parts(host)
            except HostnameIdError:
                raise ValueError(f"unpack_rank: error splitting hostname={host}; ") from None
            node = _find_vertex(graph, f"{root.path}/{host}", rank, nid, "node")
            if node is None:
                raise ValueError(f"add_or_update: couldn't find vertex in graph for {host}.\n"
                                 f"unpack_rank: failed unpacking rank for {host}.")
            _check_free(node, window, f"unpack_rank: failed unpacking rank for {host}")
            picks[node.uniq_id] = (node, 1, True)
            for rtype, ids in children.items():
                if not isinstance(ids, str):
                    raise SilentReaderError()
                try:
                    wanted = idset.decode(ids)
                except ValueError:
                    raise SilentReaderError() from None
                for i in wanted:
                    name = f"{rtype}{i}"
                    v = _find_vertex(graph, f"{node.path}/{name}", rank, i, rtype)
                    if v is None:  # the rv1exec reader's words
                        raise ValueError(
                            f"add_or_update: couldn't find vertex in graph for {name}.\n"
                            f"unpack_child: failed unpacking child for {name}.")
                    _check_free(v, window, f"unpack_child: failed unpacking child for {name}")
                    picks[v.uniq_id] = (v, v.size, True)
                    planned.add(v.uniq_id)
                    updated[rank] = updated.get(rank, 0) + 1
            if updated.get(rank, 0) == len(graph.by_rank.get(rank, ())) - 1:
                planned.add(node.uniq_id)  # update_exclusivity: all of the rank is named
    return Rv1execPicks(list(picks.values()), planned)


def jgf_picks(graph: ResourceGraph, doc: dict, shorthand: bool = False) -> list[tuple]:
    """(vertex, units, exclusive) for each vertex of a match's JGF, found by path.

    ``shorthand``: the JGF of Fluxion's jgf_shorthand writer, which leaves out what lies
    below an exclusive vertex; its reader takes that whole subtree, exclusively
    (resource_reader_jgf_shorthand_t::fetch_additional_vertices)."""
    fetch_jgf_keys(doc)  # the JGF reader's fetch_jgf, in its words
    nodes = doc["graph"]["nodes"]
    picks = []
    for n in nodes:
        md = n.get("metadata", {}) if isinstance(n, dict) else {}
        paths = md.get("paths") if isinstance(md, dict) else None
        if not isinstance(paths, dict) or not paths:
            raise ValueError(f"JGF vertex {n.get('id') if isinstance(n, dict) else n!r} "
                             "has no paths")
        found, path = _find_vtx(graph, paths, md.get("rank", -1), n.get("id"))
        size, excl = md.get("size", 1), md.get("exclusive", False)
        if not isinstance(size, int) or not isinstance(excl, bool):
            raise ValueError(f"{path}: bad size {size!r} or exclusive {excl!r}")
        picks.append((found, size, excl))
    if shorthand:
        named = {v.uniq_id for v, _n, _x in picks}
        for v, _n, excl in list(picks):
            if excl:
                picks += [(u, u.size, True) for u in graph.walk(v)
                          if u is not v and u.uniq_id not in named]
    return picks


def _find_vtx(graph: ResourceGraph, paths: dict, rank, vid) -> tuple[Vertex, str]:
    """resource_reader_jgf_t::find_vtx: the graph's vertex a JGF vertex names, by each of
    its paths (its subsystems in Fluxion's order, containment first) and its rank
    (exist() wants both), the same vertex by every path; with the first path. Raises
    ValueError in the reader's words."""
    found: Vertex | None = None
    first = ""
    for sub in sorted(paths, key=lambda k: (k != "containment", k)):
        path = paths[sub]
        have = [v for v in graph.lookup(path) if v.rank == rank] if isinstance(path, str) else []
        if not have:
            raise ValueError(f"exist: inconsistent input vertex: nonexistent path ({path}) "
                             f"{vid}.")
        if found is None:
            found, first = have[0], path
        elif have[0] is not found:
            raise ValueError(f"find_vtx: inconsistent input vertex for {path} (id={vid}).")
    assert found is not None  # paths is not empty
    return found, first


def jgf_update_refusal(picks: list[tuple[Vertex, int, bool]], at: int,
                       duration: int) -> str | None:
    """What Fluxion's JGF reader says of the first vertex, in the document's order, that
    the window has no room for (resource_reader_jgf_t::update_vtx_plan): an exclusive
    vertex needs all its units free (it plans its whole size), a shared one must have
    none taken. None when every vertex has room."""
    for v, _needs, exclusive in picks:
        free = v.size if v.schedule is None else free_during(v.schedule, at, duration)
        if free < v.size:
            if exclusive:
                return f"update_vtx_plan: can't add span into {v.name}."
            return f"update_vtx_plan: {v.name} is unavailable."
    return None


def only_other_roots(graph: ResourceGraph, doc: dict) -> bool:
    """Does the JGF name the root of some subsystem, but not of the one the traverser
    walks (``graph.dominant``)? Such a JGF (written under another dominant subsystem) gets
    its exclusive vertices planned by Fluxion's reader and nothing walked or written, and
    the update succeeds (dfu_impl_t::update returns 0 when the dominant root's edge was not
    marked by this read). A JGF naming no root at all fails there."""
    roots = set()
    for n in doc["graph"]["nodes"]:
        for sub, path in (n.get("metadata", {}).get("paths") or {}).items():
            if isinstance(path, str) and path.count("/") == 1:
                roots.add(sub)
    return bool(roots) and graph.dominant not in roots
