"""An earlier match's allocation read back as vertices, for resource-query's ``update``.

``update`` replays what a match wrote (as R or as JGF) on this graph; each
reader here turns that document into ``(vertex, units, exclusive)`` picks for
``Traverser.replay``, raising ValueError naming what does not fit the graph.
"""

from __future__ import annotations

from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.graph.resource_graph import ResourceGraph, Vertex
from fluxnode.scheduler.readers.jgf import fetch_jgf_keys
from fluxnode.scheduler.traversers.dfu_impl import free_during


class SilentReaderError(ValueError):
    """A reader refuses an update without a word of its own (update_run's line only)."""


def _host_of(doc: dict, ranks: list[int], rank: int) -> str:
    """The host R's nodelist names for ``rank`` (the n-th rank listed, the n-th host)."""
    try:
        hosts = [h for entry in doc["execution"]["nodelist"] for h in hostlist.decode(entry)]
        return hosts[ranks.index(rank)]
    except (KeyError, TypeError, ValueError, IndexError):
        return f"rank {rank}"


def _check_free(v: Vertex, window: tuple[int, int] | None, then: str) -> None:
    """The rv1exec reader's update_vertex: a vertex R names must be free, all of it,
    during the job's window, else the update fails in its words."""
    if window is None or v.schedule is None:
        return
    if free_during(v.schedule, *window) < v.size:
        raise ValueError(f"update_vertex: {v.name} is unavailable.\n{then} for {v.name}.")


def rv1exec_picks(graph: ResourceGraph, doc: dict,
                  window: tuple[int, int] | None = None) -> list[tuple]:
    """(vertex, units, exclusive) for an R: the listed children of each rank's node
    exclusively and whole; the node itself exclusively when all of it is listed;
    what lies between and above shared."""
    try:
        entries = doc["execution"]["R_lite"]
        ranked = [(idset.decode(str(e["rank"])), e.get("children", {})) for e in entries]
    except (KeyError, TypeError, ValueError):  # IdsetError is a ValueError
        raise SilentReaderError() from None  # the rv1exec reader says nothing of these
    picks: dict[int, tuple] = {}

    def share_up(v) -> None:
        while v is not None and v.uniq_id not in picks:
            picks[v.uniq_id] = (v, 1, False)
            v = v.parent

    for ranks, children in ranked:
        if not isinstance(children, dict):
            raise ValueError(f"R_lite children must be a mapping, not {children!r}")
        for rank in ranks:
            nodes = [v for v in graph.by_rank.get(rank, []) if v.type == "node"]
            if not nodes:  # the rv1exec reader's words, naming the rank's host
                host = _host_of(doc, [r for rs, _ in ranked for r in rs], rank)
                raise ValueError(f"add_or_update: couldn't find vertex in graph for {host}.\n"
                                 f"unpack_rank: failed unpacking rank for {host}.")
            node = nodes[0]
            _check_free(node, window, "unpack_rank: failed unpacking rank")
            share_up(node)
            below = {}
            for v in graph.walk(node):
                if v is not node:
                    below.setdefault((v.type, v.id), v)
            for rtype, ids in children.items():
                try:
                    wanted = idset.decode(str(ids))
                except ValueError as exc:
                    raise ValueError(f"rank {rank} {rtype}: {exc}") from None
                for i in wanted:
                    v = below.get((rtype, i))
                    if v is None:  # the rv1exec reader's words
                        raise ValueError(
                            f"add_or_update: couldn't find vertex in graph for {rtype}{i}.\n"
                            f"unpack_child: failed unpacking child for {rtype}{i}.")
                    _check_free(v, window, "unpack_child: failed unpacking child")
                    share_up(v.parent)
                    picks[v.uniq_id] = (v, v.size, True)
            if all(v.uniq_id in picks for v in below.values()):
                picks[node.uniq_id] = (node, 1, True)  # the whole node
    return list(picks.values())


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
