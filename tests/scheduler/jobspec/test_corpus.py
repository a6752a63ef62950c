"""Every jobspec in Fluxion's conformance corpus is accepted or refused as libjobspec does.

flux-sched's t3000-jobspec.t runs flux-jobspec-validate on validation/valid/*.yaml (must
pass) and validation/invalid/*.yaml (must fail); the reasons below are libjobspec's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fluxnode.scheduler.jobspec.jobspec import FLUXION_STATIC_TYPES, Jobspec, JobspecError
from support.paths import SHARED

CORPUS = SHARED / "fluxion-corpus"
JOBSPECS = CORPUS / "data" / "resource" / "jobspecs"

pytestmark = pytest.mark.skipif(not JOBSPECS.is_dir(), reason=f"no corpus at {CORPUS}")


def _files(sub: str) -> list[Path]:
    return sorted((JOBSPECS / sub).glob("*.yaml")) if JOBSPECS.is_dir() else []


# file -> (path, Fluxion's reason)
INVALID = {
    "attributes_bad_entry.yaml": ("attributes.foo", 'Unknown key in "attributes"'),
    "attributes_bad_properties.yaml": ("attributes.system.constraints.properties[0]",
                                       "fo`o is invalid"),
    "attributes_bad_properties2.yaml": ("attributes.system.constraints.properties",
                                        "properties operator value must be an array"),
    "attributes_bad_properties3.yaml": ("attributes.system.constraints.properties[0]",
                                        "f^oo is invalid"),
    "attributes_bad_properties4.yaml": ("attributes.system.constraints.properties[0]",
                                        "^f^oo is invalid"),
    "attributes_not_mapping.yaml": ("attributes", '"attributes" is not a map'),
    # a YAML syntax error: the YAML library's wording (libyaml or PyYAML), yaml-cpp's location
    "invalid_yaml1.yaml": ("", "mapping values are not allowed"),
    "missing_attributes.yaml": ("attributes", 'Missing key "attributes" in top level mapping'),
    "missing_resources.yaml": ("resources", 'Missing key "resource" in top level mapping'),
    "missing_tasks.yaml": ("tasks", 'Missing key "tasks" in top level mapping'),
    "missing_version.yaml": ("version", 'Missing key "version" in top level mapping'),
    "resource_count_add_zero.yaml": ("resources[0].count.operand",
                                     "\"operand\" must be greater than zero for addition '+'"),
    "resource_count_bad_type.yaml": ("resources[0].count", "count is not a mapping"),
    "resource_count_exponent_min_one.yaml": (
        "resources[0].count.min", "\"min\" must be greater than one for exponentiation '^'"),
    "resource_count_exponent_one.yaml": (
        "resources[0].count.operand",
        "\"operand\" must be greater than one for exponentiation '^'"),
    "resource_count_invalid_operator.yaml": ("resources[0].count.operator",
                                             "Invalid count operator"),
    "resource_count_max_bad_type.yaml": ("resources[0].count.max",
                                         'Value of "max" must be a scalar'),
    "resource_count_max_less_than_min.yaml": (
        "resources[0].count.max", '"max" must be greater than or equal to "min"'),
    "resource_count_min_bad_type.yaml": ("resources[0].count.min",
                                         'Value of "min" must be a scalar'),
    "resource_count_min_zero.yaml": ("resources[0].count.min",
                                     '"min" must be greater than zero'),
    "resource_count_missing_max.yaml": (
        "resources[0].count",
        'All or none of "max", "operator", and "operand" must be specified'),
    "resource_count_missing_min.yaml": ("resources[0].count", 'Key "min" missing from count'),
    "resource_count_missing_operand.yaml": (
        "resources[0].count",
        'All or none of "max", "operator", and "operand" must be specified'),
    "resource_count_missing_operator.yaml": (
        "resources[0].count",
        'All or none of "max", "operator", and "operand" must be specified'),
    "resource_count_multiply_one.yaml": (
        "resources[0].count.operand",
        "\"operand\" must be greater than one for multiplication '*'"),
    "resource_count_negative_max.yaml": ("resources[0].count.max", "bad conversion"),
    "resource_count_operand_bad_type.yaml": ("resources[0].count.operand",
                                             'Value of "operand" must be a scalar'),
    "resource_count_operator_bad_type.yaml": ("resources[0].count.operator",
                                              'Value of "operator" must be a scalar'),
    "resource_count_scalar_bad_value.yaml": ("resources[0].count", "bad conversion"),
    "resource_exclusive_invalid.yaml": (
        "resources[0].with[0].exclusive",
        'Value of "exclusive" must be either "true" or "false"'),
    "resource_exclusive_not_scalar.yaml": ("resources[0].exclusive",
                                           'Value of "exclusive" must be a scalar'),
    "resource_id_not_scalar.yaml": ("resources[0].id", 'Value of "id" must be a scalar'),
    "resource_label_not_scalar.yaml": ("resources[0].label",
                                       'Value of "label" must be a scalar'),
    "resource_missing_count.yaml": ("resources[0].with[0]",
                                    'Key "count" missing from resource'),
    "resource_missing_type.yaml": ("resources[0].with[0]", 'Key "type" missing from resource'),
    "resource_not_mapping.yaml": ("resources[0]", "resource is not a mapping"),
    "resource_slot_not_labelled.yaml": ("resources[0].label", "All slots must be labeled"),
    "resource_unit_not_scalar.yaml": ("resources[0].unit", 'Value of "unit" must be a scalar'),
    "resources_not_sequence.yaml": ("resources", '"resources" is not a sequence'),
    "task_command_not_array.yaml": ("tasks[0].command", '"command" value must be a sequence'),
    "task_count_multiple_keys.yaml": ("tasks[0].count",
                                      '"count" in task must have exactly one entry'),
    "task_count_not_mapping.yaml": ("tasks[0].count", '"count" in task is not a mapping'),
    "task_missing_command.yaml": ("tasks[0]", 'Key "command" missing from task'),
    "task_missing_count.yaml": ("tasks[0]", "impossible number of entries in task mapping"),
    "task_missing_slot.yaml": ("tasks[0]", 'Key "slot" missing from task'),
    "task_not_mapping.yaml": ("tasks[0]", "task is not a mapping"),
    "tasks_not_sequence.yaml": ("tasks", '"tasks" is not a sequence'),
    "version_bad_number.yaml": ("version", 'Only jobspec "version" 1-9999 is supported'),
    "version_not_scalar.yaml": ("version", '"version" must be an unsigned integer'),
}


@pytest.mark.parametrize("path", _files("validation/valid"), ids=lambda p: p.name)
def test_valid_jobspecs_parse(path: Path) -> None:
    js = Jobspec.parse(path.read_text())
    assert js.resources and js.tasks


@pytest.mark.parametrize("path", _files("validation/invalid"), ids=lambda p: p.name)
def test_invalid_jobspecs_fail_with_fluxion_reason(path: Path) -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(path.read_text())
    want_path, want_reason = INVALID[path.name]
    err = info.value
    if path.name == "invalid_yaml1.yaml":
        assert err.reason.startswith(want_reason)
        assert err.what.startswith("yaml-cpp: error at line 1, column 9: ")
        return
    # each file holds one error: the first for libjobspec and the first for the user
    assert err.fluxion is None
    assert (err.path, err.reason) == (want_path, want_reason)
    if want_reason == "bad conversion":
        assert err.what == f"yaml-cpp: error at line {err.line}, column {err.column + 1}: " \
                           "bad conversion"
    else:
        assert err.what == want_reason
    hint = f" ({err.hint})" if err.hint else ""
    assert str(err) == f"line {err.line}, column {err.column + 1}: {want_path}: " \
                       f"{want_reason}{hint}"


# The whole message for a few files, the place read off the file by hand.
MESSAGES = {
    "attributes_bad_entry.yaml":  # line 17 is "  foo: 1": the key at column 3
        'line 17, column 3: attributes.foo: Unknown key in "attributes"',
    "attributes_bad_properties.yaml":  # line 18 is '      properties: [ "fo`o", "b!ar" ]'
        "line 18, column 21: attributes.system.constraints.properties[0]: fo`o is invalid",
    "invalid_yaml1.yaml":  # foo: bar: baz
        "line 1, column 9: mapping values are not allowed in this context",
    "missing_attributes.yaml":  # the top mapping lacks it
        'line 1, column 1: attributes: Missing key "attributes" in top level mapping '
        "(an empty mapping, attributes: {}, will do)",
    "resource_count_max_less_than_min.yaml":  # line 6 is "      max: 1"
        'line 6, column 12: resources[0].count.max: "max" must be greater than or equal to '
        '"min"',
    "task_missing_slot.yaml":  # line 10 is "  - command: [ \"app\" ]"
        'line 10, column 5: tasks[0]: Key "slot" missing from task',
    "resource_count_scalar_bad_value.yaml":  # line 4 is "    count: bar"
        "line 4, column 12: resources[0].count: bad conversion ('bar' is not an integer "
        "from 0 to 4294967295)",
}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_invalid_jobspec_message(name: str) -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse((JOBSPECS / "validation" / "invalid" / name).read_text())
    assert str(info.value) == MESSAGES[name]


def test_every_invalid_file_has_an_expected_reason() -> None:
    assert {p.name for p in _files("validation/invalid")} == set(INVALID)


def _match_jobspecs() -> list[Path]:
    """Jobspec files named by `match`/`multi-match` lines of the corpus command files."""
    seen: set[Path] = set()
    commands = CORPUS / "data" / "resource" / "commands"
    if not commands.is_dir():
        return []
    for cmdfile in commands.rglob("*"):
        if not cmdfile.is_file():
            continue
        for line in cmdfile.read_text(errors="replace").splitlines():
            words = line.split()
            if not words or words[0] not in ("match", "multi-match"):
                continue
            for w in words[2:]:
                if "@TEST_SRCDIR@/data/resource/jobspecs/" in w:
                    seen.add(CORPUS / w.replace("@TEST_SRCDIR@/", ""))
    # a few command files that no case uses name jobspecs the corpus does not hold
    return sorted(p for p in seen if p.is_file())


# Match commands whose jobspec Fluxion refuses while parsing (libjobspec or YAML).
REFUSED_BY_PARSER = {"basics/bad.yaml"}
# Refused only because the type is not known to the resource graph (resource-query).
UNKNOWN_TYPE = {
    "basics/bad_res_type.yaml": "invalid_res_type",
    "flexible/test006.yaml": "does-not-exist",
}


@pytest.mark.parametrize("path", _match_jobspecs(),
                         ids=lambda p: str(p.relative_to(JOBSPECS)))
def test_match_jobspecs(path: Path) -> None:
    rel = str(path.relative_to(JOBSPECS))
    if rel in REFUSED_BY_PARSER:
        with pytest.raises(JobspecError) as info:
            Jobspec.parse(path.read_bytes())
        assert info.value.path == "" and info.value.what.startswith("yaml-cpp: error at line 4")
        return
    js = Jobspec.parse(path.read_bytes())
    assert js.version in (1, 9999)
    # parse(to_dict()) round-trips every corpus jobspec
    assert Jobspec.parse(js.to_dict()) == js
    if rel in UNKNOWN_TYPE:
        known = FLUXION_STATIC_TYPES | {t for t in js.types() if t != UNKNOWN_TYPE[rel]}
        with pytest.raises(JobspecError) as info:
            Jobspec.parse(path.read_bytes(), known_types=known)
        assert info.value.reason == 'Value of "type" must be a resource type known to fluxion'
        assert info.value.path.endswith(".type")


def test_corpus_has_match_jobspecs() -> None:
    assert len(_match_jobspecs()) > 150
