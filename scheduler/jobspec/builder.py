"""Jobspecs built from counts: the one way to make a jobspec in code (the CLI flags,
a pod group, the service's replay of a record).

A group of pods with different requests becomes ONE jobspec with one slot kind
per distinct request (label ``s0``, ``s1``... as `slot_labels` gives them), so
the graph scheduler places the whole group in a single all-or-nothing match and
the answer's per-kind placement names each kind by its label. The result is the
jobspec as it goes over the wire (a plain mapping, RFC 14); ``Jobspec.parse`` of it
is what the traverser matches. Why not a parsed `Jobspec`: parsing expands the
hostlist constraint (a millisecond for a thousand nodes), which only the service
needs; a binder would pay it on every attempt for nothing. Memory is counted in MiB, as R models it;
the service's graph splits
each node's memory into equal vertices and a slot takes whole ones (see
scheduler/service/flat_graph.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class JobspecBuildError(ValueError):
    """The counts do not describe a valid request; the message names the flag/field."""


WIRE_KEYS = ("cores", "gpus", "memory_mib", "count")


@dataclass(frozen=True, slots=True, order=True)
class SlotKind:
    """One kind of slot: what each slot holds, and how many such slots. Also the shape
    of one pod (count 1) and, in its wire form, what the binder asks the service for."""

    cores: int
    gpus: int = 0
    memory_mib: int = 0
    count: int = 1

    def to_wire(self) -> dict:
        return {"cores": self.cores, "gpus": self.gpus, "memory_mib": self.memory_mib,
                "count": self.count}

    @classmethod
    def from_wire(cls, obj: object, where: str = "kind") -> SlotKind:
        """The kind a wire object names; JobspecBuildError naming the field otherwise."""
        if not isinstance(obj, dict) or set(obj) - set(WIRE_KEYS):
            raise JobspecBuildError(f"{where}: must be an object with keys "
                                    f"{', '.join(WIRE_KEYS)}")
        values = {k: obj.get(k, 1 if k == "count" else 0) for k in WIRE_KEYS}
        for key, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise JobspecBuildError(f"{where}.{key}: must be an integer >= 0")
        return cls(**values)


def slot_labels(kinds: Sequence[SlotKind]) -> dict[str, SlotKind]:
    """The label of each kind in the jobspec `build_jobspec` makes of `kinds`."""
    return {f"s{i}": kind for i, kind in enumerate(kinds)}


def _slot(kind: SlotKind, label: str, count: int) -> dict:
    with_: list[dict] = []
    if kind.cores:
        with_.append({"type": "core", "count": kind.cores})
    if kind.gpus:
        with_.append({"type": "gpu", "count": kind.gpus})
    if kind.memory_mib:
        with_.append({"type": "memory", "count": kind.memory_mib})
    if not with_:
        raise JobspecBuildError(f"slot {label}: asks for nothing (no cores, GPUs or memory)")
    return {"type": "slot", "count": count, "label": label, "with": with_}


def build_jobspec(
    kinds: Sequence[SlotKind],
    *,
    nnodes: int | None = None,
    exclusive_nodes: bool = False,
    constraints: dict | None = None,
    duration: float = 0,
    name: str | None = None,
) -> dict[str, Any]:
    """An RFC 14 jobspec asking for every slot kind in `kinds` at once; with `nnodes`
    (a single kind), its slots spread evenly over that many nodes (``flux submit -N``),
    held whole when `exclusive_nodes`."""
    if not kinds:
        raise JobspecBuildError("at least one slot is required")
    for kind in kinds:
        if kind.count < 1:
            raise JobspecBuildError(f"slots: must be >= 1, not {kind.count}")
        if kind.cores < 0 or kind.gpus < 0 or kind.memory_mib < 0:
            raise JobspecBuildError("cores, gpus and memory per slot must be >= 0")
    labels = list(slot_labels(kinds))
    if nnodes is not None:
        if len(kinds) != 1:
            raise JobspecBuildError("--nodes needs a single slot kind")
        kind = kinds[0]
        if nnodes < 1:
            raise JobspecBuildError(f"--nodes: must be >= 1, not {nnodes}")
        if kind.count % nnodes:
            raise JobspecBuildError(f"--slots {kind.count} is not a multiple of --nodes {nnodes}")
        node: dict[str, Any] = {
            "type": "node",
            "count": nnodes,
            "with": [_slot(kind, labels[0], kind.count // nnodes)],
        }
        if exclusive_nodes:
            node["exclusive"] = True
        resources = [node]
    elif exclusive_nodes:
        raise JobspecBuildError("exclusive nodes need --nodes")
    else:
        resources = [
            _slot(kind, label, kind.count) for label, kind in zip(labels, kinds, strict=True)
        ]
    system: dict = {"duration": duration}
    if constraints:
        system["constraints"] = constraints
    if name:
        system["job"] = {"name": name}
    return {
        "version": 1,
        "resources": resources,
        "tasks": [
            {"command": ["pod"], "slot": label, "count": {"per_slot": 1}} for label in labels
        ],
        "attributes": {"system": system},
    }
