"""Requests of several slot kinds (a pod group of different pods), matched kind by kind,
and matched slots cut back into one share per slot.

Fluxion's matcher (and the library, faithfully) matches one slot shape per jobspec
level and refuses sibling slots. A request of slot kinds therefore becomes one request
tree per kind, matched largest first (first-fit decreasing) inside one service call.
The binder's kinds arrive typed (`SlotKind`) and are made into request trees here
directly, with no RFC 14 text in between; an RFC 14 jobspec whose top level is several
slots (`fluxnode alloc`) is split into the same per-kind form.

Every slot of a kind sits on one node of the flat graph, and a node holds whole slots
of each kind it got, so a kind's per-node share cuts exactly into slots (lowest ids
first): the answer names each slot and the caller gives each pod its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fluxnode.scheduler.jobspec.builder import SlotKind, slot_labels
from fluxnode.scheduler.jobspec.constraint import Constraint
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.jobspec.model import Count, Resource, Task
from fluxnode.scheduler.service.allocation import NodeShare
from fluxnode.scheduler.service.errors import Unsatisfiable

SLOT_LEAVES = ("core", "gpu", "memory")


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of a request: its index in the request, its flat shape (None when the
    slot holds more than cores, GPUs and memory), and its request tree's jobspec."""

    index: int
    slot: SlotKind | None
    spec: Jobspec

    @property
    def resource(self) -> Resource:
        return self.spec.resources[0]


def slot_totals(slot: Resource) -> dict[str, int]:
    """What one slot holds, by resource type (nested counts multiplied out)."""
    out: dict[str, int] = {}

    def walk(items: tuple[Resource, ...], times: int) -> None:
        for item in items:
            n = times * item.count.min
            out[item.type] = out.get(item.type, 0) + n
            walk(item.with_, n)

    walk(slot.with_, 1)
    return out


def flat_kind(slot: Resource) -> SlotKind | None:
    """The `SlotKind` of a slot of cores, GPUs and memory only (None for any other)."""
    totals = slot_totals(slot)
    if set(totals) - set(SLOT_LEAVES) or any(c.with_ for c in slot.with_):
        return None
    return SlotKind(totals.get("core", 0), totals.get("gpu", 0), totals.get("memory", 0),
                    slot.count.min)


def describe(totals: dict[str, int]) -> str:
    """'3 cores, 1 gpu, 512 MiB of memory' for error messages."""
    words = []
    for type_, n in totals.items():
        if type_ == "memory":
            words.append(f"{n} MiB of memory")
        else:
            words.append(f"{n} {type_}{'s' if n != 1 else ''}")
    return ", ".join(words) or "nothing"


def slot_unsatisfiable(slot: Resource, why: Exception) -> Unsatisfiable:
    """`why` one kind of a multi-kind request can never fit, naming the kind."""
    return Unsatisfiable(f"slot {slot.label} ({describe(slot_totals(slot))} each): {why}")


def _pod_task(label: str) -> Task:
    return Task(("pod",), label, {"per_slot": "1"})


def _slot(kind: SlotKind, label: str, count: int) -> Resource:
    leaves = (("core", kind.cores), ("gpu", kind.gpus), ("memory", kind.memory_mib))
    return Resource("slot", Count(count, count), label=label,
                    with_=tuple(Resource(t, Count(n, n)) for t, n in leaves if n))


def kind_jobspec(kind: SlotKind, label: str, duration: int,
                 constraint: Constraint | None) -> Jobspec:
    """The request tree's jobspec of `kind` slots: what `Jobspec.parse` makes of
    `build_jobspec([kind])` with that duration and constraint (tested equal)."""
    system: dict = {"duration": duration}
    if constraint is not None:
        system["constraints"] = constraint.to_dict()
    return Jobspec(1, (_slot(kind, label, kind.count),), (_pod_task(label),),
                   {"system": system}, duration, constraint)


def _largest_first(kinds: list[Kind]) -> list[Kind]:
    def size(kind: Kind) -> tuple[int, int, int]:
        t = slot_totals(kind.resource)
        return t.get("gpu", 0), t.get("core", 0), t.get("memory", 0)

    return sorted(kinds, key=size, reverse=True)


def typed_kinds(kinds: tuple[SlotKind, ...], duration: int,
                constraint: Constraint | None) -> list[Kind]:
    """The request trees of a request of slot kinds, largest slot first (GPUs, then
    cores, then memory); labels s0, s1... in the order asked (`slot_labels`)."""
    labels = list(slot_labels(kinds))
    return _largest_first([Kind(i, k, kind_jobspec(k, labels[i], duration, constraint))
                           for i, k in enumerate(kinds)])


def split_slot_kinds(spec: Jobspec) -> list[Kind] | None:
    """One jobspec per top-level slot kind of `spec` (its tasks, attributes and
    constraints kept), largest slot first; None when `spec` has a single kind (or is
    not a list of slots)."""
    if len(spec.resources) < 2 or any(not r.is_slot for r in spec.resources):
        return None
    return _largest_first([
        Kind(i, flat_kind(slot), dataclasses.replace(
            spec,
            resources=(slot,),
            tasks=tuple(t for t in spec.tasks if t.slot == slot.label) or (_pod_task(slot.label),),
        ))
        for i, slot in enumerate(spec.resources)
    ])


def widest_slot(spec: Jobspec, kinds: list[Kind]) -> Jobspec | None:
    """`spec` asked as N slots of its kinds' largest shape (every leaf type at its
    largest), N the kinds' slots together; None unless every slot is flat
    core/gpu/memory (only those can be widened into one shape)."""
    if any(k.slot is None for k in kinds):
        return None
    slots = [k.slot for k in kinds]
    wide = SlotKind(max(s.cores for s in slots), max(s.gpus for s in slots),
                    max(s.memory_mib for s in slots), sum(s.count for s in slots))
    return dataclasses.replace(spec, resources=(_slot(wide, "reserve", wide.count),),
                               tasks=(_pod_task("reserve"),))


def cut(node: NodeShare, kind: SlotKind, granule_mib: int) -> list[NodeShare]:
    """`node` (whole slots of `kind` on one node) as one share per slot, lowest ids first.
    A slot's memory is its whole granules of the node (`granule_mib`)."""
    if kind.cores:
        n = len(node.cores) // kind.cores
    elif kind.gpus:
        n = len(node.gpus) // kind.gpus
    else:
        per_slot = -(-kind.memory_mib // granule_mib) * granule_mib
        n = node.memory_mib // per_slot if per_slot else 0
    c, g, memory = kind.cores, kind.gpus, node.memory_mib // n if n else 0
    return [NodeShare(node.rank, node.hostname, node.cores[i * c:(i + 1) * c],
                      node.gpus[i * g:(i + 1) * g], memory) for i in range(n)]
