"""The allocation record: one type for what the service handed out, used by the
service's table, its journal and (through the wire form) the binder's cache.

Why one record: an allocation used to be a service dataclass of dicts, a journal
entry with its own fields, an answer dict and a binder-side split of per-node totals,
with RFC 22 idset strings decoded wherever ids were needed. Here ids are lists of
ints; idsets exist only in the wire form (`to_wire`, `from_wire`: JSON a person can
read, what `fluxnode alloc` prints) and in the journal's text, which is the wire form.

A request made of slot kinds (the binder's pods, or a jobspec whose top level is
slots) keeps one `SlotShare` per slot: the caller gives each pod its slot directly,
after any restart too. `nodes` is always the per-node view (cancel by ranks, R,
`fluxnode allocs`, the fault checker).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from fluxnode.broker_conf import idset
from fluxnode.scheduler.jobspec.builder import SlotKind


class RecordError(ValueError):
    """A wire or journal form of a record does not parse; the message names the field."""


@dataclass(frozen=True, slots=True)
class NodeShare:
    """What one allocation (or one slot of it) holds on one node."""

    rank: int
    hostname: str
    cores: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    memory_mib: int = 0

    @property
    def empty(self) -> bool:
        return not (self.cores or self.gpus or self.memory_mib)

    def to_wire(self) -> dict:
        return {"rank": self.rank, "hostname": self.hostname, "cores": _idset(self.cores),
                "gpus": _idset(self.gpus), "memory_mib": self.memory_mib}

    @classmethod
    def from_wire(cls, obj: object, where: str = "node") -> NodeShare:
        if not isinstance(obj, dict):
            raise RecordError(f"{where}: must be an object")
        rank, memory = obj.get("rank"), obj.get("memory_mib") or 0
        for key, value in (("rank", rank), ("memory_mib", memory)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise RecordError(f"{where}.{key}: must be an integer >= 0")
        ids = {}
        for key in ("cores", "gpus"):
            text = obj.get(key) or ""
            if not isinstance(text, str):
                raise RecordError(f"{where}.{key}: must be an idset string")
            try:
                ids[key] = tuple(idset.decode(text))
            except idset.IdsetError as exc:
                raise RecordError(f"{where}.{key}: {exc}") from None
        return cls(rank, str(obj.get("hostname") or f"rank{rank}"), ids["cores"], ids["gpus"],
                   memory)

    def text(self) -> str:
        """What the share names, in words: "cores 6-7, 512 MiB" (for log lines)."""
        parts = [f"{key} {idset.encode(ids)}" for key, ids in
                 (("cores", self.cores), ("gpus", self.gpus)) if ids]
        if self.memory_mib:
            parts.append(f"{self.memory_mib} MiB")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class SlotShare:
    """One slot of an allocation: which kind of the request (its index) and where."""

    kind: int
    share: NodeShare

    def to_wire(self) -> dict:
        return {"kind": self.kind, **self.share.to_wire()}

    @classmethod
    def from_wire(cls, obj: object, where: str = "slot") -> SlotShare:
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if not isinstance(kind, int) or isinstance(kind, bool) or kind < 0:
            raise RecordError(f"{where}.kind: must be an integer >= 0")
        return cls(kind, NodeShare.from_wire({k: v for k, v in obj.items() if k != "kind"},
                                             where))


def _idset(ids: tuple[int, ...]) -> str:
    """RFC 22 text of ascending unique ids (a share's), the usual empty, single and one-range
    cases without the general encoder: a slot's ids are written for every pod placed."""
    if not ids:
        return ""
    if ids[-1] - ids[0] == len(ids) - 1:
        return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
    return idset.encode(ids)


def per_node(shares: Iterable[NodeShare]) -> list[NodeShare]:
    """Shares on the same rank as one (ids united, memory added), in rank order: the
    per-node view of an allocation's slots."""
    out: dict[int, NodeShare] = {}
    for s in shares:
        have = out.get(s.rank)
        out[s.rank] = s if have is None else replace(
            have, cores=tuple(sorted({*have.cores, *s.cores})),
            gpus=tuple(sorted({*have.gpus, *s.gpus})), memory_mib=have.memory_mib + s.memory_mib)
    return [out[r] for r in sorted(out)]


@dataclass
class Allocation:
    """One allocation, as the service keeps it, journals it and lists it."""

    id: int
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    policy: str
    nodes: list[NodeShare]
    labels: dict = field(default_factory=dict)
    created: float = 0.0
    jobspec: dict = field(default_factory=dict)  # as asked (RFC 14); {} for slots and adopt
    kinds: tuple[SlotKind, ...] | None = None  # a request of slot kinds: the kinds asked
    slots: tuple[SlotShare, ...] | None = None  # ...and where each slot landed
    use_drained: bool = False  # holds what already runs on drained nodes: never "draining"
    # the planner span it holds, journaled so a restarted leader books the same end: when it
    # began (whole seconds since the Unix epoch) and for how long (None: until cancelled)
    began: int | None = None
    duration: int | None = None
    # a reservation's start, seconds since the Unix epoch; None while it waits for something
    # without an end (live_graph.py HORIZON). Reservations are never journaled.
    start: int | None = None
    # ranks of `nodes` not held in the graph yet (not joined since a restart, or their part
    # could not be held: logged); held when they join, never handed to anyone else meanwhile
    pending: set[int] = field(default_factory=set)
    # the wire form of nodes and slots, made once (the answer and the journal both need it)
    _wire: dict | None = field(default=None, repr=False, compare=False)

    @property
    def ranks(self) -> list[int]:
        return [n.rank for n in self.nodes]

    def without(self, ranks: set[int]) -> None:
        """Forget what is held on `ranks` (a partial cancel)."""
        self.nodes = [n for n in self.nodes if n.rank not in ranks]
        if self.slots is not None:
            self.slots = tuple(s for s in self.slots if s.share.rank not in ranks)
        self.pending -= ranks
        self._wire = None

    def wire(self) -> dict:
        """`nodes` and (when there are) `slots` in their wire form; callers must not change
        it."""
        if self._wire is None:
            self._wire = {"nodes": [n.to_wire() for n in self.nodes]}
            if self.slots is not None:
                self._wire["slots"] = [s.to_wire() for s in self.slots]
        return self._wire

    def answer(self) -> dict:
        """The wire form of a sched.alloc / sched.adopt answer."""
        out = {"id": self.id, "status": self.status, "at": self.at, **self.wire()}
        if self.status == "RESERVED":
            out["start"] = self.start
        return out

    def summary(self) -> dict:
        """The wire form sched.list gives (the record without its jobspec)."""
        out = self.answer()
        out.update(policy=self.policy, labels=self.labels, created=self.created,
                   use_drained=self.use_drained, pending=idset.encode(sorted(self.pending)),
                   restored=not self.pending)
        if self.kinds is not None:
            out["kinds"] = [k.to_wire() for k in self.kinds]
        return out
