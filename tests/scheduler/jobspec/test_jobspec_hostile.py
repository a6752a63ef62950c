"""Hostile jobspecs (issue 11): each is a JobspecError naming the problem, at bounded cost.

Before: ``[`` x 30000 crashed the process (SIGSEGV in PyYAML's C composer), a 414-byte
alias bomb took seconds and hundreds of MiB, ``.inf`` durations, scalar ``system`` and
lone surrogates raised OverflowError/TypeError/UnicodeEncodeError.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
import tracemalloc

import pytest
from fluxnode.scheduler.jobspec import request
from fluxnode.scheduler.jobspec.document import DEFAULT_LIMITS
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError, Limits

BASE = """version: 9999
resources:
  - type: node
    count: 1
    with:
      - type: slot
        count: 1
        label: default
        with:
          - type: core
            count: 1
tasks:
  - command: [app]
    slot: default
    count:
      per_slot: 1
"""


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def with_attributes(text: str) -> str:
    return BASE + "attributes:\n" + "".join(f"  {line}\n" for line in text.splitlines())


def _cost(doc):
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(JobspecError) as exc:
        Jobspec.parse(doc)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return exc.value, elapsed, peak


DEEP = {
    "flow": "[" * 30000 + "]" * 30000,
    "json": '{"a":' * 30000 + "1" + "}" * 30000,
    "block": "- " * 30000 + "x\n",
    "just-over": "version: 1\nresources: " + "[" * 65 + "]" * 65 + "\ntasks: []\nattributes:\n",
}


@pytest.mark.parametrize("name", list(DEEP))
def test_nesting_is_bounded_before_recursing(name, tmp_path):
    # in a child process: before the fix "flow" and "json" were SIGSEGV (-11) in PyYAML's
    # C composer, which would end pytest itself
    code = (
        "import sys, time, tracemalloc\n"
        "from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError\n"
        "doc = open(sys.argv[1]).read()\n"
        "tracemalloc.start(); t0 = time.perf_counter()\n"
        "try:\n    Jobspec.parse(doc)\n"
        "except JobspecError as e:\n"
        "    print(time.perf_counter() - t0, tracemalloc.get_traced_memory()[1], e.errnum, e)\n"
    )
    path = tmp_path / "doc.yaml"
    path.write_text(DEEP[name])
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    _elapsed, peak, errnum, message = proc.stdout.split(" ", 3)
    assert int(errnum) == errno.E2BIG
    assert message.startswith("jobspec: jobspec nests too deeply: more than 64 mappings")
    assert int(peak) < 8 << 20  # memory, not time: a bound that load does not move


def test_nesting_bound_holds_for_parsed_mappings():
    deep: dict = {"leaf": 1}
    for _ in range(100):
        deep = {"a": deep}
    err, _, _ = _cost({"version": 1, "resources": [], "tasks": [],
                       "attributes": {"user": deep}})
    assert "nests too deeply" in str(err)


def test_alias_bomb_is_refused_quickly_and_small():
    bomb = alias_bomb()
    assert len(bomb) < 500
    err, elapsed, peak = _cost(bomb)
    assert f"more than {DEFAULT_LIMITS.max_nodes} nodes" in str(err)
    assert err.errnum == errno.E2BIG
    # before: 13.7 s and 610 MiB for 229 bytes
    assert peak < 8 << 20


def test_aliases_within_the_budget_still_work():
    doc = BASE + "attributes:\n  user:\n    a: &x [1, 2]\n    b: *x\n"
    assert Jobspec.parse(doc).attributes["user"] == {"a": [1, 2], "b": [1, 2]}


def test_alias_inside_its_own_anchor_is_an_error():
    with pytest.raises(JobspecError, match=r"alias \*x is inside the collection &x"):
        Jobspec.parse("a: &x [*x]\n")


def test_size_is_bounded_before_parsing():
    doc = BASE + "attributes:\n  user:\n    pad: '" + "x" * (1 << 20) + "'\n"
    err, _, peak = _cost(doc)
    assert f"more than the limit of {1 << 20}" in str(err) and err.errnum == errno.E2BIG
    # refused on its length: the text's bytes (1 MiB), not a parse (3 MiB for one under it)
    assert peak < 2 << 20, peak


def test_limits_are_the_callers():
    small = Limits(max_bytes=100, max_depth=3, max_nodes=10)
    with pytest.raises(JobspecError, match="more than the limit of 100"):
        Jobspec.parse(BASE, limits=small)
    with pytest.raises(JobspecError, match="more than 3 mappings"):
        Jobspec.parse("a: [[[1]]]", limits=Limits(max_depth=3))
    with pytest.raises(JobspecError, match="more than 10 nodes"):
        Jobspec.parse("a: [1,2,3,4,5,6,7,8,9,10]", limits=Limits(max_nodes=10))
    assert Jobspec.parse(BASE + "attributes:\n", limits=Limits(max_nodes=40)).version == 9999


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e999"])
def test_duration_must_be_finite(value):
    doc = with_attributes(f"system:\n  duration: {value}")
    with pytest.raises(JobspecError, match="is not a finite number of seconds") as exc:
        request.from_jobspec(doc)
    assert exc.value.path == "attributes.system.duration"


def test_duration_must_be_finite_in_a_mapping():
    spec = json.loads(json.dumps(Jobspec.parse(BASE + "attributes:\n").to_dict()))
    spec["attributes"] = {"system": {"duration": float("inf")}}
    with pytest.raises(JobspecError, match="not a finite number"):
        request.from_jobspec(spec)


@pytest.mark.parametrize("value", ["1", '"1e9"', "[]", "''"])
def test_system_must_be_a_mapping(value):
    with pytest.raises(JobspecError, match='"system" in "attributes" is not a mapping'):
        Jobspec.parse(with_attributes(f"system: {value}"))


def test_empty_system_is_no_system():
    assert Jobspec.parse(with_attributes("system:")).duration == 0


def test_lone_surrogate_is_a_jobspec_error():
    with pytest.raises(JobspecError, match="not valid Unicode text: surrogates not allowed"):
        Jobspec.parse(BASE.replace("[app]", '["\ud800"]') + "attributes:\n")


def test_non_utf8_bytes_are_a_jobspec_error():
    data = (BASE + "attributes:\n").encode().replace(b"app", b"\xff\xfe")
    with pytest.raises(JobspecError, match=r"not UTF-8 text: byte 0xff at offset \d+"):
        Jobspec.parse(data)


def test_huge_rank_constraint_is_not_expanded():
    doc = with_attributes('system:\n  constraints:\n    ranks: ["0-16777215"]')
    t0 = time.perf_counter()
    spec = Jobspec.parse(doc)
    assert time.perf_counter() - t0 < 0.1  # before: 7 s
    c = spec.constraints
    assert c.match("n", 0) and c.match("n", 16777215) and not c.match("n", 16777216)


def test_rank_constraint_matches_as_the_idset_says():
    doc = with_attributes('system:\n  constraints:\n    ranks: ["5,0-2", "9", "2-3"]')
    c = Jobspec.parse(doc).constraints
    assert [r for r in range(12) if c.match("n", r)] == [0, 1, 2, 3, 5, 9]


def test_huge_hostlist_constraint_is_not_expanded():
    doc = with_attributes('system:\n  constraints:\n    hostlist: ["node[0-16777215]"]')
    t0 = time.perf_counter()
    c = Jobspec.parse(doc).constraints
    assert time.perf_counter() - t0 < 0.1
    assert c.match("node77", 0) and not c.match("node16777216", 0) and not c.match("x", 0)


# Found by `make fuzz-jobspec` (atheris): a mapping key that is itself a mapping or a
# sequence (YAML allows it, Python dicts do not) was a TypeError ("unhashable type").
FUZZ_CRASH_1 = (
    b'{"version": 1, "resources": [{"tount": [{"type": "core", "count": 1}]}], "tasks": '
    b'[{"command": ["x"], "with": "t", "count": {"per_slot": 1}}], "attributes": {"system": '
    b'{"d666666uon": 1, "resources": [{"type": "slot",{"per_slot": 1}}], ["x"], "with":}}}')


@pytest.mark.parametrize("text, where", [
    (FUZZ_CRASH_1, "attributes.system.resources[0]"),
    ("version: 1\nresources:\n  - type: core\n    count: 1\ntasks:\n  - command: [x]\n"
     "    slot: default\n    count: {per_slot: 1}\nattributes:\n  user:\n    ? [a]\n    : 1\n",
     "attributes.user"),
    ("version: 1\nresources:\n  - type: core\n    count: 1\ntasks:\n  - command: [x]\n"
     "    slot: default\n    count: {per_slot: 1}\nattributes:\n  system:\n    x: {{a: 1}: 2}\n",
     "attributes.system.x"),
])
def test_a_mapping_or_sequence_as_a_mapping_key_is_named(text, where):
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(text)
    # the error libjobspec meets first (it reads attributes before resources and tasks)
    first_for_fluxion = info.value.fluxion or info.value
    assert first_for_fluxion.path == where
    assert first_for_fluxion.reason.startswith("a mapping key must be a scalar"), info.value


def test_fuzz_crash_reports_the_resource_typo_before_the_attributes_key():
    # {"version": 1, "resources": [{"tount": ...: the misspelt key opens at column 31,
    # and comes before the mapping used as a key inside attributes.system
    with pytest.raises(JobspecError) as info:
        Jobspec.parse(FUZZ_CRASH_1)
    assert str(info.value) == ("line 1, column 31: resources[0].tount: Unrecognized key in "
                               "resource mapping (did you mean 'count'?)")
    assert info.value.what == "a mapping key must be a scalar, not a mapping"
