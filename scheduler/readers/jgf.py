"""JGF reader: build a resource graph from JSON Graph Format (Fluxion's R "scheduling" key).

Vertices come in file order (that order is Fluxion's ``uniq_id`` order when the
file has no ``uniq_id``); containment edges give the tree. Edges whose
relation is ``in`` (child to parent) are the reverse of a ``contains`` edge and
are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from fluxnode.scheduler.graph.resource_graph import (
    CONTAINMENT,
    ResourceGraph,
    Vertex,
    freeze_built_graph,
    gc_paused,
)
from fluxnode.scheduler.readers import jansson_error as jansson


class JgfError(ValueError):
    """The JGF document is malformed (message names the offending part)."""


class JgfDuplicateRoot(JgfError):
    """A new vertex is a subsystem's root (its path has one "/") where the graph has one
    already: resource_reader_jgf_t::add_graph_metadata's EINVAL, in its words. The
    vertices before it in the document stay added (Fluxion's reader stops there too)."""

    def __init__(self, subsystem: str) -> None:
        super().__init__(f"add_graph_metadata: failed to add root metadata for {subsystem} "
                         "subsystem. Possible duplicate root.")


class JgfFetchError(JgfError):
    """resource_reader_jgf.cpp's fetch_jgf refuses the document, in its words: no JSON
    jansson reads (jansson's own words inside), or no graph, nodes or edges key."""


def fetch_jgf_keys(doc) -> None:
    """fetch_jgf's checks of a parsed document's keys, in its order and words."""
    body = doc.get("graph") if isinstance(doc, dict) else None
    if body is None:
        raise JgfFetchError("fetch_jgf: JGF does not contain a required key (graph).")
    for key in ("nodes", "edges"):
        if not isinstance(body, dict) or body.get(key) is None:
            raise JgfFetchError(f"fetch_jgf: JGF does not contain a required key ({key}).")


def load_jgf_document(obj_or_path) -> dict:
    """A JGF document from a dict (as is), JSON text (str or bytes) or a file path."""
    if isinstance(obj_or_path, dict):
        return obj_or_path
    if isinstance(obj_or_path, bytes):
        text: bytes | str = obj_or_path
    elif isinstance(obj_or_path, (str, Path)) and not str(obj_or_path).lstrip().startswith("{"):
        try:
            text = Path(obj_or_path).read_bytes()
        except OSError as exc:
            raise JgfError(f"cannot read {obj_or_path}: {exc.strerror}") from exc
    else:
        text = str(obj_or_path)
    try:
        return jansson.loads(text)
    except jansson.JanssonError as exc:
        raise JgfFetchError(f"fetch_jgf: json_loads returned an error: {exc}.") from None
    except RecursionError:  # deeper than Python's json reads (jansson: 2,048 levels)
        raise JgfError("JSON nested too deep") from None


def add_jgf(g: ResourceGraph, doc: dict, *, rank_override: int | None = None) -> list[Vertex]:
    """Add the vertices/edges of ``doc`` to ``g`` as Fluxion's JGF reader unpacks them
    (resource_reader_jgf_t::unpack_vertices, unpack_edges).

    A document vertex is a graph vertex already there when one of its paths names a
    vertex of the same rank (vtx_in_graph; the document's rank, -1 when it has none);
    otherwise it is a new vertex, even at a path the graph has: a subgraph naming node0
    with another rank than the graph's node0 makes a second node0 (attach's vertex hangs
    below that one, out of the tree's reach, so no match finds it). An edge is added only
    when it touches a vertex this document added."""
    try:
        nodes = doc["graph"]["nodes"]
        edges = doc["graph"].get("edges", [])
    except (KeyError, TypeError) as exc:
        raise JgfError("JGF must hold graph.nodes") from exc
    by_key: dict[str, Vertex] = {}
    added: list[Vertex] = []
    for i, n in enumerate(nodes):
        md = n.get("metadata")
        if not isinstance(md, dict):
            raise JgfError(f"graph.nodes[{i}]: metadata missing")
        for k in ("type", "paths"):
            if k not in md:
                raise JgfError(f"graph.nodes[{i}].metadata: key {k!r} missing")
        paths = md["paths"]
        want_rank = int(md.get("rank", -1))
        existing = [v for p in (paths.values() if isinstance(paths, dict) else ())
                    for v in g.lookup(p) if v.rank == want_rank]
        if existing:
            by_key[str(n.get("id"))] = existing[0]
            continue
        if isinstance(paths, dict):
            for ssys, p in paths.items():
                if isinstance(p, str) and p.count("/") == 1 and ssys in g.roots:
                    raise JgfDuplicateRoot(ssys)
        type_ = md["type"]
        basename = md.get("basename", type_)
        uid = md.get("uniq_id")
        try:
            node_key = int(n.get("id"))
        except (TypeError, ValueError):
            node_key = None
        if uid is None:
            uid = node_key
        # Without an "id", Fluxion's apply_defaults numbers the vertex by its uniq_id (the
        # JGF node id when that is missing too), a node by its hostname's number
        # (compute12 is 12) when the name ends in digits
        if "id" in md:
            id_ = int(md["id"])
        else:
            id_ = uid if uid is not None else -1
            suffix = re.search(r"\d+\Z", str(md.get("name", ""))) if type_ == "node" else None
            if suffix:
                id_ = int(suffix.group(0))
        name = md.get("name", f"{basename}{id_}")
        rank = int(md.get("rank", -1)) if rank_override is None else rank_override
        # "unit" is read and checked but not kept: resource_reader_jgf_t::add_vertex never
        # copies it to the vertex, so a graph read from JGF has no units (the writers show none)
        v = g.add_vertex(type_, basename, name, id_, rank=rank, size=int(md.get("size", 1)),
                         unit="", uniq_id=uid)
        if uid is None:
            v.uniq_id = len(g.vertices) - 1
        v.properties = {str(k): str(val) for k, val in (md.get("properties") or {}).items()}
        # Fluxion's JGF holds the status as resource_pool_t::status_t, an int (DOWN is
        # 1); a "down" string is taken too
        status = md.get("status", 0)
        if status == 1 and not isinstance(status, bool) or str(status).lower() == "down":
            v.status = "down"
        for ssys, p in paths.items():
            g.set_path(v, ssys, p)
            if p.count("/") == 1 and ssys not in g.roots:
                g.roots[ssys] = v
                if ssys not in g.subsystems:
                    g.subsystems.append(ssys)
        by_key[str(n.get("id"))] = v
        added.append(v)
    new = {id(v) for v in added}
    for i, e in enumerate(edges):
        try:
            src, tgt = by_key[str(e["source"])], by_key[str(e["target"])]
        except KeyError as exc:
            raise JgfError(f"graph.edges[{i}]: unknown vertex {exc}") from exc
        md = e.get("metadata") or {}
        ssys = md.get("subsystem")
        relation = "contains"
        if isinstance(md.get("name"), dict):
            ssys, relation = next(iter(md["name"].items()))
        ssys = ssys or CONTAINMENT
        if relation == "in" or (id(src) not in new and id(tgt) not in new):
            continue
        g.add_edge(src, tgt, ssys)
    return added


def read_jgf(obj_or_path) -> ResourceGraph:
    g = ResourceGraph()
    with gc_paused():
        add_jgf(g, load_jgf_document(obj_or_path))
        freeze_built_graph(g)
    if CONTAINMENT not in g.roots:
        raise JgfError("JGF has no containment root")
    return g
