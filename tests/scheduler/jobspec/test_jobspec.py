"""Jobspec parsing rules (libjobspec's), errors naming their path, builder and helpers."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from fluxnode.scheduler.jobspec.builder import (
    JobspecBuildError,
    SlotKind,
    build_jobspec,
    slot_labels,
)
from fluxnode.scheduler.jobspec.constraint import Constraint
from fluxnode.scheduler.jobspec.jobspec import UINT_MAX, Jobspec, JobspecError
from fluxnode.scheduler.jobspec.model import Count, Resource


class _QuotingDumper(yaml.SafeDumper):
    """Writes every string quoted, as JSON would (yaml-cpp tells quoted from plain)."""


_QuotingDumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style='"'))


def dump(doc) -> str:
    return yaml.dump(doc, Dumper=_QuotingDumper)


def base() -> dict:
    return {
        "version": 1,
        "resources": [{
            "type": "node", "count": 1,
            "with": [{"type": "slot", "count": 2, "label": "task",
                      "with": [{"type": "core", "count": 4}, {"type": "gpu", "count": 1}]}],
        }],
        "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 60}},
    }


def edit(path: str, value, *, delete: bool = False) -> dict:
    """base() with the value at dotted `path` (list indexes as numbers) replaced/deleted."""
    doc = base()
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = doc
    for p in parts[:-1]:
        target = target[p]
    if delete:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return doc


VALID = [
    ("base", base()),
    ("version 9999", edit("version", 9999)),
    ("attributes null", edit("attributes", None)),
    ("attributes empty", edit("attributes", {})),
    ("count min only", edit("resources.0.count", {"min": 2})),
    ("count range +", edit("resources.0.count",
                           {"min": 1, "max": 8, "operator": "+", "operand": 1})),
    ("count range *", edit("resources.0.count",
                           {"min": 1, "max": 8, "operator": "*", "operand": 2})),
    ("count range ^", edit("resources.0.count",
                           {"min": 2, "max": 16, "operator": "^", "operand": 2})),
    ("count as text", edit("resources.0.count", "3")),
    ("count zero scalar (libjobspec does not check it)", edit("resources.0.count", 0)),
    ("exclusive", edit("resources.0.exclusive", True)),
    ("exclusive false", edit("resources.0.exclusive", False)),
    ("unit and id", edit("resources.0.with.0.with.0", {"type": "memory", "count": 4,
                                                       "unit": "GB", "id": "m0"})),
    ("unknown type accepted without known_types", edit("resources.0.type", "zone")),
    ("task total", edit("tasks.0.count", {"total": 10})),
    ("task without count but distribution",
     edit("tasks.0", {"command": ["a"], "slot": "task", "distribution": "x"})),
    ("task attributes", edit("tasks.0.attributes", {"x": "y"})),
    ("empty command", edit("tasks.0.command", [])),
    ("system queue cwd env", edit("attributes.system", {
        "duration": 1.5, "queue": "batch", "cwd": "/tmp", "environment": {"A": "1"}})),
    ("system extra keys kept", edit("attributes.system.shell", {"options": {"x": 1}})),
    ("user attributes", edit("attributes.user", {"anything": [1, 2]})),
    ("constraints empty", edit("attributes.system.constraints", {})),
    ("constraints ranks", edit("attributes.system.constraints", {"ranks": ["0-3,7"]})),
    ("constraints hostlist", edit("attributes.system.constraints",
                                  {"hostlist": ["node[1-4,7],login0"]})),
    ("constraints nested", edit("attributes.system.constraints", {
        "or": [{"properties": ["^slow"]}, {"not": [{"hostlist": ["bad0"]}]}]})),
]


@pytest.mark.parametrize("doc", [d for _, d in VALID], ids=[n for n, _ in VALID])
def test_valid(doc: dict) -> None:
    js = Jobspec.parse(doc)
    # the same document as YAML text and as JSON text gives the same jobspec
    assert Jobspec.parse(dump(doc)) == js
    assert Jobspec.parse(json.dumps(doc)) == js
    assert Jobspec.parse(json.dumps(doc).encode()) == js
    assert Jobspec.parse(js.to_dict()) == js


INVALID = [
    # (name, document, path, reason)
    ("not a mapping", [1], "", "Top level of jobspec is not a mapping"),
    ("five keys", edit("extra", 1), "extra",
     "Top mapping in jobspec must have exactly four entries"),
    ("version 0", edit("version", 0), "version", 'Only jobspec "version" 1-9999 is supported'),
    ("version text", edit("version", "one"), "version", "bad conversion"),
    ("version negative", edit("version", -1), "version", "bad conversion"),
    ("attributes list", edit("attributes", [1]), "attributes", '"attributes" is not a map'),
    ("system list", edit("attributes.system", [1]), "attributes.system",
     "invalid node; this may result from using a map iterator as a sequence iterator, "
     "or vice-versa"),
    ("duration text", edit("attributes.system.duration", "1h"),
     "attributes.system.duration", "bad conversion"),
    ("queue map", edit("attributes.system.queue", {"a": 1}), "attributes.system.queue",
     "bad conversion"),
    ("resources map", edit("resources", {"type": "node"}), "resources",
     '"resources" is not a sequence'),
    ("with map", edit("resources.0.with", {"type": "core", "count": 1}),
     "resources[0].with", '"resources" is not a sequence'),
    ("type list", edit("resources.0.type", ["node"]), "resources[0].type",
     'Value of "type" must be a scalar'),
    ("count null", edit("resources.0.count", None), "resources[0].count",
     "count is not a mapping"),
    ("count float", edit("resources.0.with.0.with.0.count", 1.5),
     "resources[0].with[0].with[0].count", "bad conversion"),
    ("count overflow", edit("resources.0.count", UINT_MAX + 1), "resources[0].count",
     "bad conversion"),
    ("min zero", edit("resources.0.with.0.with.1.count", {"min": 0}),
     "resources[0].with[0].with[1].count.min", '"min" must be greater than zero'),
    ("operator two chars", edit("resources.0.count",
                                {"min": 1, "max": 2, "operator": "++", "operand": 1}),
     "resources[0].count.operator", "bad conversion"),
    ("operator minus", edit("resources.0.count",
                            {"min": 1, "max": 2, "operator": "-", "operand": 1}),
     "resources[0].count.operator", "Invalid count operator"),
    ("exclusive yes", edit("resources.0.exclusive", "yes"), "resources[0].exclusive",
     'Value of "exclusive" must be either "true" or "false"'),
    ("requires key", edit("resources.0.requires", [{"properties": ["x"]}]),
     "resources[0].requires", "Unrecognized key in resource mapping"),
    ("slot without label", edit("resources.0.with.0.label", None, delete=True),
     "resources[0].with[0].label", "All slots must be labeled"),
    ("label null", edit("resources.0.with.0.label", None), "resources[0].with[0].label",
     'Value of "label" must be a scalar'),
    ("command string", edit("tasks.0.command", "app"), "tasks[0].command",
     '"command" value must be a sequence'),
    ("command nested", edit("tasks.0.command", [["a"]]), "tasks[0].command[0]",
     "bad conversion"),
    ("slot list", edit("tasks.0.slot", ["task"]), "tasks[0].slot",
     'Value of task "slot" must be a YAML scalar'),
    ("task count empty", edit("tasks.0.count", {}), "tasks[0].count",
     '"count" in task must have exactly one entry'),
    ("task six keys", edit("tasks.0", {"command": ["a"], "slot": "task",
                                       "count": {"total": 1}, "a": 1, "b": 2, "c": 3}),
     "tasks[0]", "impossible number of entries in task mapping"),
    ("tasks map", edit("tasks", {"command": ["a"]}), "tasks", '"tasks" is not a sequence'),
    ("constraint list", edit("attributes.system.constraints", [1]),
     "attributes.system.constraints", "constraint is not a mapping"),
    ("constraint two ops", edit("attributes.system.constraints",
                                {"ranks": ["0"], "hostlist": ["a"]}),
     "attributes.system.constraints", "constraint map may not contain > 1 operation"),
    ("constraint unknown op", edit("attributes.system.constraints", {"xor": []}),
     "attributes.system.constraints", "unknown constraint operator: xor"),
    ("constraint op not array", edit("attributes.system.constraints", {"and": {}}),
     "attributes.system.constraints.and", "and operator value must be an array"),
    ("property not string", edit("attributes.system.constraints", {"properties": [5]}),
     "attributes.system.constraints.properties[0]", "non-string property specified"),
    ("property bad char", edit("attributes.system.constraints", {"properties": ["a|b"]}),
     "attributes.system.constraints.properties[0]", "a|b is invalid"),
    ("bad hostlist", edit("attributes.system.constraints", {"hostlist": ["node[1-"]}),
     "attributes.system.constraints.hostlist[0]", "Invalid hostlist `node[1-'"),
    ("bad idset", edit("attributes.system.constraints", {"ranks": ["3-1"]}),
     "attributes.system.constraints.ranks[0]", "Invalid idset `3-1'"),
    ("nested bad constraint", edit("attributes.system.constraints",
                                   {"and": [{"ranks": ["0"]}, {"or": [{"ranks": ["x"]}]}]}),
     "attributes.system.constraints.and[1].or[0].ranks[0]", "Invalid idset `x'"),
]


HINTED = ("bad conversion", "Top mapping in jobspec must have exactly four entries",
          "Unrecognized key in resource mapping")


@pytest.mark.parametrize(("doc", "path", "reason"), [c[1:] for c in INVALID],
                         ids=[c[0] for c in INVALID])
def test_invalid_names_path(doc, path: str, reason: str) -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(copy.deepcopy(doc))
    err = info.value
    assert (err.path, err.reason) == (path, reason)
    # a conversion error also says what the value should have been, an unknown key the
    # keys there are (a hint, not Fluxion's); a mapping has no place to name
    hint = f" ({err.hint})" if err.hint else ""
    assert str(err) == f"{path or 'jobspec'}: {reason}{hint}"
    assert bool(err.hint) == (reason in HINTED)
    assert isinstance(err, ValueError)
    # and from YAML text, with the same path and reason
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(dump(doc))
    assert (info.value.path, info.value.reason) == (path, reason)


def test_yaml_cpp_scalar_rules() -> None:
    text = yaml.safe_dump(base())  # plain (unquoted) scalars
    # octal and hex counts, as iostreams read them with the base left unset
    js = Jobspec.parse(text.replace("count: 4", "count: 010"))
    assert js.resources[0].with_[0].with_[0].count == Count(8, 8)
    js = Jobspec.parse(text.replace("count: 4", "count: 0x10"))
    assert js.resources[0].with_[0].with_[0].count == Count(16, 16)
    # only the exact words true/false
    with pytest.raises(JobspecError, match="must be either"):
        Jobspec.parse(text.replace("- count: 1\n", "- count: 1\n  exclusive: True\n", 1))
    # properties must be quoted strings in YAML text, as yaml-cpp's Tag() check wants
    plain = text.replace("duration: 60", "duration: 60\n    constraints:\n"
                         "      properties: [foo]")
    with pytest.raises(JobspecError, match="non-string property specified"):
        Jobspec.parse(plain)
    assert Jobspec.parse(plain.replace("[foo]", '["foo"]')).constraints == \
        Constraint("properties", ("foo",))


def test_yaml_errors_carry_yaml_cpp_location() -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse("version: 1\nresources:\n  - type: node\n    count: bar\n"
                      "tasks: []\nattributes:\n")
    err = info.value
    assert err.path == "resources[0].count"
    assert err.what == "yaml-cpp: error at line 4, column 12: bad conversion"
    assert (err.line, err.column) == (4, 11)


def test_first_document_only_and_empty_text() -> None:
    doc = dump(base())
    assert Jobspec.parse(doc + "---\nfoo: 1\n") == Jobspec.parse(doc)
    with pytest.raises(JobspecError, match="Top level of jobspec is not a mapping"):
        Jobspec.parse("")


def test_known_types() -> None:
    doc = edit("resources.0.with.0.with.1.type", "fpga")
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(doc, known_types={"node", "slot", "core", "gpu"})
    assert info.value.path == "resources[0].with[0].with[1].type"
    assert info.value.reason == 'Value of "type" must be a resource type known to fluxion'
    Jobspec.parse(doc, known_types={"node", "slot", "core", "fpga"})


def test_model_fields() -> None:
    js = Jobspec.parse(edit("attributes.system", {
        "duration": 3600.0, "queue": "q", "constraints": {"ranks": ["1"]}}))
    assert js.version == 1 and js.duration == 3600.0 and js.queue == "q"
    node = js.resources[0]
    assert node == Resource("node", Count(1, 1), with_=node.with_)
    slot = node.with_[0]
    assert slot.is_slot and slot.label == "task" and slot.count == Count(2, 2)
    assert [r.type for r in js.walk()] == ["node", "slot", "core", "gpu"]
    assert js.tasks[0].per_slot == 1 and js.tasks[0].total is None
    assert js.constraints.match("n1", 1) and not js.constraints.match("n0", 0)
    assert js.attributes["system"]["queue"] == "q"
    min_only = Jobspec.parse(edit("resources.0.count", {"min": 3}))
    assert min_only.resources[0].count == Count(3, UINT_MAX, "+", 1)


@pytest.mark.parametrize(("count", "available", "expected"), [
    (Count(2, 2), 5, 2),
    (Count(2, 2), 1, 0),
    (Count(1, 10, "+", 1), 7, 7),
    (Count(1, 10, "+", 3), 9, 7),  # 1, 4, 7, 10: largest <= 9
    (Count(1, 10, "+", 3), 100, 10),
    (Count(1, 100, "*", 2), 50, 32),
    (Count(3, 100, "*", 3), 2, 0),
    (Count(2, 300, "^", 2), 300, 256),  # 2, 4, 16, 256
    (Count(2, 300, "^", 3), 300, 8),  # 2, 8, 512
    (Count(1), 12, 12),  # min only: take all
])
def test_count_calc_like_fluxion(count: Count, available: int, expected: int) -> None:
    assert count.calc(available) == expected


def test_count_values_and_effective_max() -> None:
    assert list(Count(1, 10, "+", 3).values()) == [1, 4, 7, 10]
    assert list(Count(1, 10, "*", 2).values()) == [1, 2, 4, 8]
    assert list(Count(2, 300, "^", 2).values()) == [2, 4, 16, 256]
    assert Count(4, 4).effective_max == 4
    assert Count(1).effective_max == UINT_MAX
    assert Count(1, 10, "+", 3).effective_max == 10


@pytest.mark.parametrize(("expr", "name", "rank", "props", "expected"), [
    ({}, "x", 0, (), True),
    ({"properties": ["a", "^b"]}, "x", 0, ("a",), True),
    ({"properties": ["a", "^b"]}, "x", 0, ("a", "b"), False),
    ({"hostlist": ["node[1-3,7]"]}, "node7", 0, (), True),
    ({"hostlist": ["node[1-3,7]"]}, "node4", 0, (), False),
    ({"hostlist": ["node[01-10]"]}, "node05", 0, (), True),
    ({"hostlist": ["node[01-10]"]}, "node5", 0, (), False),
    ({"ranks": ["0-2", "9"]}, "x", 9, (), True),
    ({"ranks": ["0-2", "9"]}, "x", 5, (), False),
    ({"not": [{"ranks": ["0"]}]}, "x", 0, (), False),
    ({"or": [{"ranks": ["0"]}, {"hostlist": ["x"]}]}, "x", 4, (), True),
    ({"and": [{"ranks": ["0"]}, {"hostlist": ["x"]}]}, "x", 4, (), False),
])
def test_constraint_match(expr, name, rank, props, expected) -> None:
    js = Jobspec.parse(edit("attributes.system.constraints", expr))
    assert js.constraints.match(name, rank, props) is expected
    assert js.constraints.to_dict() == expr


def test_build_slots_only() -> None:
    js = Jobspec.parse(build_jobspec([SlotKind(2, 1, 0, 4)], duration=30))
    assert js.to_dict() == {
        "version": 1,
        "resources": [{"type": "slot", "count": 4, "label": "s0", "with": [
            {"type": "core", "count": 2}, {"type": "gpu", "count": 1}]}],
        "tasks": [{"command": ["pod"], "slot": "s0", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 30}},
    }
    assert js.duration == 30


def test_build_nodes_exclusive_constraints() -> None:
    js = Jobspec.parse(build_jobspec([SlotKind(1, 0, 512, 4)], nnodes=2, exclusive_nodes=True,
                                     constraints={"hostlist": ["node[0-1]"]}))
    node = js.resources[0]
    assert (node.type, node.count, node.exclusive) == ("node", Count(2, 2), True)
    assert node.with_[0].count == Count(2, 2) and node.with_[0].label == "s0"
    assert [c.type for c in node.with_[0].with_] == ["core", "memory"]
    assert js.constraints.match("node1", 1)
    assert Jobspec.parse(js.to_dict()) == js


def test_build_several_kinds_labels() -> None:
    kinds = [SlotKind(1, 0, 0, 2), SlotKind(2, 1, 100, 1)]
    js = Jobspec.parse(build_jobspec(kinds, name="g"))
    assert [(r.label, r.count.min) for r in js.resources] == [("s0", 2), ("s1", 1)]
    assert [t.slot for t in js.tasks] == ["s0", "s1"]
    assert slot_labels(kinds) == {"s0": kinds[0], "s1": kinds[1]}
    assert js.attributes["system"]["job"] == {"name": "g"}


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ([SlotKind(1, 0, 0, 0)], {}, "slots: must be >= 1"),
    ([], {}, "at least one slot is required"),
    ([SlotKind(0, 0, 0, 1)], {}, "slot s0: asks for nothing"),
    ([SlotKind(-1, 0, 0, 1)], {}, "must be >= 0"),
    ([SlotKind(1, 0, 0, 3)], {"nnodes": 2}, "--slots 3 is not a multiple of --nodes 2"),
    ([SlotKind(1, 0, 0, 2)], {"nnodes": 0}, "--nodes: must be >= 1"),
    ([SlotKind(1), SlotKind(2)], {"nnodes": 1}, "--nodes needs a single slot kind"),
    ([SlotKind(1)], {"exclusive_nodes": True}, "exclusive nodes need --nodes"),
])
def test_build_errors(args, kwargs, message) -> None:
    with pytest.raises(JobspecBuildError, match=message):
        build_jobspec(args, **kwargs)


@pytest.mark.parametrize("doc", [
    "a: &x [*x]\n",
    "version: 1\nresources: " + "[" * 5000 + "]" * 5000 + "\ntasks: []\nattributes:\n",
], ids=["self-alias", "deep"])
def test_self_reference_and_deep_nesting_are_errors(doc) -> None:
    with pytest.raises(JobspecError, match="nests too deeply"):
        Jobspec.parse(doc)


def test_non_data_values_are_errors() -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(edit("attributes.user", {"x": object()}))
    assert info.value.path == "attributes.user.x"
    assert info.value.reason == "unsupported value of type object"
