"""Jobspecs for requests described by counts (the CLI flags, a pod group).

A group of pods with different requests becomes ONE jobspec with one slot kind
per distinct request (label ``s0``, ``s1``...), so the graph scheduler places
the whole group in a single all-or-nothing match. The library's
``Jobspec.build`` makes single-kind jobspecs; several kinds are built here.
Memory is counted in MiB, as R models it; the service's graph splits each node's
memory into equal vertices and a slot takes whole ones (see live_graph.service_R).
"""

from __future__ import annotations

from dataclasses import dataclass


class JobspecBuildError(ValueError):
    """The counts do not describe a valid request; the message names the flag/field."""


@dataclass(frozen=True, slots=True, order=True)
class SlotKind:
    """One kind of slot: what each slot holds, and how many such slots."""

    cores: int
    gpus: int = 0
    memory_mib: int = 0
    count: int = 1


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
    kinds: list[SlotKind],
    *,
    nnodes: int | None = None,
    constraints: dict | None = None,
    duration: float = 0,
    name: str | None = None,
) -> dict:
    """An RFC 14 jobspec asking for every slot kind in `kinds` at once."""
    if not kinds:
        raise JobspecBuildError("at least one slot is required")
    for kind in kinds:
        if kind.count < 1:
            raise JobspecBuildError(f"slots: must be >= 1, not {kind.count}")
        if kind.cores < 0 or kind.gpus < 0 or kind.memory_mib < 0:
            raise JobspecBuildError("cores, gpus and memory per slot must be >= 0")
    if nnodes is not None:
        if len(kinds) != 1:
            raise JobspecBuildError("--nodes needs a single slot kind")
        kind = kinds[0]
        if nnodes < 1:
            raise JobspecBuildError(f"--nodes: must be >= 1, not {nnodes}")
        if kind.count % nnodes:
            raise JobspecBuildError(f"--slots {kind.count} is not a multiple of --nodes {nnodes}")
        resources = [{"type": "node", "count": nnodes, "with": [_slot(kind, "s0", kind.count // nnodes)]}]
        labels = ["s0"]
    else:
        resources = [_slot(kind, f"s{i}", kind.count) for i, kind in enumerate(kinds)]
        labels = [f"s{i}" for i in range(len(kinds))]
    system: dict = {"duration": duration}
    if constraints:
        system["constraints"] = constraints
    if name:
        system["job"] = {"name": name}
    return {
        "version": 1,
        "resources": resources,
        "tasks": [{"command": ["pod"], "slot": label, "count": {"per_slot": 1}} for label in labels],
        "attributes": {"system": system},
    }
