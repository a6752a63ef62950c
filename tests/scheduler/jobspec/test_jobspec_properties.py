"""Property tests for the jobspec parser (issue 11): any text, bytes or JSON-like value is
a Jobspec or a JobspecError (never another exception), within the parse limits; built
jobspecs round-trip."""

from __future__ import annotations

import json

import yaml
from fluxnode.scheduler.jobspec import request
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.jobspec.document import load_document
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import PROFILE

VALID = yaml.safe_dump(build_jobspec([SlotKind(2, 1, 64, 4)], nnodes=2))
TOKENS = ["version: 1\n", "resources:\n", "tasks:\n", "attributes:\n", "  system:\n",
          "    duration: ", ".inf", ".nan", "1e999", "- ", "  - ", "type: ", "node", "slot",
          "core", "count: ", "-1", "0", "4294967296", "{min: 1}", "label: s\n", "with:\n",
          "&a ", "*a", "[", "]", "{", "}", ", ", ": ", "\n", "    ", "!!str ", "'", '"',
          "\t", "\ud800", "\xff", "constraints: {ranks: [0-16777215]}",
          "constraints: {hostlist: ['n[0-99999999]']}", "command: [a]\n", "slot: s\n",
          "---\n", "...\n", "? ", "| \n", "%YAML 1.1\n", "#c\n", "~", "null"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["version", "resources", "tasks", "attributes", "type", "count",
                         "with", "label", "system", "duration", "min", "max", "operator",
                         "operand", "slot", "command", "constraints", "x"]),
        inner, max_size=5),
    max_leaves=25,
)


def refused(top, fluxion_order: bool) -> bool:
    try:
        Jobspec._check(top, None, fluxion_order=fluxion_order)
    except JobspecError:
        return True
    return False


def check(obj):
    try:
        js = Jobspec.parse(obj)
    except JobspecError as exc:
        assert str(exc) and exc.errnum in (7, 22)  # E2BIG, EINVAL
        js = None
    try:
        top = load_document(obj)
    except JobspecError:
        assert js is None  # not read: refused before any check
        return
    # libjobspec's order and the user's run the same checks, so both refuse or both accept
    # (parse runs the user's only after libjobspec's refused: reach both directly)
    assert refused(top, fluxion_order=True) == refused(top, fluxion_order=False) == (js is None)
    if js is None:
        return
    try:
        request.from_jobspec(js)
    except JobspecError:
        pass


@PROFILE
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_token_soup_is_a_jobspec_or_a_jobspec_error(tokens):
    check("".join(tokens))


@PROFILE
@given(st.text(max_size=80))
def test_any_text_is_a_jobspec_or_a_jobspec_error(text):
    check(text)


@PROFILE
@given(st.integers(0, len(VALID) - 1), st.text(max_size=6), st.integers(0, 6))
def test_mutated_jobspec_text(at, insert, cut):
    check(VALID[:at] + insert + VALID[at + cut:])


@PROFILE
@given(st.binary(max_size=60))
def test_any_bytes_are_a_jobspec_or_a_jobspec_error(data):
    check(data)
    check(VALID.encode() + data)


@PROFILE
@given(JSON)
def test_any_json_value_is_a_jobspec_or_a_jobspec_error(value):
    check(value)
    base = json.loads(json.dumps(build_jobspec([SlotKind(1, 0, 0, 1)])))
    for key in ("resources", "attributes", "tasks", "version"):
        check({**base, key: value})
    check({**base, "resources": [{**base["resources"][0], "x": value}]})


@PROFILE
@given(st.integers(1, 8), st.integers(0, 2), st.integers(0, 4096), st.integers(1, 50),
       st.one_of(st.none(), st.integers(1, 8)), st.booleans())
def test_built_jobspecs_round_trip(cores, gpus, memory, count, nnodes, exclusive):
    if nnodes and count % nnodes:
        count = nnodes * count
    spec = build_jobspec([SlotKind(cores, gpus, memory, count)], nnodes=nnodes,
                         exclusive_nodes=exclusive and nnodes is not None)
    js = Jobspec.parse(spec)
    assert Jobspec.parse(js.to_dict()) == js
    assert Jobspec.parse(yaml.safe_dump(spec)) == js
    assert Jobspec.parse(json.dumps(spec)) == js

