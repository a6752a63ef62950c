"""hwloc XML reader: one node's topology as ``cluster0 -> <host> -> socket -> core...``.

Follows Fluxion's hwloc reader: Machine (with a HostName) becomes ``node`` named
after the host, Package/Socket ``socket``, Core ``core``, PU ``pu``, caches
``L<n>cache``, coprocessor OS devices ``gpu`` (numbered from their ``cudaN`` /
``rsmiN`` / ``openclPdN`` name) and block OS devices ``storage`` (size in GB,
``LinuxDeviceID`` property). Objects whose type is not allowed (``-W``) are
skipped but their children are kept under the nearest kept ancestor. The tree
walked is the one libhwloc 2 builds from the XML (``hwloc_tree.py``: v1 NUMA nodes
made memory children, useless Groups merged), children in its iterator's order
(normal, memory, I/O, Misc), and ids are hwloc logical indexes (order of appearance
per type).
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from fluxnode.scheduler.graph.resource_graph import CONTAINMENT, ResourceGraph, Vertex, gc_paused
from fluxnode.scheduler.readers.hostname import HostnameIdError, node_name_parts
from fluxnode.scheduler.readers.hwloc_tree import HwObj, hwloc_tree

CACHE = re.compile(r"^L[1-3]Cache$")  # what Fluxion's reader keeps (hwloc 2: L1-L3, not i)
OSDEV_BLOCK, OSDEV_GPU, OSDEV_COPROC = "0", "1", "5"


class HwlocError(ValueError):
    """The hwloc XML cannot be read (message names the problem)."""


def _info(obj: ET.Element | None, key: str) -> str | None:
    for i in (obj.findall("info") if obj is not None else ()):
        if i.get("name") == key:
            return i.get("value")
    return None


def read_hwloc(
    path: str | Path, allowlist: list[str] | None = None, rank: int = -1
) -> ResourceGraph:
    try:
        root = ET.parse(str(path)).getroot()
    except (OSError, ET.ParseError) as exc:
        raise HwlocError(f"{path}: {exc}") from exc
    allowed = set(allowlist or [])

    def ok(t: str) -> bool:
        return not allowed or t in allowed

    g = ResourceGraph()
    counters: dict[str, int] = {}
    # Fluxion's hwloc reader gives node vertices ranks 0, 1, ... when it is given none
    # (flux-core wants node ranks in an idset, so nonnegative); others get ``rank``
    node_ranks = itertools.count()

    def logical(kind: str) -> int:
        n = counters.get(kind, 0)
        counters[kind] = n + 1
        return n

    def add(parent: Vertex, type_: str, basename: str, id_: int, name: str = "",
            size: int = 1, props: dict | None = None) -> Vertex:
        name = name or f"{basename}{id_ if id_ != -1 else ''}"
        vrank = next(node_ranks) if type_ == "node" and rank == -1 else rank
        v = g.add_vertex(type_, basename, name, id_, rank=vrank, size=size)
        g.set_path(v, CONTAINMENT, f"{parent.path}/{name}")
        for k, val in (props or {}).items():
            v.set_property(k, val)
        g.add_edge(parent, v)
        return v

    def walk(node: HwObj, parent: Vertex) -> None:
        kind, obj = node.type, node.elem
        idx = logical(kind)  # hwloc logical indexes: order of appearance per type
        here = parent
        if kind == "Machine":
            host = _info(obj, "HostName")
            if host and ok("node"):
                try:
                    base, nid = node_name_parts(host)
                except HostnameIdError:
                    raise HwlocError(f"Error converting node id for {host}") from None
                here = add(parent, "node", base, nid, name=host)
        elif kind == "Group" and ok("group"):
            here = add(parent, "group", "group", idx)
        elif kind == "NUMANode" and ok("numanode"):
            here = add(parent, "numanode", "numanode", idx)
        elif kind in ("Socket", "Package") and ok("socket"):
            here = add(parent, "socket", "socket", idx)
        elif CACHE.match(kind) and obj is not None:
            base = f"{kind[:-5]}cache"
            if ok(base):
                here = add(parent, "cache", base, idx, size=int(obj.get("cache_size", "0")) // 1024)
        elif kind == "Core" and ok("core"):
            here = add(parent, "core", "core", idx)
        elif kind == "PU" and ok("pu"):
            here = add(parent, "pu", "pu", idx)
        elif kind == "OSDev" and obj is not None:
            here = _osdev(obj, parent, idx)
        for child in node.children():
            walk(child, here)

    def _osdev(obj: ET.Element, parent: Vertex, idx: int) -> Vertex:
        name = obj.get("name", "")
        ostype = obj.get("osdev_type", "")
        if ostype == OSDEV_COPROC or (ostype == OSDEV_GPU and name.startswith("rsmi")):
            if not ok("gpu"):
                return parent
            m = re.match(r"^(?:cuda|rsmi)(\d+)$", name)
            if m:
                gid = int(m.group(1))
            elif name.startswith("opencl") and "d" in name[6:]:
                gid = int(name[6:].split("d", 1)[1] or 0)
            else:
                gid = 0
            return add(parent, "gpu", "gpu", gid)
        if ostype == OSDEV_BLOCK and ok("storage"):
            size = _info(obj, "Size")
            if not size or not size.isdigit() or int(size) == 0:
                raise HwlocError(f"block device {name}: missing or bad Size")
            return add(parent, "storage", "storage", idx,
                       size=int(size) // 1000000,
                       props={"LinuxDeviceID": _info(obj, "LinuxDeviceID") or "-1"})
        return parent

    with gc_paused():
        cluster = g.add_vertex("cluster", "cluster", "cluster0", 0, rank=rank)
        g.set_path(cluster, CONTAINMENT, "/cluster0")
        g.roots[CONTAINMENT] = cluster
        tops = hwloc_tree(root)
        if not tops:
            raise HwlocError(f"{path}: no topology objects")
        for top in tops:
            walk(top, cluster)
    return g
