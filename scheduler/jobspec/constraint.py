"""RFC 31 constraints (`Constraint`), read and matched as Fluxion's libjobspec does.

One concept: what a jobspec's ``system.constraints`` says and which nodes it admits.
Hostlists and rank sets are kept as matchers and ranges, never expanded, so a constraint
costs what its text costs (`n[0-16777215]` included).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.jobspec.document import DocNode, as_str, error_at, join_path

_BAD_PROPERTY_CHARS = set("!&'\"^`|()")
_NO_END = float("inf")


@dataclass(frozen=True, slots=True)
class Constraint:
    """An RFC 31 constraint: ``op`` is ``""`` (matches all), ``properties``, ``hostlist``,
    ``ranks``, ``and``, ``or`` or ``not``; ``values`` are strings or sub-constraints.

    Fluxion applies it only to ``node`` and ``storage_node`` vertices.
    """

    op: str = ""
    values: tuple[Any, ...] = ()
    #: what the values name, never expanded (``n[0-16777215]`` costs what its text
    #: costs): `hostlist.Matcher` objects (``hostlist``) or ``(lo, hi)`` rank ranges
    #: (``ranks``)
    members: tuple = field(default=(), compare=False, repr=False)

    def match(self, name: str, rank: int, properties: Collection[str] = ()) -> bool:
        if self.op == "":
            return True
        if self.op == "properties":
            for value in self.values:
                negate = value.startswith("^")
                found = (value[1:] if negate else value) in properties
                if found == negate:
                    return False
            return True
        if self.op == "hostlist":
            return any(name in m for m in self.members)
        if self.op == "ranks":
            k = bisect.bisect_right(self.members, (rank, _NO_END)) - 1
            return k >= 0 and rank <= self.members[k][1]
        results = (c.match(name, rank, properties) for c in self.values)
        if self.op == "or":
            return any(results)
        matched_all = all(results)
        return not matched_all if self.op == "not" else matched_all

    def to_dict(self) -> dict[str, Any]:
        if self.op == "":
            return {}
        if self.op in ("and", "or", "not"):
            return {self.op: [c.to_dict() for c in self.values]}
        return {self.op: list(self.values)}


def parse_constraint(node: DocNode, path: str) -> Constraint:
    if node.kind != "map":
        raise error_at(node, path, "constraint is not a mapping")
    if len(node) > 1:
        raise error_at(node, path, "constraint map may not contain > 1 operation")
    if len(node) == 0:
        return Constraint()
    key_node, operands = node.value[0]
    op = as_str(key_node, path)
    opath = join_path(path, op)
    if operands.kind != "seq":
        raise error_at(operands, opath, f"{op} operator value must be an array")
    items = operands.value
    if op == "properties":
        values = []
        for i, item in enumerate(items):
            if item.kind != "scalar" or not item.quoted:
                raise error_at(item, f"{opath}[{i}]", "non-string property specified")
            prop = item.value[1:] if item.value.startswith("^") else item.value
            if _BAD_PROPERTY_CHARS & set(prop):
                raise error_at(item, f"{opath}[{i}]", f"{item.value} is invalid")
            values.append(item.value)
        return Constraint(op, tuple(values))
    if op in ("hostlist", "ranks"):
        what = "hostlist" if op == "hostlist" else "idset"
        values, members = [], []
        for i, item in enumerate(items):
            text = as_str(item, f"{opath}[{i}]")
            try:
                if op == "hostlist":
                    members.append(hostlist.Matcher(text))
                else:
                    members.extend(idset.decode_ranges(text))
            except ValueError:
                raise error_at(item, f"{opath}[{i}]", f"Invalid {what} `{text}'") from None
            values.append(text)
        if op == "ranks":  # merged and sorted, for bisect
            members = idset.decode_ranges(",".join(f"{lo}-{hi}" for lo, hi in members))
        return Constraint(op, tuple(values), tuple(members))
    if op in ("and", "or", "not"):
        return Constraint(
            op, tuple(parse_constraint(c, f"{opath}[{i}]") for i, c in enumerate(items))
        )
    raise error_at(key_node, path, f"unknown constraint operator: {op}")
