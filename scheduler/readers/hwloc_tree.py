"""An hwloc XML as the hwloc 2 library presents it: the tree Fluxion's hwloc reader walks.

Fluxion reads hwloc XML through libhwloc 2, whose child iterator gives an object's normal
children, then its memory children (NUMA nodes), then its I/O children, then Misc. The
XML is not always that tree:

- a **v1 XML** (``<topology>`` without ``version="2..."``; lstopo 1.x wrote them, and
  lstopo 2 does with ``--export-xml-flags v1``) has NUMA nodes as normal objects with
  the sockets and I/O below them. hwloc 2 imports such a NUMA node as a memory child:
  of its parent when both cover the same CPUs, else of a new Group covering the NUMA
  node's CPUs, and the NUMA node's own children go to that parent or Group
  (``hwloc__xml_import_object``'s 1.x branch);
- then Groups and caches (which Fluxion asks hwloc to keep only where they add
  structure: ``HWLOC_TYPE_FILTER_KEEP_STRUCTURE``) are merged with a single normal
  child: one of the two takes both places, with both's memory, I/O and Misc children
  (``merge_useless_child``; of two such, the one of lower type priority goes: a Group
  before a cache, a parent before a child of the same priority). So a v1 NUMA node
  above one socket ends as that socket's memory child, with the socket's I/O devices
  beside it, and a cache above a single core is not there at all.

v1 caches (``type="Cache"`` with a ``depth`` and a ``cache_type``, 2 for instruction
caches) get hwloc 2's type names (``L2Cache``, ``L1iCache``).

:func:`hwloc_tree` returns :class:`HwObj` nodes in that shape, children in that order;
the reader in ``hwloc.py`` turns them into graph vertices.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

MEMORY_TYPES = {"NUMANode", "MemCache"}
IO_TYPES = {"Bridge", "PCIDev", "OSDev"}


@dataclass
class HwObj:
    """One hwloc object: its XML element (None for a Group hwloc made) and children."""

    elem: ET.Element | None
    type: str
    cpuset: int | None
    normal: list[HwObj] = field(default_factory=list)
    memory: list[HwObj] = field(default_factory=list)
    io: list[HwObj] = field(default_factory=list)
    misc: list[HwObj] = field(default_factory=list)

    def children(self) -> list[HwObj]:
        return self.normal + self.memory + self.io + self.misc

    def attach(self, child: HwObj) -> None:
        if child.type in MEMORY_TYPES:
            self.memory.append(child)
        elif child.type in IO_TYPES:
            self.io.append(child)
        elif child.type == "Misc":
            self.misc.append(child)
        else:
            self.normal.append(child)


def _cpuset(elem: ET.Element) -> int | None:
    """The object's complete cpuset (hwloc's "0x0000ffff,,0xff" chunks of 32 bits)."""
    text = elem.get("complete_cpuset") or elem.get("cpuset")
    if not text:
        return None
    value = 0
    for chunk in text.split(","):
        chunk = chunk.strip()
        digits = chunk[2:] if chunk.lower().startswith("0x") else chunk
        try:
            value = (value << 32) | int(digits or "0", 16)
        except ValueError:
            return None
    return value


def _obj(elem: ET.Element) -> HwObj:
    kind = elem.get("type", "")
    if kind == "Cache":
        kind = f"L{elem.get('depth', '')}{'i' if elem.get('cache_type') == '2' else ''}Cache"
    return HwObj(elem, kind, _cpuset(elem))


def _priority(obj: HwObj) -> int | None:
    """hwloc's type priority of a type kept only for structure; None for the others."""
    if obj.type == "Group":
        return 0
    if obj.type.endswith("iCache"):
        return 19
    if obj.type.endswith("Cache") and obj.type not in MEMORY_TYPES:
        return 20
    return None


def _import(elem: ET.Element, parent: HwObj, v1: bool) -> None:
    """Import ``elem`` below ``parent`` as hwloc 2 does (see the module's docstring)."""
    obj = _obj(elem)
    container = obj
    if v1 and obj.type == "NUMANode":
        if obj.cpuset is not None and obj.cpuset != parent.cpuset:
            group = HwObj(None, "Group", obj.cpuset)
            parent.attach(group)
            parent = group
        parent.attach(obj)
        container = parent  # a v1 NUMA node's children belong to its normal parent
    else:
        parent.attach(obj)
    for child in elem.findall("object"):
        _import(child, container, v1)


def _first_cpu(obj: HwObj) -> int:
    if not obj.cpuset:
        return -1
    return (obj.cpuset & -obj.cpuset).bit_length() - 1


def _merge_useless(obj: HwObj, is_root: bool = False) -> HwObj:
    """``obj`` with its Groups and caches of no structure merged away (bottom up);
    returns what stands in ``obj``'s place."""
    obj.normal = [_merge_useless(c) for c in obj.normal]
    obj.normal.sort(key=_first_cpu)  # hwloc keeps normal children in cpuset order
    if len(obj.normal) != 1:
        return obj
    child = obj.normal[0]
    mine, theirs = (None if is_root else _priority(obj)), _priority(child)
    if mine is not None and (theirs is None or mine <= theirs):
        child.memory += obj.memory
        child.io += obj.io
        child.misc += obj.misc
        return child
    if theirs is not None:
        obj.normal = child.normal
        obj.memory += child.memory
        obj.io += child.io
        obj.misc += child.misc
    return obj


def hwloc_tree(root: ET.Element) -> list[HwObj]:
    """The top objects of an hwloc XML document (``<topology>``), as hwloc 2 builds them."""
    v1 = not root.get("version", "").startswith("2")
    top = HwObj(None, "topology", None)
    for elem in root.findall("object"):
        _import(elem, top, v1)
    return [_merge_useless(o, is_root=True) for o in top.children()]
