"""Which pod gets which slot of a group's allocation.

The binder asks for a group as slot kinds, one kind per distinct pod shape, and the
service answers with one share per slot (``slots``: kind, rank, cores, GPUs, memory),
so each pod takes a slot of its own shape: the pods of a shape in uid order, its slots
in the order the service lists them (rank, then lowest ids). The same mapping serves a
binder rebuilding after a restart, with the slots its bound pods already use removed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fluxnode.broker_conf import idset
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


def assign(pods: dict[str, SlotKind],
           slots: dict[SlotKind, list[PodSlot]]) -> dict[str, PodSlot]:
    """Each pod (uid -> its shape) a slot of its shape: pods in uid order, slots in order."""
    free = {shape: list(s) for shape, s in slots.items()}
    out: dict[str, PodSlot] = {}
    for uid, shape in sorted(pods.items()):
        room = free.get(shape)
        if not room:
            raise AssignmentError(
                f"allocation has no slot left for a pod of {shape.cores} cores, {shape.gpus} "
                f"GPUs and {shape.memory_mib} MiB of memory"
            )
        out[uid] = room.pop(0)
    return out
