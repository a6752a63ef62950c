"""What a user reads about a bad jobspec (issue 33): one line, the place in the text
(``line L, column C``, both 1-based) and the path of the field, and for a jobspec with
several errors the first one the user wrote, not a missing section libjobspec happens to
check first. ``what`` stays Fluxion's message (resource-query prints it).

Every expected message below was written by reading the input: the line and column are
counted by hand in the text shown next to it.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError

MISSING_ATTRIBUTES = 'Missing key "attributes" in top level mapping'


def error(doc) -> JobspecError:
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(doc)
    return info.value


def test_yaml_flow_mapping_closed_with_a_bracket() -> None:
    # line 2: resources: [{type: node, count: 1]
    #         `[` is column 12, `{` column 13, the `]` column 34
    err = error("version: 1\nresources: [{type: node, count: 1]\n")
    assert str(err) == ("line 2, column 34: did not find expected ',' or '}' "
                        "(while parsing a flow mapping started at line 2, column 13)")
    # Fluxion's message: yaml-cpp's place (the wording is the YAML library's)
    assert err.what == "yaml-cpp: error at line 2, column 34: did not find expected ',' or '}'"


def test_yaml_mapping_value_in_the_wrong_place() -> None:
    # line 2: resources: type: node -- the second `:` is column 16
    err = error("version: 1\nresources: type: node\n")
    assert str(err) == "line 2, column 16: mapping values are not allowed in this context"


def test_yaml_control_character() -> None:
    # line 3: "  - type: no\aode": the BEL is column 13
    err = error("version: 1\nresources:\n  - type: no\aode\n")
    assert str(err) == ("line 3, column 13: unacceptable character #x0007: control "
                        "characters are not allowed")


def test_json_error_is_placed_by_json() -> None:
    # JSON text missing the comma after "version": 1 -- "resources" opens line 3, column 3
    err = error('{\n  "version": 1\n  "resources": []\n}\n')
    assert str(err) == "line 3, column 3: Expecting ',' delimiter (read as JSON)"
    # Fluxion reads JSON as YAML: its message is still the YAML one
    assert err.what.startswith("yaml-cpp: error at line ")


SEVERAL = """\
version: 1
resources:
  - type: slot
    count: 1
    label: default
    with:
      - type: core
        count: 2
      - type: gpu
        count: -1
tasks:
  - command: [app]
    slot: default
    count:
      per_slot: 1
"""


def test_several_errors_the_written_one_first() -> None:
    # no attributes, and a count of -1: line 10 is "        count: -1", the -1 at column 16
    err = error(SEVERAL)
    assert str(err) == ("line 10, column 16: resources[0].with[1].count: bad conversion "
                        "('-1' is not an integer from 0 to 4294967295)")
    # libjobspec checks the top-level keys first: resource-query keeps its message
    assert err.what == MISSING_ATTRIBUTES
    assert (err.fluxion.path, err.fluxion.reason) == ("attributes", MISSING_ATTRIBUTES)


def test_missing_attributes_alone_is_reported_with_its_remedy() -> None:
    err = error(SEVERAL.replace("count: -1", "count: 1"))
    assert str(err) == ('line 1, column 1: attributes: Missing key "attributes" in top level '
                        "mapping (an empty mapping, attributes: {}, will do)")
    assert err.what == MISSING_ATTRIBUTES and err.fluxion is None
    assert Jobspec.parse(SEVERAL.replace("count: -1", "count: 1") + "attributes: {}\n")


def test_tasks_before_attributes() -> None:
    # libjobspec reads attributes before resources and tasks; the user reads the document
    # in RFC 14 order. Line 12 "  - command: [app]" opens task 0 at column 5 (no slot).
    text = SEVERAL.replace("count: -1", "count: 1").replace("    slot: default\n", "")
    text += "attributes:\n  system:\n    duration: 1h\n"
    err = error(text)
    assert str(err) == 'line 12, column 5: tasks[0]: Key "slot" missing from task'
    # duration is line 17 "    duration: 1h", the value at column 15
    assert err.what == "yaml-cpp: error at line 17, column 15: bad conversion"


# A valid jobspec (SEVERAL with its count fixed and attributes added) with one slip each:
# (name, text replaced, by, the message, libjobspec's message)
SLIPS = [
    # "resource:" opens line 2; libjobspec calls it a missing "resource"
    ("misspelt top-level key", "resources:", "resource:",
     "line 2, column 1: resource: Top mapping in jobspec must have exactly four entries "
     "(did you mean 'resources'?)",
     'Missing key "resource" in top level mapping'),
    # line 8 "        cont: 2": the key at column 9
    ("misspelt resource key", "count: 2", "cont: 2",
     "line 8, column 9: resources[0].with[0].cont: Unrecognized key in resource mapping "
     "(did you mean 'count'?)",
     'Key "count" missing from resource'),
    # a second "count: 2" after line 8 is line 9, column 9
    ("key given twice", "count: 2\n", "count: 2\n        count: 2\n",
     "line 9, column 9: resources[0].with[0].count: Unrecognized key in resource mapping "
     "(given twice)",
     "Unrecognized key in resource mapping"),
    # libjobspec takes unknown task keys, so the missing slot is the error; line 13 is
    # "    slto: default", the key at column 5
    ("misspelt task key", "slot: default", "slto: default",
     "line 13, column 5: tasks[0]: Key \"slot\" missing from task (is 'slto' a misspelt "
     "'slot'?)",
     'Key "slot" missing from task'),
]


@pytest.mark.parametrize(("old", "new", "message", "what"), [s[1:] for s in SLIPS],
                         ids=[s[0] for s in SLIPS])
def test_a_slip_is_named_where_it_is(old: str, new: str, message: str, what: str) -> None:
    valid = SEVERAL.replace("count: -1", "count: 1") + "attributes: {}\n"
    assert Jobspec.parse(valid)
    err = error(valid.replace(old, new, 1))
    assert str(err) == message
    assert err.what == what


def test_a_mapping_has_no_place_but_the_same_order() -> None:
    doc = {
        "version": 1,
        "resources": [{"type": "node", "count": {"min": 2, "max": 1, "operator": "+",
                                                 "operand": 1}}],
        "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
    }
    err = error(doc)
    assert str(err) == ('resources[0].count.max: "max" must be greater than or equal to '
                        '"min"')
    assert err.what == MISSING_ATTRIBUTES


def test_a_size_limit_names_no_place() -> None:
    # a bound on the whole document, not a mistake at one place
    err = error("[" * 100 + "]" * 100)
    assert str(err) == "jobspec: jobspec nests too deeply: more than 64 mappings and sequences"


def test_unknown_constraint_operator_is_placed_at_the_operator() -> None:
    # SEVERAL has 15 lines: line 18 is "    constraints: {nodes: [a]}", the `{` at column 18
    # and the operator at column 19
    text = SEVERAL.replace("count: -1", "count: 1") + (
        "attributes:\n  system:\n    constraints: {nodes: [a]}\n")
    err = error(text)
    assert str(err) == ("line 18, column 19: attributes.system.constraints: unknown constraint "
                        "operator: nodes")
