"""The graphs of ``rq_random.py --wide`` beyond GRUG: other readers, other subsystems.

Issue 35 asks the random cases to load graphs as users load them: a JGF document
(``-f jgf``), an RV1 ``R`` (``-f rv1exec``, with node properties), an hwloc XML
(``-f hwloc``) and Fluxion's power graph matched under other subsystems (``-S PA``,
``C+PA``, ``ALL``...). One random :class:`rq_random.Graph` shape is written in the
first two formats here (ranks one per node, so RV1 partial cancels name them); the hwloc
files and the power graph are flux-sched's own, from the shared corpus, copied into the
case's folder. Each writer returns the file it wrote, the ``-f``/``-S`` options that
load it, and the node paths the commands may name (set-status, get-property, ...).

The JGF written is the shape Fluxion's own JGF writer gives (``metadata`` with type,
basename, name, id, uniq_id, rank, exclusive, unit, size, paths; edges with their
subsystem), the RV1 the shape of ``flux R encode`` (``R_lite`` grouped by rank,
``nodelist``, ``properties`` as an idset per name).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

HWLOC = ["hwloc-data/001N/node_local_storage/catalyst/0.xml",
         "hwloc-data/001N/node_local_storage/corona/0.xml",
         "hwloc-data/001N/node_local_storage/lassen/0.xml"]
HWLOC_HOSTS = {"catalyst": "catalyst321", "corona": "corona116", "lassen": "lassen6"}
POWER = "resource/grugs/power.graphml"
POWER_JOBSPECS = ["resource/jobspecs/power/test001.yaml", "resource/jobspecs/power/test002.yaml"]
# the -S names Fluxion loads power.graphml under (ALL, IBA, ... fail: it has no ibnet)
POWER_SUBSYSTEMS = ["CA", "PA", "C+PA", "C+PA"]


class Shape(Protocol):
    """What of rq_random.Graph is read here."""

    base: str
    racks: int
    per_rack: int
    sockets: int
    cores: int
    gpus: int
    memory: int
    memory_gb: int
    nodes: int


@dataclass
class Loaded:
    """A graph file written for one case and how resource-query loads it."""

    name: str            # file name under data/graphs
    options: list[str]   # -f (and -S) options
    paths: list[str]     # node paths the commands may name
    ranks: int           # nodes with ranks 0..ranks-1 (0: no ranks to partial-cancel)
    cores_per_rank: int
    jobspecs: tuple[str, ...] = ()  # jobspecs written for this graph, under data/jobspecs


def _idset(ids: list[int]) -> str:
    """``ids`` (sorted, distinct) as an RFC 22 idset: 0-2,5."""
    runs: list[str] = []
    for i in ids:
        if runs and int(runs[-1].split("-")[-1]) == i - 1:
            runs[-1] = f"{runs[-1].split('-')[0]}-{i}"
        else:
            runs.append(str(i))
    return ",".join(runs)


def write_jgf(g: Shape, rng: random.Random, folder: Path, stem: str) -> Loaded:
    """``g`` as a JGF document, nodes ranked 0.. in order, some with a ``fast`` property."""
    nodes: list[dict] = []
    edges: list[dict] = []
    counters: dict[str, int] = {}

    def add(kind: str, parent: dict | None, rank: int, size: int = 1, unit: str = "",
            props: dict | None = None) -> dict:
        i = counters.get(kind, 0)
        counters[kind] = i + 1
        base = g.base if kind == "cluster" else kind
        path = (parent["metadata"]["paths"]["containment"] if parent else "") + f"/{base}{i}"
        md = {"type": kind, "basename": base, "name": f"{base}{i}", "id": i,
              "uniq_id": len(nodes), "rank": rank, "exclusive": False, "unit": unit,
              "size": size, "paths": {"containment": path}}
        if props:
            md["properties"] = props
        v = {"id": str(len(nodes)), "metadata": md}
        nodes.append(v)
        if parent:
            edges.append({"source": parent["id"], "target": v["id"],
                          "metadata": {"subsystem": "containment"}})
        return v

    root = add("cluster", None, -1)
    parents = [add("rack", root, -1) for _ in range(g.racks)] or [root]
    paths = []
    rank = 0
    for parent in parents:
        for _ in range(g.per_rack):
            props = {"fast": ""} if rng.random() < 0.4 else None
            node = add("node", parent, rank, props=props)
            paths.append(node["metadata"]["paths"]["containment"])
            for _ in range(g.sockets):
                sock = add("socket", node, rank)
                for _ in range(g.cores):
                    add("core", sock, rank)
                for _ in range(g.gpus):
                    add("gpu", sock, rank)
                for _ in range(g.memory):
                    add("memory", sock, rank, g.memory_gb, "GB")
            rank += 1
    name = f"{stem}.json"
    (folder / name).write_text(json.dumps({"graph": {"nodes": nodes, "edges": edges}}))
    return Loaded(name, ["-f", "jgf"], paths, rank, g.sockets * g.cores)


def write_rv1(g: Shape, rng: random.Random, folder: Path, stem: str) -> Loaded:
    """``g``'s nodes as an RV1 ``R`` (cluster, node, core, gpu: what rv1exec reads), its
    ranks cut in two groups of different core counts now and then, with properties."""
    n = g.nodes
    cores = g.sockets * g.cores
    split = rng.randint(1, n - 1) if n > 1 and rng.random() < 0.3 else n
    lite = []
    for lo, hi, c in ((0, split, cores), (split, n, max(1, cores // 2))):
        if lo >= hi:
            continue
        children = {"core": f"0-{c - 1}" if c > 1 else "0"}
        if g.gpus:
            children["gpu"] = _idset(list(range(g.gpus)))
        lite.append({"rank": _idset(list(range(lo, hi))), "children": children})
    execution: dict = {"R_lite": lite, "nodelist": [f"node[0-{n - 1}]" if n > 1 else "node0"],
                       "starttime": 0, "expiration": 0}
    if rng.random() < 0.7:
        props = {}
        for prop in ("fast", "amd")[:rng.randint(1, 2)]:
            ranks = sorted(rng.sample(range(n), rng.randint(1, n)))
            props[prop] = _idset(ranks)
        execution["properties"] = props
    name = f"{stem}.json"
    (folder / name).write_text(json.dumps({"version": 1, "execution": execution}))
    return Loaded(name, ["-f", "rv1exec"], [f"/cluster0/node{i}" for i in range(n)], n,
                  min(cores, max(1, cores // 2)) if split < n else cores)


def partial_cancel_r(rng: random.Random, loaded: Loaded, folder: Path, stem: str) -> str:
    """An R naming a random run of ranks (all of their cores, as a job holds them whole
    or not at all in these cases), for ``partial-cancel J rv1exec FILE``."""
    lo = rng.randrange(loaded.ranks)
    hi = rng.randint(lo, loaded.ranks - 1)
    c = loaded.cores_per_rank
    doc = {"version": 1, "execution": {
        "R_lite": [{"rank": _idset(list(range(lo, hi + 1))),
                    "children": {"core": f"0-{c - 1}" if c > 1 else "0"}}],
        "nodelist": [f"node[{lo}-{hi}]" if hi > lo else f"node{lo}"],
        "starttime": 0, "expiration": 0}}
    name = f"{stem}.json"
    (folder / name).write_text(json.dumps(doc))
    return name


def copy_hwloc(rng: random.Random, shared: Path, folder: Path) -> Loaded:
    """One of flux-sched's single-node hwloc files (its machine named by host)."""
    src = shared / rng.choice(HWLOC)
    site = src.parent.name
    name = f"hwloc_{site}.xml"
    if not (folder / name).exists():
        shutil.copyfile(src, folder / name)
    return Loaded(name, ["-f", "hwloc"], [f"/cluster0/{HWLOC_HOSTS[site]}"], 0, 0)


def copy_power(rng: random.Random, shared: Path, folder: Path) -> Loaded:
    """flux-sched's power graph (containment and power subsystems), under a random ``-S``,
    with its two jobspecs that ask for power (copied beside the case's own)."""
    if not (folder / "power.graphml").exists():
        shutil.copyfile(shared / POWER, folder / "power.graphml")
    specs = []
    for js in POWER_JOBSPECS:
        name = "power_" + Path(js).name
        if not (folder.parent / "jobspecs" / name).exists():
            shutil.copyfile(shared / js, folder.parent / "jobspecs" / name)
        specs.append(name)
    paths = [f"/power0/rack{r}/node{r * 18 + i}" for r in range(4) for i in (0, 1, 17)]
    return Loaded("power.graphml", ["-f", "grug", "-S", rng.choice(POWER_SUBSYSTEMS)],
                  paths, 0, 0, tuple(specs))


# --more: malformed JSON as users make it (cut short, a stray byte) and jansson's own
# corner cases, for update, attach and partial-cancel (Fluxion's JGF reader words
# jansson's error; resource-query's stderr is then compared too)
BAD_JSON = [b"", b"x", b"{", b"[1,2", b'{"a": NaN}', b'{"a": 1,}', b'{"graph": {"nodes": [}}',
            b'{"a": 9223372036854775808}', b'{"a": "\\ud800"}', b'{"a": "x\ny"}',
            b'{"a": 1e999}', b'{} x', b'{"a": "\xff"}', b'"str"', b'{"\\u0000": 1}']


def write_bad_json(rng: random.Random, folder: Path, stem: str, good: bytes) -> str:
    """A JSON file jansson refuses: one of BAD_JSON, or ``good`` cut short or with one
    byte changed."""
    x = rng.random()
    if x < 0.4 or len(good) < 2:
        data = rng.choice(BAD_JSON)
    elif x < 0.7:
        data = good[:rng.randrange(1, len(good))]
    else:
        i = rng.randrange(len(good))
        data = good[:i] + bytes([rng.choice(b"@}]:,\"\\\xc3\n")]) + good[i + 1:]
    name = f"{stem}.json"
    (folder / name).write_bytes(data)
    return name


def write_attach(g: Shape, rng: random.Random, folder: Path, stem: str, root: str,
                 rank: int) -> str:
    """A JGF subgraph for ``attach``: the graph's root (by its path) and a new node of
    rank ``rank`` below it with ``g``'s sockets and cores. The new vertices' ``uniq_id``s
    are fresh (from 100,000 on): Fluxion's JGF reader gives a vertex the document's,
    and one a sibling already has fails the attach half-way (its by_outedges key)."""
    root_name = root.rsplit("/", 1)[1]
    base = root_name.rstrip("0123456789")
    nodes = [{"id": "0", "metadata": {
        "type": "cluster", "basename": base, "name": root_name, "id": 0, "uniq_id": 0,
        "rank": -1, "exclusive": False, "unit": "", "size": 1,
        "paths": {"containment": root}}}]
    edges = []

    def add(kind: str, parent: dict, i: int) -> dict:
        path = parent["metadata"]["paths"]["containment"] + f"/{kind}{i}"
        uid = 100000 + 1000 * rank + len(nodes)
        v = {"id": str(uid), "metadata": {
            "type": kind, "basename": kind, "name": f"{kind}{i}", "id": i,
            "uniq_id": uid, "rank": rank, "exclusive": False, "unit": "", "size": 1,
            "paths": {"containment": path}}}
        nodes.append(v)
        edges.append({"source": parent["id"], "target": v["id"],
                      "metadata": {"subsystem": "containment"}})
        return v

    node = add("node", nodes[0], rank)
    for s in range(max(1, g.sockets)):
        sock = add("socket", node, s)
        for c in range(rng.randint(1, max(1, g.cores))):
            add("core", sock, c)
    name = f"{stem}.json"
    (folder / name).write_text(json.dumps({"graph": {"nodes": nodes, "edges": edges}}))
    return name


def write_update_jgf(rng: random.Random, doc: dict, folder: Path, stem: str) -> str:
    """A JGF for ``update ... jgf``: one node of ``doc`` (a document write_jgf wrote)
    with what lies above and below it, its leaves exclusive, as a match's JGF."""
    nodes = {n["id"]: n for n in doc["graph"]["nodes"]}
    parent = {e["target"]: e["source"] for e in doc["graph"]["edges"]}
    picked = rng.choice([n for n in nodes.values() if n["metadata"]["type"] == "node"])
    prefix = picked["metadata"]["paths"]["containment"]
    keep = [n["id"] for n in nodes.values()
            if n["metadata"]["paths"]["containment"].startswith(prefix + "/")
            or n["id"] == picked["id"]]
    up = parent.get(picked["id"])
    while up is not None:
        keep.append(up)
        up = parent.get(up)
    leaves = set(keep) - set(parent[k] for k in keep if k in parent)
    out = []
    for k in sorted(keep, key=int):
        v = json.loads(json.dumps(nodes[k]))
        v["metadata"]["exclusive"] = k in leaves
        out.append(v)
    edges = [e for e in doc["graph"]["edges"] if e["target"] in keep]
    name = f"{stem}.json"
    (folder / name).write_text(json.dumps({"graph": {"nodes": out, "edges": edges}}))
    return name
