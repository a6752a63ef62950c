"""The resource graph: vertices of a containment hierarchy plus lookup indexes.

Fluxion keeps its model in a boost adjacency list with side indexes; we keep
vertices as slotted objects in a list indexed by ``uniq_id`` (creation order,
which Fluxion's tie-breaking and output order depend on) and children lists
per subsystem. A networkx ``DiGraph`` view is built on demand by
:meth:`ResourceGraph.to_networkx` for analysis and tests; the matcher never
uses it because per-vertex networkx dicts cost ~10x the memory and time on a
16k-node graph.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType

CONTAINMENT = "containment"

# Most vertices never carry scheduling state or properties; they share these
# read-only empties until first written (see Vertex.hold) to keep a
# 16k-node graph (1.2M vertices) well under 2 GiB.
_NO_DICT: dict = MappingProxyType({})  # type: ignore[assignment]
_NO_SET: set = frozenset()  # type: ignore[assignment]
_NO_LIST: list = ()  # type: ignore[assignment]
_name_of = attrgetter("name")

# A vertex's `_more`: (basename, unit, properties, paths of every subsystem, aux
# edges). Most vertices set none of the last three and share their basename and unit
# with every vertex of their type, so they share one tuple per (basename, unit): a
# 1,000-node service graph has 4 such tuples for its 197,001 vertices. A vertex that
# sets a property, a second subsystem's path or an aux edge gets a tuple of its own.
# At most SHARED_EXTRAS_MAX pairs are shared (a graph of a million basenames, e.g. a
# hostile JGF, gets a tuple per vertex rather than a table that outlives it).
SHARED_EXTRAS_MAX = 4096
_shared_extras: dict[tuple[str, str], tuple] = {}


def _extras(basename: str, unit: str, properties: dict[str, str] = _NO_DICT,
            paths: dict[str, str] = _NO_DICT,
            aux: dict[str, list[Vertex]] | None = None) -> tuple:
    """The `_more` tuple of those fields: the shared one when the last three are empty."""
    if properties is _NO_DICT and paths is _NO_DICT and aux is None:
        key = (basename, unit)
        more = _shared_extras.get(key)
        if more is None:
            more = (basename, unit, _NO_DICT, _NO_DICT, None)
            if len(_shared_extras) < SHARED_EXTRAS_MAX:
                _shared_extras[key] = more
        return more
    return (basename, unit, properties, paths, aux)


@contextmanager
def gc_paused():
    """Building a graph allocates millions of objects that all live on; the cyclic
    GC would rescan them over and over (most of build time), so pause it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Graphs at least this big are frozen out of the cyclic GC once built (see freeze_for_gc).
FREEZE_MIN_VERTICES = 20_000
# Young-generation threshold for a process that holds such a graph (CPython's default: 700).
GC_GEN0_THRESHOLD = 20_000
# How far short of GC_GEN0_THRESHOLD a match's end freezes (see freeze_job_state).
FREEZE_SLACK = 1_000
# Set once freeze_for_gc has run (gc.get_freeze_count() walks every frozen object).
_graph_frozen = False
# The graph freeze_built_graph froze, while it is the only thing frozen.
_frozen_graph: weakref.ref | None = None


def freeze_built_graph(g: ResourceGraph) -> None:
    """Freeze a reader's graph, just built with the GC paused, before the GC runs again.

    While the GC was paused every object of the build piled up in the young generation;
    the first allocation after it is resumed would trigger a collection that scans them
    all (0.65 s for 16,384 nodes, a fifth of the load). Only when nothing is frozen yet
    (a fresh process): a graph that replaces a frozen one is left to freeze_for_gc,
    which must collect the old one first. Whatever its size, the graph's leaves give up
    their path strings first (ResourceGraph.compact_paths): the build is done."""
    global _frozen_graph
    g.compact_paths()
    if len(g.vertices) < FREEZE_MIN_VERTICES or gc.get_freeze_count():
        return
    gc.freeze()
    _frozen_graph = weakref.ref(g)


def freeze_for_gc(g: ResourceGraph | None = None) -> None:
    """Keep the objects alive now (a freshly built graph ``g``) out of the cyclic GC's sight,
    once ``g``'s new leaves gave up their path strings (ResourceGraph.compact_paths).

    A graph lives as long as its scheduler and holds ~10 objects per vertex. Left to
    the collector, the first collections after a build promote and rescan them all: a
    match that happened to trigger one took 0.6-1.5 s instead of 0.16 s on 5,000 nodes,
    and every later full collection rescans them again. Frozen objects are never
    scanned. Whatever an earlier call froze (a graph since replaced, which has parent
    <-> child cycles) is unfrozen and collected first, so a replaced graph is still freed;
    what freeze_built_graph froze of ``g`` itself stays frozen.

    Every allocation then adds planner spans that live as long as the job; collecting
    the young generation every 700 allocations rescans them again and again (40% of a
    single-core first-match allocation on 5,000 nodes), so the process's young
    threshold is raised to GC_GEN0_THRESHOLD (a pause stays a few milliseconds).
    """
    global _graph_frozen, _frozen_graph
    if g is not None:
        g.compact_paths()
    own = g is not None and _frozen_graph is not None and _frozen_graph() is g
    _frozen_graph = None
    if not own and gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()
    gc.freeze()
    _graph_frozen = True
    gen0, gen1, gen2 = gc.get_threshold()
    if 0 < gen0 < GC_GEN0_THRESHOLD:
        gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def freeze_job_state() -> bool:
    """At the end of a match (run with the GC paused, see Traverser.match), once the
    young generation holds GC_GEN0_THRESHOLD tracked objects (one gang's planner spans,
    tags and sets on thousands of vertices, or what a few hundred small matches kept:
    their outcomes in the subtree caches and the fast-mode root index), move them out
    of the cyclic GC's sight as freeze_for_gc does for the graph. They live until a
    job is cancelled or an outcome replaced and hold no reference cycles, so
    refcounting frees them then; scanning them is pure cost (a third of a 1,000-node
    gang, a quarter of a single-core ``low`` match). ``gc.freeze`` is O(1).

    The trade-off: cyclic garbage that happens to sit in the young generation at this
    moment is never collected. It is small (under GC_GEN0_THRESHOLD objects, and only
    after such big matches); tests check that a gang's match and cancel leave nothing
    frozen behind. Returns whether it froze.

    It freezes FREEZE_SLACK objects short of the threshold: a match that ended just
    short of it would otherwise leave the next young collection to whatever is
    allocated before the next match pauses the GC (the pause's own exit is enough)."""
    if not _graph_frozen or gc.get_count()[0] < GC_GEN0_THRESHOLD - FREEZE_SLACK:
        return False
    gc.freeze()
    return True


def _less(held: set[int], jobid: int) -> set[int]:
    """``held`` without ``jobid``: changed in place when it is the vertex's own set,
    else (a shared read-only one) a new one, or the shared empty."""
    if type(held) is set:
        held.discard(jobid)
        return held
    return held - {jobid} or _NO_SET  # type: ignore[return-value]


def _popped(spans: dict[int, int], jobid: int) -> tuple[dict[int, int], int | None]:
    """``spans`` without ``jobid``, and ``jobid``'s span id (None: it had none). A
    shared read-only map is copied first (see _less)."""
    if jobid not in spans:
        return spans, None
    if type(spans) is not dict:
        spans = dict(spans)
    return spans, spans.pop(jobid)


def _more_field(i: int, doc: str) -> property:
    """Field ``i`` of a vertex's `_more` tuple as an attribute: written as a new tuple,
    the shared one again when it holds only what every vertex of its kind holds."""

    def get(v: Vertex):
        return v._more[i]

    def put(v: Vertex, value) -> None:
        more = list(v._more)
        more[i] = value
        v._more = _extras(*more)

    return property(get, put, doc=doc)


class LeafHold:
    """The containers one job's fresh leaves of subtrees it takes whole share (see
    Vertex.hold_whole): tagged with the job, its x_checker and schedule spans both
    span id 1 (in the planners those leaves share too, see Planner.share)."""

    __slots__ = ("tags", "spans", "allocated")

    def __init__(self, jobid: int, allocated: bool) -> None:
        self.tags: frozenset[int] = frozenset((jobid,))
        self.spans: MappingProxyType[int, int] = MappingProxyType({jobid: 1})
        self.allocated = allocated


class InnerHold:
    """The containers one job's fresh inner vertices share when the update walk takes
    them the same way (see Vertex.hold_inner): a gang's 1,000 nodes, and its 1,000
    sockets. Tagged with the job, its x_checker span id 1, its subtree-filter span id 0
    (``filtered``), and when it takes units of the vertex itself (``units``) its
    schedule span id 1, allocated or reserved."""

    __slots__ = ("tags", "xspans", "spans", "agspans", "allocated", "units")

    def __init__(self, jobid: int, allocated: bool, units: bool, filtered: bool) -> None:
        self.tags: frozenset[int] = frozenset((jobid,))
        self.xspans: MappingProxyType[int, int] = MappingProxyType({jobid: 1})
        self.spans: Mapping[int, int] = self.xspans if units else _NO_DICT
        self.agspans: Mapping[int, int] = \
            MappingProxyType({jobid: 0}) if filtered else _NO_DICT
        self.allocated = allocated
        self.units = units


class Vertex:
    """One resource pool (a node, a core, 2 GB of memory...)."""

    # 20 slots, a 192-byte object with its GC header (a slot is 8 bytes on each of a
    # 1,000-node service graph's 197,001 vertices): the 16 the compiled loops read at
    # their offsets (traversers/_slots.h) stay slots, and what most vertices share or
    # leave empty (basename, unit, properties, other subsystems' paths, aux edges) is one
    # tuple in `_more` (see _extras), read through properties of the same names. A 21st
    # slot, never set, kept the object at 208 bytes while a 192-byte vertex was measured
    # 4% dearer per `low` or `lonode` match; measured again with the traversers of
    # 2026-11-29 (bench/sched_instructions.py --matches 200, PYTHONHASHSEED 0-2) it is
    # 1.2-1.3% dearer for those two and the same for `first`, for 3 MiB less on the
    # leader's graph, so it went (branch leader44); with the round's other changes the
    # three were within 0.2% of main's. Not pinned down: vertices hash by address in
    # the traversers' sets and dicts, and the object size sets the addresses' stride.
    # Numbers: docs/benchmarks.md, the leader's memory.
    __slots__ = (
        "uniq_id", "type", "name", "id", "rank", "size", "status", "_path", "_more",
        "children", "parent",
        # scheduling state (owned by the traverser)
        "spans", "xspans", "tags", "agspans", "allocations", "reservations",
        "schedule", "x_checker", "subplan",
    )

    def __init__(self, uniq_id: int, type_: str, basename: str, name: str, id_: int,
                 rank: int = -1, size: int = 1, unit: str = "",
                 path: str = "", parent: Vertex | None = None) -> None:
        self.uniq_id = uniq_id
        self.type = type_
        self.name = name
        self.id = id_
        self.rank = rank
        self.size = size
        self.status = "up"
        # The containment path ("" until set; None: its parent's path, "/" and its name,
        # see ResourceGraph.compact_paths). Every subsystem's path in the order they
        # were set once the vertex is in a second subsystem is in `_more` (`_paths`):
        # a dict per vertex would be 184 bytes on each of a 16,384-node graph's 1.2M
        # vertices.
        self._path: str | None = path
        self._more: tuple = _extras(basename, unit)
        self.children: list[Vertex] = _NO_LIST
        self.parent: Vertex | None = parent  # set here only by a reader that links it
        # jobid -> span id in the planner.Planner ``schedule`` (this pool's units over
        # time), ``x_checker`` (jobs holding anything at or below it) and the
        # planner_multi.PlannerMulti ``subplan`` (free units of each type below it);
        # the planners are made on first use
        self.spans: dict[int, int] = _NO_DICT
        self.xspans: dict[int, int] = _NO_DICT
        self.tags: set[int] = _NO_SET
        self.agspans: dict[int, int] = _NO_DICT
        self.schedule = None
        self.x_checker = None
        self.subplan = None
        self.allocations: set[int] = _NO_SET
        self.reservations: set[int] = _NO_SET

    # What `_more` holds, read and written as attributes (see _extras).
    basename = _more_field(0, "The basename (\"core\" of core7).")
    unit = _more_field(1, "The unit of its size (\"\" when none).")
    properties = _more_field(2, "Property -> value (a shared read-only empty until one is set).")
    _paths = _more_field(3, "Subsystem -> path once it is in a second subsystem, else empty.")
    aux_children = _more_field(4, "Subsystem -> its children there (None: it has none).")

    # Writers of the scheduling containers. A container that is not a plain set or
    # dict is shared and read-only: the empties every vertex starts with (most
    # vertices a job touches need only some containers; a gang's 3,000 vertices would
    # otherwise get 18,000), or one job's LeafHold, which every fresh leaf of a subtree
    # that job takes whole holds (64 cores of an exclusive node: 4 containers, not
    # 256). A writer copies such a container first; one that is missed raises
    # (frozenset and MappingProxyType have no add, pop or discard) instead of
    # changing the other holders.
    def hold(self, jobid: int, xspan: int) -> None:
        """``jobid`` holds something at or below this vertex (its x_checker span)."""
        if type(self.tags) is not set:
            self.tags = set(self.tags)
        if type(self.xspans) is not dict:
            self.xspans = dict(self.xspans)
        self.tags.add(jobid)
        self.xspans[jobid] = xspan

    def hold_units(self, jobid: int, span: int, allocated: bool) -> None:
        """``jobid`` holds units of this vertex itself (its schedule span), allocated now
        or reserved for later."""
        if type(self.spans) is not dict:
            self.spans = dict(self.spans)
        self.spans[jobid] = span
        if allocated:
            if type(self.allocations) is not set:
                self.allocations = set(self.allocations)
            self.allocations.add(jobid)
        else:
            if type(self.reservations) is not set:
                self.reservations = set(self.reservations)
            self.reservations.add(jobid)

    def hold_whole(self, held: LeafHold) -> None:
        """A fresh leaf (no container written yet) joins a subtree its job takes whole:
        what hold and hold_units with span id 1 give it, as that job's shared
        containers."""
        self.tags = held.tags
        self.xspans = self.spans = held.spans
        if held.allocated:
            self.allocations = held.tags
        else:
            self.reservations = held.tags

    def hold_inner(self, held: InnerHold) -> None:
        """A fresh inner vertex (no container written yet) that a job takes as it took
        others of the walk: what hold, hold_units and set_agspan with span ids 1, 1
        and 0 give it, as that job's shared containers."""
        self.tags = held.tags
        self.xspans = held.xspans
        self.spans = held.spans
        self.agspans = held.agspans
        if held.units:
            if held.allocated:
                self.allocations = held.tags
            else:
                self.reservations = held.tags

    def drop_hold(self, jobid: int) -> int | None:
        """Undo :meth:`hold`: ``jobid`` no longer holds anything here; returns its
        x_checker span id (None when it held none)."""
        if jobid in self.tags:
            self.tags = _less(self.tags, jobid)
        self.xspans, sid = _popped(self.xspans, jobid)
        return sid

    def drop_units(self, jobid: int) -> int | None:
        """Undo :meth:`hold_units`; returns ``jobid``'s schedule span id (None when it
        held none)."""
        if jobid in self.allocations:
            self.allocations = _less(self.allocations, jobid)
        if jobid in self.reservations:
            self.reservations = _less(self.reservations, jobid)
        self.spans, sid = _popped(self.spans, jobid)
        return sid

    def set_agspan(self, jobid: int, span: int) -> None:
        """``jobid``'s span in this vertex's subtree planner."""
        if type(self.agspans) is not dict:
            self.agspans = dict(self.agspans)
        self.agspans[jobid] = span

    def drop_agspan(self, jobid: int) -> int | None:
        """Undo :meth:`set_agspan`; returns ``jobid``'s subtree-planner span id (None
        when it held none)."""
        self.agspans, sid = _popped(self.agspans, jobid)
        return sid

    def drop_xspan(self, jobid: int) -> int | None:
        """``jobid``'s x_checker span goes, its tag stays (a partial cancel that leaves
        part of the job below); returns the span id (None when it held none)."""
        self.xspans, sid = _popped(self.xspans, jobid)
        return sid

    def set_property(self, key: str, value: str) -> None:
        if self.properties is _NO_DICT:
            self.properties = {}
        self.properties[key] = value

    @property
    def path(self) -> str:
        """The containment path ("" when it has none)."""
        p = self._path
        if p is None:  # a leaf compact_paths left its string out of
            return f"{self.parent.path}/{self.name}"
        return p

    @path.setter
    def path(self, path: str) -> None:
        if self.children:  # those that derive theirs from this one keep what they had
            for c in self.children:
                if c._path is None and c.parent is self:
                    c._path = c.path
        self._path = path

    def set_path(self, subsystem: str, path: str) -> None:
        if subsystem == CONTAINMENT:
            self.path = path
            if self._paths:
                self._paths[CONTAINMENT] = path
            return
        if not self._paths:
            self._paths = {CONTAINMENT: self.path} if self.path else {}
        self._paths[subsystem] = path

    def path_in(self, subsystem: str) -> str:
        """This vertex's path in ``subsystem`` ("" when it is not in it)."""
        if subsystem == CONTAINMENT:
            return self.path
        return self._paths.get(subsystem, "")

    @property
    def paths(self) -> dict[str, str]:
        """Subsystem -> path, in the order they were set (a new dict)."""
        if self._paths:
            return dict(self._paths)
        return {CONTAINMENT: self.path} if self.path else {}

    def __repr__(self) -> str:
        return f"Vertex({self.path or self.name})"


@dataclass
class ResourceGraph:
    """Vertices, roots per subsystem and the indexes the matcher needs."""

    vertices: list[Vertex] = field(default_factory=list)
    roots: dict[str, Vertex] = field(default_factory=dict)
    # path -> its vertex, or a list of them when several share it (siblings with one
    # name): a one-element list per vertex would cost 64 bytes and an allocation each.
    # Leaves a reader made in bulk under a parent of a path of its own, with names
    # their siblings do not share, are not in it (see index_leaves): lookup finds one
    # among its parent's children. A 16,384-node graph's 1.1M cores would otherwise
    # take 0.5 s of cache-missing inserts into a 40 MB table.
    by_path: dict[str, Vertex | list[Vertex]] = field(default_factory=dict)
    leaf_paths: int = 0  # how many paths the leaves left out of by_path have
    by_type: dict[str, list[Vertex]] = field(default_factory=dict)
    # name -> its vertices in creation order (Fluxion's by_name): see the by_name property
    name_index: dict[str, list[Vertex]] = field(default_factory=dict, repr=False)
    # None: names are indexed in `name_index`. A dict (name -> the one string of that name):
    # they are not, see unindexed_names
    name_strings: dict[str, str] | None = field(default=None, repr=False)
    by_rank: dict[int, list[Vertex]] = field(default_factory=dict)
    subsystems: list[str] = field(default_factory=lambda: [CONTAINMENT])
    # containment edges into a vertex that already had a parent (Fluxion's multi-tier
    # storage: a unit under its rack and its tier); 0: a walk meets each vertex once
    shared_children: int = 0
    # the subsystem whose tree is this graph's containment tree (see project)
    dominant: str = CONTAINMENT
    # vertices[:compacted] went through compact_paths
    compacted: int = field(default=0, compare=False, repr=False)

    @property
    def by_name(self) -> dict[str, list[Vertex]]:
        """Name -> its vertices in creation order (Fluxion's by_name map; resource-query's
        ``stat`` counts its keys). A graph that does not index names
        (`unindexed_names`) makes it from `vertices` for each reader, a new dict a
        writer's changes do not reach."""
        if self.name_strings is None:
            return self.name_index
        out: dict[str, list[Vertex]] = {}
        for v in self.vertices:
            out.setdefault(v.name, []).append(v)
        return out

    def unindexed_names(self) -> None:
        """Keep no list of vertices per name, for a graph whose vertices are never removed
        and kept in creation order in `vertices` (the leader's service graph, whose
        renumbering keeps both in ``uniq_id`` order): `by_name` is then made on demand,
        the same lists. Only resource-query and the tests read it, and its lists were
        9 B a vertex (1.7 MiB of the leader's 1,000-node graph; docs/benchmarks.md).
        Before any vertex is added."""
        if self.vertices:
            raise ValueError("unindexed_names: the graph has vertices already")
        self.name_strings = {}

    def add_vertex(self, type_: str, basename: str, name: str, id_: int, *, rank: int = -1,
                   size: int = 1, unit: str = "", uniq_id: int | None = None) -> Vertex:
        uid = len(self.vertices) if uniq_id is None else uniq_id
        # One string per distinct name: every node of a graph has its core0..core63
        # (the leader's 1,000-node graph: 197 names, not 197,000 strings of ~56 bytes)
        strings = self.name_strings
        named = None
        if strings is not None:
            name = strings.setdefault(name, name)
        else:
            named = self.name_index.get(name)
            if named:
                name = named[0].name
        v = Vertex(uid, type_, basename, name, id_, rank, size, unit)
        self.vertices.append(v)
        self.by_type.setdefault(type_, []).append(v)
        if strings is None:
            if named is None:
                self.name_index[name] = [v]
            else:
                named.append(v)
        self.by_rank.setdefault(rank, []).append(v)
        return v

    def set_path(self, v: Vertex, subsystem: str, path: str) -> None:
        v.set_path(subsystem, path)
        self.index_path(path, v)

    def index_path(self, path: str, v: Vertex) -> None:
        """Enter ``v`` under ``path`` in ``by_path``."""
        have = self.by_path.get(path)
        if have is None:
            if self.leaf_paths:
                leaves = self._leaves_at(path, v)
                if leaves:  # a leaf left out of by_path has this path: both go in
                    self.leaf_paths -= 1
                    self.by_path[path] = [*leaves, v]
                    return
            self.by_path[path] = v
        elif type(have) is list:
            have.append(v)
        else:
            self.by_path[path] = [have, v]

    def index_paths(self, paths: list[str], vertices: list[Vertex], distinct: bool) -> None:
        """``index_path`` of each vertex under its path, in one dict update when that is
        the same: the paths are ``distinct``, none is in ``by_path`` already and no leaf
        is left out of it (one might have one of these paths)."""
        if distinct and not self.leaf_paths and self.by_path.keys().isdisjoint(paths):
            self.by_path.update(zip(paths, vertices, strict=True))
            return
        for path, v in zip(paths, vertices, strict=True):
            self.index_path(path, v)

    def index_leaves(self, parent: Vertex, leaves: list[Vertex]) -> bool:
        """Let ``leaves``, just made by a reader to be ``parent``'s children (containment
        paths set, no children to come, not linked yet), be found through ``parent``
        instead of ``by_path``, when that is exact: ``parent`` is alone at its path in
        ``by_path`` and the leaves' names are distinct from each other and from
        ``parent``'s children, so each leaf path is unique. Returns False (nothing done)
        otherwise: the caller enters them in by_path before it links them."""
        if self.by_path.get(parent.path) is not parent:
            return False
        names = set(map(_name_of, leaves))
        if len(names) != len(leaves):
            return False
        if parent.children and not names.isdisjoint(map(_name_of, parent.children)):
            return False
        self.leaf_paths += len(leaves)
        return True

    def add_leaves(self, parent: Vertex, leaves: list[Vertex]) -> None:
        """Make ``leaves`` (just made, no path, no children to come) ``parent``'s children,
        their containment paths ``parent``'s, "/" and their names. When ``index_leaves``
        lets them be found through ``parent`` they get no path string and no ``by_path``
        entry at all, as compact_paths would leave them, and never had them for a while
        (a builder's peak, not only what it keeps, sets a process's RSS); otherwise each
        gets its path."""
        if self.index_leaves(parent, leaves):
            for v in leaves:
                v._path = None
                self.add_edge(parent, v)
            return
        prefix = parent.path + "/"
        for v in leaves:
            self.set_path(v, CONTAINMENT, prefix + v.name)
            self.add_edge(parent, v)

    def _leaves_at(self, path: str, but: Vertex | None = None) -> list[Vertex]:
        """The leaves left out of by_path whose path is ``path`` (other than ``but``)."""
        parent_path, sep, name = path.rpartition("/")
        if not sep or not parent_path:
            return []
        found = []
        for p in self.lookup(parent_path):
            if p.path == parent_path:  # a child deriving its path from p: by its name alone
                found += [c for c in p.children if c is not but and (
                    c.name == name if c._path is None and c.parent is p else c.path == path)]
            else:
                found += [c for c in p.children if c.path == path and c is not but]
        return found

    def compact_paths(self) -> None:
        """Let the leaves made since the last call keep no path string of their own: a
        childless vertex, alone at its path, whose containment path is its parent's, "/"
        and its name, gets it from its parent on demand (Vertex.path) and leaves by_path
        (found through its parent, as index_leaves does, when its parent is alone at
        its path in by_path). Its path string was a tenth of a 1,000-node flat graph's
        memory and its by_path entry another twentieth. Every path, lookup and count
        stays what it was. Readers call it once a graph is built (freeze_built_graph),
        and freeze_for_gc on a graph that grew."""
        by_path = self.by_path
        left = 0
        vertices = self.vertices
        for i in range(self.compacted, len(vertices)):
            v = vertices[i]
            p = v._path
            parent = v.parent
            if not p or parent is None or v.children or v._paths:
                continue
            ppath = parent.path
            if p != f"{ppath}/{v.name}":
                continue
            have = by_path.get(p)
            if have is v:
                if by_path.get(ppath) is not parent:
                    continue  # (a lookup finds leaves only through a parent by_path has)
                del by_path[p]
                self.leaf_paths += 1
                left += 1
            elif have is not None:
                continue  # at a path it shares with others: by_path lists it
            v._path = None
        self.compacted = len(vertices)
        if left > len(by_path):  # a dict does not shrink as keys go: rebuild it
            kept = list(by_path.items())
            by_path.clear()
            by_path.update(kept)

    def path_count(self) -> int:
        """How many distinct paths the graph's vertices have (Fluxion's by_path size)."""
        return len(self.by_path) + self.leaf_paths

    def add_edge(self, parent: Vertex, child: Vertex, subsystem: str = CONTAINMENT) -> None:
        if subsystem == CONTAINMENT:
            if not parent.children:
                parent.children = [child]
            elif child.parent is parent or (child.parent is not None and child in parent.children):
                return
            else:
                parent.children.append(child)
            if child.parent is None:
                child.parent = parent
            elif child.parent is not parent:
                self.shared_children += 1
        else:
            if parent.aux_children is None:
                parent.aux_children = {}
            parent.aux_children.setdefault(subsystem, []).append(child)
            if subsystem not in self.subsystems:
                self.subsystems.append(subsystem)

    @property
    def root(self) -> Vertex:
        return self.roots[CONTAINMENT]

    def lookup(self, path: str) -> list[Vertex]:
        have = self.by_path.get(path)
        if have is None:
            return self._leaves_at(path) if self.leaf_paths else []
        return list(have) if type(have) is list else [have]

    def walk(self, v: Vertex | None = None) -> Iterator[Vertex]:
        """Pre-order walk of the containment tree."""
        stack = [v or self.root]
        while stack:
            u = stack.pop()
            yield u
            stack.extend(reversed(u.children))

    def nodes_up(self) -> int:
        return sum(1 for v in self.by_type.get("node", []) if v.status == "up" and v.uniq_id >= 0)

    def remove_vertex(self, v: Vertex) -> None:
        """Drop ``v`` and its subtree from every index (the slot in ``vertices`` stays)."""
        if self.name_strings is not None:  # index names from now on: made from `vertices`,
            self.name_index = self.by_name  # by_name would list a removed vertex
            self.name_strings = None
        for u in list(self.walk(v)):
            for index, key in ((self.by_type, u.type), (self.name_index, u.name),
                               (self.by_rank, u.rank)):
                lst = index.get(key)
                if lst and u in lst:
                    lst.remove(u)
            for p in u.paths.values():
                have = self.by_path.get(p)
                if have is None and p == u.path and self.leaf_paths:
                    self.leaf_paths -= 1  # a leaf found through its parent
                elif have is u:
                    del self.by_path[p]
                elif type(have) is list and u in have:
                    have.remove(u)
                    if not have:
                        del self.by_path[p]
        if v.parent is not None:
            if v._path is None:
                v._path = v.path
            v.parent.children.remove(v)
            v.parent = None

    def project(self, subsystem: str) -> ResourceGraph:
        """A graph whose containment tree is ``subsystem``'s tree (e.g. ``power``), so
        the matcher can use another subsystem as its dominant hierarchy (resource-query's
        ``-S PA``).

        What Fluxion's writers and commands still see of the whole graph is kept: each
        copy's ``paths`` are the original's, under their own subsystems (the JGF writer
        prints them all), while its containment slot ``path`` holds its path in
        ``subsystem``, which the walk and the lookups use; ``dominant`` names
        ``subsystem`` (the JGF writer's edge metadata); and the paths of the vertices
        outside ``subsystem`` stay in ``by_path``, naming the original vertices, so
        get-status, set-property and the like find them as Fluxion's by_path does."""
        top = self.roots.get(subsystem)
        if top is None:
            raise KeyError(subsystem)
        out = ResourceGraph()
        out.dominant = subsystem
        copies: dict[int, Vertex] = {}

        def copy(v: Vertex) -> Vertex:
            c = copies.get(id(v))
            if c is None:
                c = out.add_vertex(v.type, v.basename, v.name, v.id, rank=v.rank, size=v.size,
                                   unit=v.unit, uniq_id=v.uniq_id)
                c.properties = dict(v.properties) if v.properties else c.properties
                c.status = v.status
                paths = v.paths
                for p in paths.values():
                    out.index_path(p, c)
                c.path = paths.get(subsystem, "")
                c._paths = paths
                copies[id(v)] = c
            return c

        with gc_paused():
            out.roots[CONTAINMENT] = copy(top)
            stack = [top]
            while stack:
                v = stack.pop()
                kids = (v.aux_children or {}).get(subsystem, [])
                for k in kids:
                    out.add_edge(copy(v), copy(k))
                stack.extend(reversed(kids))
            for v in self.vertices:
                if id(v) not in copies:
                    for p in v.paths.values():
                        out.index_path(p, v)
        return out

    def to_networkx(self):
        """The containment tree as a networkx DiGraph keyed by uniq_id."""
        import networkx as nx  # lazy: ~0.15 s to import, and only this analysis view needs it

        g = nx.DiGraph()
        for v in self.walk():
            g.add_node(v.uniq_id, type=v.type, basename=v.basename, name=v.name, id=v.id,
                       rank=v.rank, size=v.size, unit=v.unit, status=v.status,
                       properties=dict(v.properties), paths=dict(v.paths))
            for c in v.children:
                g.add_edge(v.uniq_id, c.uniq_id, subsystem=CONTAINMENT)
        return g
