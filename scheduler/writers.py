"""Match writers: render a selection the way Fluxion's match writers do.

``simple`` (post-order lines ``---name[N:x]``), ``pretty_simple`` (the same lines last
first, flags spelled out), ``jgf`` (the selected subgraph), ``jgf_shorthand`` (the same
without what lies below a vertex taken exclusively), ``rlite`` (R_lite array), ``rv1``
(R with the JGF ``scheduling`` key), ``rv1_shorthand`` (R with the shorthand JGF) and
``rv1_nosched`` (R without it).
R_lite is grouped by `broker_conf.rv1.R_lite`, the one R_lite grouping.
Every function takes a :class:`~fluxnode.scheduler.traverser.MatchResult` (or
its ``selection`` list) and returns text / a JSON-able dict.
"""

from __future__ import annotations

import errno
import json

from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import R_lite
from fluxnode.scheduler.graph.resource_graph import CONTAINMENT

PREFIX = "      "


def _sel(result):
    return result.selection if hasattr(result, "selection") else result


def simple(result) -> str:
    return "".join(
        f"{PREFIX}{'---' * e.level}{e.vertex.name}[{e.needs}:{'x' if e.exclusive else 's'}]\n"
        for e in _sel(result)
    )


def pretty_simple(result) -> str:
    """The emission (post-order) lines, last first: pretty_sim_match_writers_t::emit_vtx puts
    each line at the *front* of its output, so a parent comes before its children and
    siblings come in reverse emission order."""
    return "".join(
        f"{PREFIX}{'---' * e.level}{e.vertex.name}[{e.needs}:"
        f"{'exclusive' if e.exclusive else 'shared'}]\n"
        for e in reversed(list(_sel(result)))
    )


def _vertex_json(e, labels: dict[int, str] | None = None) -> dict:
    """Fluxion's JGF match writer: defaults are left out (basename == type, size 1...)."""
    v = e.vertex
    md: dict = {"type": v.type}
    if v.basename and v.basename != v.type:
        md["basename"] = v.basename
    if v.name != f"{v.basename}{v.id}":
        md["name"] = v.name
    md["id"] = v.id
    md["rank"] = v.rank
    # the order of jgf_match_writers_t::emit_vtx_base: properties and unit (when set) come
    # before exclusive and size
    if v.properties:  # a std::map in Fluxion: by key
        md["properties"] = dict(sorted(v.properties.items()))
    if v.unit:
        md["unit"] = v.unit
    if e.exclusive:
        md["exclusive"] = True
    if e.needs != 1:
        md["size"] = e.needs
    md["paths"] = dict(sorted(v.paths.items()))
    if labels and v.uniq_id in labels:
        md["ephemeral"] = {"label": labels[v.uniq_id]}
    if getattr(e, "agfilter", None):
        md["agfilter"] = e.agfilter
    return {"id": str(v.uniq_id), "metadata": md}


def jgf(result, shorthand: bool = False, subsystem: str = CONTAINMENT) -> dict:
    """Nodes in emission (post) order; each edge right after its child's subtree.

    ``shorthand``: Fluxion's jgf_shorthand writer, which leaves out every vertex whose
    parent was taken exclusively, and the edge into it (its emit_vtx/emit_edg skip what
    the update walk emits with ``excl_parent``); when it left something out the document
    says so (``"writer": "fluxion:jgf_shorthand"``, see MatchWriters).

    ``subsystem``: the subsystem the walk went down (resource-query's ``-S``); an edge
    of another than containment carries it as metadata (jgf_match_writers_t::emit_edg)."""
    nodes, edges, _complete = jgf_parts(result, shorthand, subsystem)
    return {"graph": {"nodes": nodes, "edges": edges}}


def jgf_parts(result, shorthand: bool = False, subsystem: str = CONTAINMENT,
              labels: dict[int, str] | None = None) -> tuple[list[dict], list[dict], bool]:
    """(nodes, edges, nothing left out) of the JGF writers (see jgf).

    A selection's ``ghosts`` (dfu_impl.Selection: vertices the update walk tagged but did
    not emit) are no nodes, but their edges are there, as Fluxion's upd_dfv writes an
    edge for each child that took something whether or not the child's vertex was
    emitted. A ghost stands at its children's level (the levels after it were shifted
    by one), so it takes the entries at its own level below it as children."""
    walked = getattr(_sel(result), "edges", None)
    if walked is not None:  # the walk wrote its edges itself (find's, traversers.find.Found)
        nodes = [_vertex_json(e, labels) for e in _sel(result)]
        return nodes, _edges_json(walked, subsystem), True
    sel = list(_sel(result))
    seq: list[tuple[object, bool]] = [(e, False) for e in sel]
    for pos, ghost in reversed(getattr(_sel(result), "ghosts", ())):
        seq.insert(pos, (ghost, True))
    pairs = []
    parent_excl: dict[int, bool] = {}  # id(emit) -> its parent was taken exclusively
    stack: list[tuple[int, object]] = []  # (level, emit) of emitted, not yet parented
    for e, ghost in seq:
        below = e.level if ghost else e.level + 1
        kids = []
        while stack and stack[-1][0] == below:
            kids.append(stack.pop()[1])
        stack.append((e.level, e))
        for k in reversed(kids):
            pairs.append((e, k))
            parent_excl[id(k)] = e.exclusive
    # edges are emitted when each child finishes, i.e. in child emission order
    order = {id(x): i for i, (x, _g) in enumerate(seq)}
    pairs.sort(key=lambda pc: order[id(pc[1])])
    keep = [e for e in sel if not (shorthand and parent_excl.get(id(e), False))]
    kept_pairs = [(p, c) for p, c in pairs if not (shorthand and p.exclusive)]
    complete = len(keep) == len(sel) and len(kept_pairs) == len(pairs)
    edges = _edges_json([(p.vertex, c.vertex) for p, c in kept_pairs], subsystem)
    return [_vertex_json(e, labels) for e in keep], edges, complete


def _edges_json(pairs: list, subsystem: str) -> list[dict]:
    """(parent, child) vertices as JGF edges; an edge of another subsystem than
    containment carries it as metadata (jgf_match_writers_t::emit_edg)."""
    edges = [{"source": str(p.uniq_id), "target": str(c.uniq_id)} for p, c in pairs]
    if subsystem != CONTAINMENT:
        for edge in edges:
            edge["metadata"] = {"subsystem": subsystem}
    return edges


# rlite_match_writers_t's gatherer types: the cores and GPUs emitted below one are its
# rank's; storage_node counts as a node there ("To be removed when rv2 is ready")
GATHERER_TYPES = ("node", "storage_node")


def _rank_of(v) -> int:
    while v is not None:
        if v.type in GATHERER_TYPES:
            return v.rank
        v = v.parent
    return -1


def rlite(result) -> list[dict]:
    by_rank: dict[int, dict[str, list[int]]] = {}
    for e in _sel(result):
        v = e.vertex
        if v.type in ("core", "gpu"):
            by_rank.setdefault(_rank_of(v), {}).setdefault(v.type, []).append(v.id)
    kids = {
        r: {t: idset.encode(sorted(set(ids))) for t, ids in sorted(types.items())}
        for r, types in by_rank.items()
    }
    # a graph without ranks (GRUG) puts every node at rank -1, as Fluxion writes it: never grouped
    unranked = [{"rank": str(r), "children": kids[r]} for r in sorted(kids) if r < 0]
    # rlite_match_writers_t::fill walks m_gl_gatherer, a std::map keyed by each node's
    # children as json_dumps writes them (get_gatherer_children): the entries come in the
    # byte order of that text, not in rank order
    ranked = R_lite({r: k for r, k in kids.items() if r >= 0})
    return unranked + sorted(ranked, key=lambda x: json.dumps(x["children"]))


def _nodelist(result) -> list[str]:
    """The nodes R_lite names: rlite_match_writers_t gathers a node only when cores or GPUs
    of it were emitted before it (its reducer is set), so a node selected whole, with
    nothing below it in the selection, is in neither R_lite nor the nodelist."""
    return [n for _r, n in _by_rank(_gathered_nodes(result))]


def _by_rank(nodes: list) -> list[tuple[int, str]]:
    """(rank, name) of each of ``nodes``, by rank, each once."""
    return sorted({(v.rank, v.name) for v in nodes})


def _node_properties(nodes: list) -> dict[str, str]:
    """rlite_match_writers_t's property gatherer over the gathered ``nodes``: each node
    property (``name`` or ``name=value``) -> the idset of those nodes' ranks, by property."""
    ranks: dict[str, set[int]] = {}
    for v in nodes:
        for k, val in v.properties.items():
            ranks.setdefault(f"{k}={val}" if val != "" else k, set()).add(v.rank)
    return {p: idset.encode(sorted(rs)) for p, rs in sorted(ranks.items())}


def _gathered_nodes(result) -> list:
    """The node vertices the rlite writer gathers (see _nodelist)."""
    with_units = set()
    for e in _sel(result):
        v = e.vertex
        if v.type in ("core", "gpu"):
            while v is not None and v.type not in GATHERER_TYPES:
                v = v.parent
            if v is not None:
                with_units.add(v.uniq_id)
    return [e.vertex for e in _sel(result)
            if e.vertex.type in GATHERER_TYPES and e.vertex.uniq_id in with_units]


def rv1_nosched(result) -> dict:
    at = getattr(result, "at", 0)
    duration = getattr(result, "duration", 0)
    R = {
        "version": 1,
        "execution": {
            "R_lite": rlite(result),
            "nodelist": [hostlist.encode(_nodelist(result))] if _nodelist(result) else [],
            "starttime": at,
            "expiration": at + duration if duration < 2**62 else 0,
        },
    }
    return R


def rv1(result) -> dict:
    R = rv1_nosched(result)
    R["scheduling"] = jgf(result)
    return R


def dumps(obj) -> str:
    return json.dumps(obj)


FORMATS = ("simple", "pretty_simple", "jgf", "jgf_shorthand", "rlite", "rv1", "rv1_nosched",
           "rv1_shorthand")
# the writers whose JGF is Fluxion's jgf_shorthand one (see jgf)
SHORTHAND = ("jgf_shorthand", "rv1_shorthand")
# jgf_shorthand_match_writers_t::m_uri
SHORTHAND_URI = "fluxion:jgf_shorthand"


class WriterEmitError(Exception):
    """A match writer's emit failed with ``errno`` (its buffers are kept, as Fluxion's are)."""

    def __init__(self, err: int) -> None:
        super().__init__(err)
        self.errno = err


class MatchWriters:
    """The one writer object resource-query keeps for its whole session (``rq->writers``):
    a traversal (match, update, find) adds what it emits, and ``emit`` (a match's
    ``emit(std::stringstream)``) or ``emit_json`` (find's) writes and clears what has
    gathered. A writer that cannot write keeps its buffers, so what one traversal left
    shows up in the next answer (match_writers.cpp):

    - ``jgf_match_writers_t::check_array_sizes``: no vertices and no edges write nothing;
      vertices without edges (or edges without vertices) fail with ENOENT, the arrays kept;
    - ``rlite_match_writers_t::emit_json``: no node gathered (no node with cores or GPUs
      emitted) fails with EINVAL;
    - ``rv1_match_writers_t::emit_json`` / ``emit``: with R_lite or the JGF empty it writes
      nothing and returns 0, keeping both; ``rv1_nosched`` does the same on an empty R_lite;
    - ``sim``/``pretty_sim``: always write what they hold and clear it.
    """

    def __init__(self, fmt: str, subsystem: str = CONTAINMENT) -> None:
        self.fmt = fmt
        self.subsystem = subsystem  # the walk's (dominant) subsystem: its JGF edges say so
        self.lines: list = []  # simple / pretty_simple emission entries
        self.vout: list[dict] = []  # jgf_match_writers_t::m_vout
        self.eout: list[dict] = []  # jgf_match_writers_t::m_eout
        self.rl: list = []  # what the rlite writer has been given since it last wrote
        self.at = 0  # emit_tm's start and end, kept until the next emit_tm
        self.duration = 0
        # jgf_shorthand_match_writers_t::m_complete: set false the first time a vertex is
        # left out and never set back, so every JGF after it names the writer
        self.complete = True

    def add(self, result, excl_parent: bool = True,
            labels: dict[int, str] | None = None) -> None:
        """A traversal's emit_vtx/emit_edg calls (and its emit_tm). ``excl_parent``
        False: the walk says no vertex's parent is exclusive (find's, dom_find_dfv), so
        the shorthand writers leave nothing out. ``labels``: uniq_id -> the label each
        vertex keeps (Traverser.labels_of)."""
        sel = _sel(result)  # a list, or a Selection with ghosts (jgf_parts reads them)
        if not isinstance(sel, list):
            sel = list(sel)
        self.at = getattr(result, "at", 0)
        self.duration = getattr(result, "duration", 0)
        if self.fmt in ("simple", "pretty_simple"):
            self.lines += sel
        if self.fmt in ("jgf", "rv1", *SHORTHAND):
            nodes, edges, complete = jgf_parts(sel, self.fmt in SHORTHAND and excl_parent,
                                               self.subsystem, labels)
            self.vout += nodes
            self.eout += edges
            self.complete = self.complete and complete
        if self.fmt in ("rlite", "rv1", "rv1_nosched", "rv1_shorthand"):
            self.rl += sel

    # -- the parts -------------------------------------------------------------------
    def _jgf_json(self) -> dict | None:
        if not self.vout and not self.eout:
            return None
        if not self.vout or not self.eout:
            raise WriterEmitError(errno.ENOENT)
        o: dict = {"graph": {"nodes": self.vout, "edges": self.eout}}
        if not self.complete:
            o["writer"] = SHORTHAND_URI
        self.vout, self.eout = [], []
        return o

    def _rlite_empty(self) -> bool:
        return not _nodelist(self.rl)

    def _rlite_json(self) -> tuple[list, list[str], dict[str, str]]:
        nodes = _gathered_nodes(self.rl)
        ranked = _by_rank(nodes)
        if not ranked or ranked[0][0] < 0:
            # no node gathered; or rlite_match_writers_t::fill encodes each gathered
            # node's rank into an idset (compress_ids), which refuses a negative id: a node
            # of rank -1 (a JGF without ranks) fails, and the gatherer keeps it
            raise WriterEmitError(errno.EINVAL)
        lite, props = rlite(self.rl), _node_properties(nodes)
        self.rl = []
        return lite, [hostlist.encode([n for _r, n in ranked])], props

    def _execution(self, lite: list, nodelist: list[str], props: dict[str, str]) -> dict:
        ex: dict = {"R_lite": lite, "nodelist": nodelist}
        if props:  # rv1_match_writers_t::emit_json packs "properties" only when some
            ex["properties"] = props
        ex["starttime"] = self.at
        ex["expiration"] = self.at + self.duration if self.duration < 2**62 else 0
        return ex

    # -- emitting --------------------------------------------------------------------
    def emit_json(self):
        """``emit_json``: the object written (a string for the simple writers), or None."""
        if self.fmt in ("simple", "pretty_simple"):
            text = simple(self.lines) if self.fmt == "simple" else pretty_simple(self.lines)
            self.lines = []
            return text or None
        if self.fmt in ("jgf", "jgf_shorthand"):
            return self._jgf_json()
        if self.fmt == "rlite":
            return self._rlite_json()[0]
        with_jgf = self.fmt in ("rv1", "rv1_shorthand")
        if self._rlite_empty() or (with_jgf and not self.vout and not self.eout):
            return None
        lite, nodelist, props = self._rlite_json()
        R = {"version": 1, "execution": self._execution(lite, nodelist, props)}
        if with_jgf:
            R["scheduling"] = self._jgf_json()
        return R

    def emit(self) -> str:
        """``emit(std::stringstream &)``: the text a match writes."""
        o = self.emit_json()
        if o is None:
            return ""
        return o if isinstance(o, str) else dumps(o) + "\n"
