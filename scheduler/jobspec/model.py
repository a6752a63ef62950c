"""The jobspec's data model: `Count`, `Resource` and `Task`, as libjobspec holds them.

Kept apart from the reader (`jobspec.py`), which builds them with libjobspec's checks, so
that what a jobspec is can be read without how a text becomes one. A `Count` computes what
Fluxion's ``calc`` and ``calc_effective_max`` compute (operators ``+``, ``*``, ``^`` over
``min..max``); `to_dict` writes each back in the form it came in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxnode.scheduler.jobspec.document import UINT_MAX


@dataclass(frozen=True, slots=True)
class Count:
    """A resource count: ``min``, or a range ``min..max`` stepping by ``operator operand``.

    A scalar count ``n`` is ``Count(n, n)``; a mapping with ``min`` only leaves ``max`` at
    ``UINT_MAX`` (libjobspec's default: "at least min").
    """

    min: int
    max: int = UINT_MAX
    operator: str = "+"
    operand: int = 1

    @property
    def is_fixed(self) -> bool:
        return self.min == self.max

    def calc(self, available: int) -> int:
        """How many to take when ``available`` qualify; 0 when ``min`` cannot be met.

        Fluxion's ``matcher_util_api_t::calc_count``: the largest legal value not above
        ``available`` or ``max``, with its unsigned 32-bit arithmetic.
        """
        lo, hi, qc = self.min, self.max, available
        if lo > hi or lo > qc:
            return 0
        if lo == hi:  # a fixed count (most of them): every operator gives min
            return lo
        count, cur = 0, lo
        if self.operator == "+":
            count = min(qc, hi)
            count -= (count - cur) % self.operand
        elif self.operator == "*":
            if self.operand == 1:
                count = cur
            else:
                while cur <= qc and cur <= hi:
                    count = cur
                    cur = (cur * self.operand) & UINT_MAX
                    if cur == 0:  # wrapped: Fluxion would spin; stop at the last value
                        break
        elif self.operator == "^":
            if self.operand < 2 or cur == 1:
                count = cur
            else:
                while cur <= qc and cur <= hi:
                    base, count = cur, cur
                    for _ in range(1, self.operand):
                        cur = (cur * base) & UINT_MAX
                    if cur <= count:  # wrapped
                        break
        return count

    @property
    def effective_max(self) -> int:
        """Fluxion's ``calc_effective_max``: ``calc(UINT_MAX)``."""
        return self.calc(UINT_MAX)

    def values(self) -> Iterator[int]:
        """The legal counts, ascending: min, then min op operand, ... up to max."""
        cur = self.min
        while cur <= self.max:
            yield cur
            if self.operator == "+":
                nxt = cur + self.operand
            elif self.operator == "*":
                nxt = cur * self.operand
            else:
                nxt = cur**self.operand
            if nxt <= cur:
                return
            cur = nxt

    def to_obj(self) -> int | dict[str, Any]:
        if self.is_fixed and self.operator == "+" and self.operand == 1:
            return self.min
        if self.max == UINT_MAX and self.operator == "+" and self.operand == 1:
            return {"min": self.min}
        return {"min": self.min, "max": self.max, "operator": self.operator,
                "operand": self.operand}


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource vertex request; ``exclusive`` is None when unspecified."""

    type: str
    count: Count
    unit: str = ""
    label: str = ""
    id: str = ""
    exclusive: bool | None = None
    with_: tuple[Resource, ...] = ()

    @property
    def is_slot(self) -> bool:
        return self.type == "slot"

    def walk(self) -> Iterator[Resource]:
        """This resource and all below it, pre-order."""
        yield self
        for child in self.with_:
            yield from child.walk()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "count": self.count.to_obj()}
        if self.unit:
            out["unit"] = self.unit
        if self.label:
            out["label"] = self.label
        if self.id:
            out["id"] = self.id
        if self.exclusive is not None:
            out["exclusive"] = self.exclusive
        if self.with_:
            out["with"] = [r.to_dict() for r in self.with_]
        return out


@dataclass(frozen=True, slots=True)
class Task:
    """A task entry. ``count`` holds the one ``per_slot``/``total`` entry as text, as Fluxion."""

    command: tuple[str, ...]
    slot: str
    count: Mapping[str, str] = field(default_factory=dict)
    distribution: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def per_slot(self) -> int | None:
        return _maybe_int(self.count.get("per_slot"))

    @property
    def total(self) -> int | None:
        return _maybe_int(self.count.get("total"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"command": list(self.command), "slot": self.slot}
        if self.count:
            out["count"] = {k: _maybe_int(v) if _maybe_int(v) is not None else v
                            for k, v in self.count.items()}
        if self.distribution:
            out["distribution"] = self.distribution
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out


def _maybe_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
