"""Jobspecs (RFC 14 canonical, RFC 25 version 1) as Fluxion's libjobspec reads them.

The scheduler must accept and reject exactly the jobspecs Fluxion accepts and rejects, and
report the same reason, so this parser follows libjobspec's checks in libjobspec's order
rather than a schema: e.g. version 1-9999 is accepted, ``attributes`` may be empty, a count
mapping may give ``min`` alone (meaning "at least min"), tasks need 3-5 keys.

Fluxion parses with yaml-cpp, where every scalar is a string converted on use
(``count: 010`` is octal 8, ``exclusive: True`` is not ``true``); `document` gives this
module that view of the text and yaml-cpp's conversions, and this module builds the model
(`model`: `Count`, `Resource`, `Task`; `constraint`: `Constraint`) and the `Jobspec` with
libjobspec's checks.

Errors are :class:`JobspecError` naming the path (``resources[0].with[1].count.min``);
``.reason`` keeps Fluxion's wording and ``.what`` is the exact text Fluxion's
``parse_error::what()`` would hold (yaml-cpp conversion errors carry
``yaml-cpp: error at line L, column C: bad conversion``). A jobspec with several errors is
checked twice: libjobspec's order gives ``.what``, the user's order (what is written before
what is missing) the error raised, whose ``str()`` is ``line L, column C: path: reason``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxnode.scheduler.jobspec.constraint import Constraint, parse_constraint
from fluxnode.scheduler.jobspec.document import (
    DEFAULT_LIMITS,
    FLUXION_STATIC_TYPES,
    INT_MAX,
    INT_MIN,
    UINT_MAX,
    UNKNOWN_TYPE,
    DocNode,
    JobspecError,
    Limits,
    as_char,
    as_double,
    as_int,
    as_str,
    as_unsigned,
    error_at,
    join_path,
    load_document,
    map_items,
    to_python,
)
from fluxnode.scheduler.jobspec.model import Count, Resource, Task

__all__ = [
    "FLUXION_STATIC_TYPES",
    "UINT_MAX",
    "Jobspec",
    "JobspecError",
    "Limits",
]

# --------------------------------------------------------------------------------------
# Parsing in libjobspec's order


def _parse_count(cnode: DocNode, path: str) -> Count:
    if cnode.kind == "scalar":
        n = as_unsigned(cnode, path)
        return Count(n, n)
    if cnode.kind != "map":
        raise error_at(cnode, path, "count is not a mapping")
    mn = cnode.get("min")
    if mn is None:
        raise error_at(cnode, path, 'Key "min" missing from count')
    if mn.kind != "scalar":
        raise error_at(mn, f"{path}.min", 'Value of "min" must be a scalar')
    mx, op, opd = cnode.get("max"), cnode.get("operator"), cnode.get("operand")
    maximum, oper, operand = UINT_MAX, "+", 1
    if mx is not None or op is not None or opd is not None:
        if mx is None or op is None or opd is None:
            raise error_at(cnode, path,
                       'All or none of "max", "operator", and "operand" must be specified')
        for name, node in (("max", mx), ("operator", op), ("operand", opd)):
            if node.kind != "scalar":
                raise error_at(node, f"{path}.{name}", f'Value of "{name}" must be a scalar')
        maximum = as_unsigned(mx, f"{path}.max")
        oper = as_char(op, f"{path}.operator")
        operand = as_int(opd, f"{path}.operand", INT_MIN, INT_MAX, unsigned=False)
    minimum = as_unsigned(mn, f"{path}.min")
    if minimum < 1:
        raise error_at(mn, f"{path}.min", '"min" must be greater than zero')
    if mx is not None and maximum < minimum:
        raise error_at(mx, f"{path}.max", '"max" must be greater than or equal to "min"')
    if oper == "+":
        if operand < 1:
            raise error_at(opd, f"{path}.operand",
                       "\"operand\" must be greater than zero for addition '+'")
    elif oper == "*":
        if operand < 2:
            raise error_at(opd, f"{path}.operand",
                       "\"operand\" must be greater than one for multiplication '*'")
    elif oper == "^":
        if operand < 2:
            raise error_at(opd, f"{path}.operand",
                       "\"operand\" must be greater than one for exponentiation '^'")
        if minimum < 2:
            raise error_at(mn, f"{path}.min",
                       "\"min\" must be greater than one for exponentiation '^'")
    else:
        raise error_at(op, f"{path}.operator", "Invalid count operator")
    return Count(minimum, maximum, oper, operand)


_RESOURCE_KEYS = ("type", "count", "unit", "exclusive", "with", "label", "id")
_UNRECOGNIZED_RESOURCE_KEY = "Unrecognized key in resource mapping"


def _parse_resources(
    node: DocNode, path: str, known: Collection[str] | None, fluxion_order: bool
) -> tuple[Resource, ...]:
    if node.kind != "seq":
        raise error_at(node, path, '"resources" is not a sequence')
    return tuple(_parse_resource(r, f"{path}[{i}]", known, fluxion_order)
                 for i, r in enumerate(node.value))


def _unknown_key(node: DocNode, known: tuple[str, ...]) -> DocNode | None:
    """The first key of mapping `node` that is not one of `known`."""
    for k, _ in node.value:
        if not (k.kind == "scalar" and k.value in known):
            return k
    return None


def _unknown_key_error(key: DocNode, path: str, reason: str,
                       known: tuple[str, ...]) -> JobspecError:
    """`reason` placed at the unknown `key`, with the known key it was likely meant to be."""
    import difflib  # only a refused jobspec needs it (the leader's memory: docs/benchmarks.md)

    name = str(key.value) if key.kind == "scalar" else ""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known keys: " + ", ".join(known)
    return error_at(key, join_path(path, name) if name else path, reason, hint)


def _repeated_key(node: DocNode) -> DocNode:
    """The second occurrence of the first key mapping `node` gives twice."""
    seen = set()
    for k, _ in node.value:
        if k.value in seen:
            return k
        seen.add(k.value)
    return node


def _parse_resource(node: DocNode, path: str, known: Collection[str] | None,
                    fluxion_order: bool) -> Resource:
    if node.kind != "map":
        raise error_at(node, path, "resource is not a mapping")
    if not fluxion_order and (key := _unknown_key(node, _RESOURCE_KEYS)) is not None:
        # a misspelt key is the mistake, not the "missing" key it was meant to be
        raise _unknown_key_error(key, path, _UNRECOGNIZED_RESOURCE_KEY, _RESOURCE_KEYS)
    tnode = node.get("type")
    if tnode is None:
        raise error_at(node, path, 'Key "type" missing from resource')
    if tnode.kind != "scalar":
        raise error_at(tnode, f"{path}.type", 'Value of "type" must be a scalar')
    rtype = tnode.value
    if known is not None and rtype not in known:
        raise error_at(tnode, f"{path}.type", UNKNOWN_TYPE)
    cnode = node.get("count")
    if cnode is None:
        raise error_at(node, path, 'Key "count" missing from resource')
    count = _parse_count(cnode, f"{path}.count")
    fields = 2
    unit = label = rid = ""
    exclusive: bool | None = None
    children: tuple[Resource, ...] = ()
    if (n := node.get("unit")) is not None:
        if n.kind != "scalar":
            raise error_at(n, f"{path}.unit", 'Value of "unit" must be a scalar')
        fields += 1
        unit = n.value
    if (n := node.get("exclusive")) is not None:
        if n.kind != "scalar":
            raise error_at(n, f"{path}.exclusive", 'Value of "exclusive" must be a scalar')
        fields += 1
        if n.value not in ("true", "false"):
            raise error_at(n, f"{path}.exclusive",
                       'Value of "exclusive" must be either "true" or "false"')
        exclusive = n.value == "true"
    if (n := node.get("with")) is not None:
        fields += 1
        children = _parse_resources(n, f"{path}.with", known, fluxion_order)
    if (n := node.get("label")) is not None:
        if n.kind != "scalar":
            raise error_at(n, f"{path}.label", 'Value of "label" must be a scalar')
        fields += 1
        label = n.value
    elif rtype == "slot":
        raise error_at(node, f"{path}.label", "All slots must be labeled")
    if (n := node.get("id")) is not None:
        if n.kind != "scalar":
            raise error_at(n, f"{path}.id", 'Value of "id" must be a scalar')
        fields += 1
        rid = n.value
    if fields != len(node):
        if (key := _unknown_key(node, _RESOURCE_KEYS)) is not None:
            raise _unknown_key_error(key, path, _UNRECOGNIZED_RESOURCE_KEY, _RESOURCE_KEYS)
        key = _repeated_key(node)
        raise error_at(key, join_path(path, str(key.value)), _UNRECOGNIZED_RESOURCE_KEY,
                       "given twice")
    return Resource(rtype, count, unit, label, rid, exclusive, children)


_TASK_KEYS = ("command", "slot", "count", "distribution", "attributes")


def _missing_key_error(node: DocNode, path: str, name: str, reason: str,
                       known: tuple[str, ...]) -> JobspecError:
    """`reason` for key `name` missing from mapping `node`; placed at a key that is not one
    of `known` but looks like `name` (libjobspec takes unknown task keys), when there is one."""
    import difflib  # (see _unknown_key_error)

    for k, _ in node.value:
        if (k.kind == "scalar" and k.value not in known
                and difflib.get_close_matches(k.value, [name], n=1)):
            return error_at(k, path, reason, f"is {k.value!r} a misspelt {name!r}?")
    return error_at(node, path, reason)


def _parse_task(node: DocNode, path: str) -> Task:
    if node.kind != "map":
        raise error_at(node, path, "task is not a mapping")
    cmd = node.get("command")
    if cmd is None:
        raise _missing_key_error(node, path, "command", 'Key "command" missing from task',
                                 _TASK_KEYS)
    if cmd.kind != "seq":
        raise error_at(cmd, f"{path}.command", '"command" value must be a sequence')
    command = tuple(as_str(a, f"{path}.command[{i}]") for i, a in enumerate(cmd.value))
    snode = node.get("slot")
    if snode is None:
        raise _missing_key_error(node, path, "slot", 'Key "slot" missing from task',
                                 _TASK_KEYS)
    if snode.kind != "scalar":
        raise error_at(snode, f"{path}.slot", 'Value of task "slot" must be a YAML scalar')
    count: dict[str, str] = {}
    if (c := node.get("count")) is not None:
        if c.kind != "map":
            raise error_at(c, f"{path}.count", '"count" in task is not a mapping')
        if len(c) != 1:
            raise error_at(c, f"{path}.count", '"count" in task must have exactly one entry')
        for key, value, vpath in map_items(c, f"{path}.count"):
            count[key] = as_str(value, vpath)
    distribution = ""
    if (d := node.get("distribution")) is not None:
        if d.kind != "scalar":
            raise error_at(d, f"{path}.distribution",
                       'Value of task "distribution" must be a YAML scalar')
        distribution = d.value
    attributes: dict[str, str] = {}
    if (a := node.get("attributes")) is not None:
        if a.kind != "map":
            raise error_at(a, f"{path}.attributes", '"attributes" in task is not a mapping')
        for key, value, vpath in map_items(a, f"{path}.attributes"):
            attributes[key] = as_str(value, vpath)
    if not 3 <= len(node) <= 5:
        raise error_at(node, path, "impossible number of entries in task mapping")
    return Task(command, snode.value, count, distribution, attributes)


@dataclass(frozen=True, slots=True)
class _Attributes:
    duration: float = 0.0
    queue: str = ""
    cwd: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    constraints: Constraint | None = None
    system: Mapping[str, Any] = field(default_factory=dict)
    user: Any = None


def _parse_attributes(node: DocNode, path: str) -> _Attributes:
    if node.kind != "map":
        raise error_at(node, path, '"attributes" is not a map')
    duration, queue, cwd = 0.0, "", ""
    env: dict[str, str] = {}
    constraints: Constraint | None = None
    system: dict[str, Any] = {}
    user: Any = None
    for key, value, kpath in map_items(node, path):
        if key == "user":
            user = to_python(value, kpath)
        elif key == "system":
            if value.kind == "scalar" or (value.kind == "seq" and not len(value)):
                # (yaml-cpp iterates these as empty; the service needs a mapping)
                raise error_at(value, kpath, '"system" in "attributes" is not a mapping')
            for skey, svalue, spath in map_items(value, kpath):
                if skey == "duration":
                    duration = as_double(svalue, spath)
                    if not math.isfinite(duration):
                        raise error_at(svalue, spath, f"duration {svalue.value!r} is not a "
                                       "finite number of seconds")
                elif skey == "queue":
                    queue = as_str(svalue, spath)
                elif skey == "cwd":
                    cwd = as_str(svalue, spath)
                elif skey == "environment":
                    for ekey, evalue, epath in map_items(svalue, spath):
                        env[ekey] = as_str(evalue, epath)
                elif skey == "constraints":
                    constraints = parse_constraint(svalue, spath)
                else:
                    system[skey] = to_python(svalue, spath)
        else:
            key_node = next(k for k, _ in node.value if k.kind == "scalar" and k.value == key)
            raise error_at(key_node, kpath, 'Unknown key in "attributes"')
    return _Attributes(duration, queue, cwd, env, constraints, system, user)


_TOP_KEYS = ("version", "resources", "tasks", "attributes")
_FOUR_ENTRIES = "Top mapping in jobspec must have exactly four entries"


def _check_top_keys(top: DocNode, fluxion_order: bool) -> None:
    """libjobspec's checks of the top-level keys: each present, and nothing else. In the
    user's order a key that is not a jobspec's (a misspelt ``resource:``) comes before
    the key it was meant to be, which is then missing."""
    if not fluxion_order and (key := _unknown_key(top, _TOP_KEYS)) is not None:
        raise _unknown_key_error(key, "", _FOUR_ENTRIES, _TOP_KEYS)
    for key, shown in zip(_TOP_KEYS, ("version", "resource", "tasks", "attributes"),
                          strict=True):
        if top.get(key) is None:
            hint = "an empty mapping, attributes: {}, will do" if key == "attributes" else ""
            raise error_at(top, key, f'Missing key "{shown}" in top level mapping', hint)
    if len(top) != 4:
        key = _unknown_key(top, _TOP_KEYS)
        if key is not None:
            raise _unknown_key_error(key, "", _FOUR_ENTRIES, _TOP_KEYS)
        key = _repeated_key(top)
        raise error_at(key, str(key.value), _FOUR_ENTRIES, "given twice")


def _parse_version(vnode: DocNode) -> int:
    if vnode.kind != "scalar":
        raise error_at(vnode, "version", '"version" must be an unsigned integer')
    version = as_unsigned(vnode, "version")
    if not 1 <= version <= 9999:
        raise error_at(vnode, "version", 'Only jobspec "version" 1-9999 is supported')
    return version


def _parse_tasks(node: DocNode) -> tuple[Task, ...]:
    if node.kind != "seq":
        raise error_at(node, "tasks", '"tasks" is not a sequence')
    return tuple(_parse_task(t, f"tasks[{i}]") for i, t in enumerate(node.value))


@dataclass(frozen=True, slots=True)
class Jobspec:
    """A parsed jobspec. ``attributes`` is the plain ``attributes`` mapping; the fields
    Fluxion reads from it are lifted out (``duration`` 0 when absent)."""

    version: int
    resources: tuple[Resource, ...]
    tasks: tuple[Task, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    duration: float = 0.0
    constraints: Constraint | None = None
    queue: str = ""

    @classmethod
    def parse(cls, obj: Mapping | str | bytes, *,
              known_types: Collection[str] | None = None,
              limits: Limits = DEFAULT_LIMITS) -> Jobspec:
        """Parse YAML/JSON text or a parsed mapping the way libjobspec does.

        ``known_types``: when given, a resource type outside it is refused as Fluxion
        refuses types its finalized interner never saw (e.g. FLUXION_STATIC_TYPES plus the
        graph's types). ``limits``: size, nesting and node-count bounds (`Limits`; over
        them is a `JobspecError` whose ``errnum`` is E2BIG).
        """
        try:
            return cls._parse(obj, known_types, limits)
        except RecursionError:
            raise JobspecError("", "jobspec nests too deeply (or refers to itself)") from None

    @classmethod
    def _parse(cls, obj: Mapping | str | bytes, known_types: Collection[str] | None,
               limits: Limits) -> Jobspec:
        top = load_document(obj, limits)
        try:
            return cls._check(top, known_types, fluxion_order=True)
        except JobspecError as fluxion_error:
            # the same checks in the user's order: the same jobspecs fail, and the first
            # error named is one the user wrote, not a section checked first by accident
            try:
                cls._check(top, known_types, fluxion_order=False)
            except JobspecError as first:
                if str(first) != str(fluxion_error):
                    first.fluxion = fluxion_error
                raise first from None
            raise

    @classmethod
    def _check(cls, top: DocNode, known_types: Collection[str] | None,
               fluxion_order: bool) -> Jobspec:
        """The model of `top`, or the first error in libjobspec's order (every top-level
        key present, exactly four, then version, attributes, resources, tasks) or in the
        user's: what is written before what is missing (version, resources, tasks,
        attributes, then keys that are not a jobspec's, then missing keys)."""
        if top.kind != "map":
            raise error_at(top, "", "Top level of jobspec is not a mapping")
        if fluxion_order:
            _check_top_keys(top, fluxion_order)
        vnode, anode = top.get("version"), top.get("attributes")
        rnode, tnode = top.get("resources"), top.get("tasks")
        version = _parse_version(vnode) if vnode is not None else 0
        attrs = _Attributes()
        if fluxion_order and anode.kind != "null":
            attrs = _parse_attributes(anode, "attributes")
        resources = (_parse_resources(rnode, "resources", known_types, fluxion_order)
                     if rnode is not None else ())
        tasks = _parse_tasks(tnode) if tnode is not None else ()
        if not fluxion_order:
            if anode is not None and anode.kind != "null":
                attrs = _parse_attributes(anode, "attributes")
            _check_top_keys(top, fluxion_order)
        return cls(
            version=version,
            resources=resources,
            tasks=tasks,
            attributes=to_python(anode, "attributes") or {},
            duration=attrs.duration,
            constraints=attrs.constraints,
            queue=attrs.queue,
        )

    def to_dict(self) -> dict[str, Any]:
        """The jobspec as a plain mapping; ``Jobspec.parse(js.to_dict()) == js``."""
        return {
            "version": self.version,
            "resources": [r.to_dict() for r in self.resources],
            "tasks": [t.to_dict() for t in self.tasks],
            "attributes": _plain(self.attributes),
        }

    def walk(self) -> Iterator[Resource]:
        """Every resource request, pre-order."""
        for r in self.resources:
            yield from r.walk()

    def types(self) -> set[str]:
        return {r.type for r in self.walk()}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value

