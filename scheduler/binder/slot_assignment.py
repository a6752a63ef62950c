"""Which pod gets which slot of a group's allocation.

The binder asks for a group as slot kinds, one kind per distinct pod shape, and the
service answers with one share per slot (``slots``: kind, rank, cores, GPUs, memory),
so each pod takes a slot of its own shape: the pods of a shape in uid order, its slots
in the order the service lists them (rank, then lowest ids). The pods of an Indexed Job
come in completion-index order instead (issue 30), so index i takes slot i of the
allocation: the same slot for the same index whoever places it. The same mapping serves
a binder rebuilding after a restart, with the slots its bound pods already use removed
(the unbound pods then take the slots left, still in index order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.podgroup import completion_index
from fluxnode.scheduler.jobspec.builder import SlotKind


class AssignmentError(RuntimeError):
    """The allocation has no slot for some pod."""


@dataclass(frozen=True, slots=True)
class PodSlot:
    """One pod's share: where it runs and which cores/GPUs it owns."""

    rank: int
    hostname: str
    cores: str
    gpus: str

    @classmethod
    def of(cls, slot: dict) -> PodSlot:
        """A slot as the service lists it (its wire form)."""
        return cls(int(slot["rank"]), slot["hostname"], slot.get("cores") or "",
                   slot.get("gpus") or "")

    def ids(self) -> tuple[set[int], set[int]]:
        return set(idset.decode(self.cores)), set(idset.decode(self.gpus))


def slots_by_shape(kinds: list[dict], slots: list[dict]) -> dict[SlotKind, list[PodSlot]]:
    """An answer's (or a listed allocation's) slots per pod shape (a kind of count 1), in
    the service's order. `kinds` are the kinds asked, in their wire form."""
    shapes = [replace(SlotKind.from_wire(k), count=1) for k in kinds]
    out: dict[SlotKind, list[PodSlot]] = {}
    for slot in slots:
        out.setdefault(shapes[slot["kind"]], []).append(PodSlot.of(slot))
    return out


class _Pod(Protocol):
    uid: str
    raw: dict


def indexes(pods: Iterable[_Pod]) -> dict[str, int]:
    """uid -> completion index, for the pods that have one."""
    out = {}
    for pod in pods:
        i = completion_index(pod.raw)
        if i is not None:
            out[pod.uid] = i
    return out


def assign(pods: dict[str, SlotKind], slots: dict[SlotKind, list[PodSlot]],
           index: dict[str, int] | None = None) -> dict[str, PodSlot]:
    """Each pod (uid -> its shape) a slot of its shape, slots in order: pods with a
    completion index (`index`, uid -> index) first in index order, then the others in uid
    order."""
    index = index or {}
    free = {shape: list(s) for shape, s in slots.items()}
    out: dict[str, PodSlot] = {}
    order = sorted(pods.items(), key=lambda item: (
        (0, index[item[0]], item[0]) if item[0] in index else (1, 0, item[0])))
    for uid, shape in order:
        room = free.get(shape)
        if not room:
            raise AssignmentError(
                f"allocation has no slot left for a pod of {shape.cores} cores, {shape.gpus} "
                f"GPUs and {shape.memory_mib} MiB of memory"
            )
        out[uid] = room.pop(0)
    return out
