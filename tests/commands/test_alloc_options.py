"""`fluxnode alloc` refuses counts that ask for nothing or for less than one node or slot by
naming the options typed, before it looks for a broker (exit 2, a usage error)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUXNODE_")}
    # A URI where nothing listens: reaching the connection would be a different error.
    return subprocess.run([sys.executable, "-m", "fluxnode", "alloc", *args, "--uri",
                           "local:///nonexistent"], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.parametrize(("args", "error"), [
    (("-c", "0"), "Error: -c/--cores-per-slot, -g/--gpus-per-slot and -m/--memory-per-slot are "
                  "all 0: a slot must ask for something"),
    (("-c", "-1"), "Error: Invalid value for '-c' / '--cores-per-slot': -1 is not in the range "
                   "x>=0."),
    (("-g", "-1"), "Error: Invalid value for '-g' / '--gpus-per-slot': -1 is not in the range "
                   "x>=0."),
    (("-m", "-1"), "Error: Invalid value for '-m' / '--memory-per-slot': -1 is not in the "
                   "range x>=0."),
    (("-N", "0"), "Error: Invalid value for '-N' / '--nodes': 0 is not in the range x>=1."),
    (("-n", "0"), "Error: Invalid value for '-n' / '--slots': 0 is not in the range x>=1."),
], ids=lambda value: " ".join(value) if isinstance(value, tuple) else "")
def test_bad_counts_name_the_option(args, error):
    r = run(*args)
    assert (r.returncode, r.stdout) == (2, ""), r
    assert r.stderr.splitlines()[-1] == error
    assert "Traceback" not in r.stderr


def test_counts_that_ask_for_something_get_as_far_as_the_connection():
    r = run("-c", "0", "-g", "1")
    assert r.returncode == 1 and r.stderr.startswith("Error: no broker is listening at "), r


def test_a_jobspec_error_is_placed_before_any_connection(tmp_path):
    """The jobspec is checked as the service checks it, line and column counted by hand:
    line 2's `core count: 1` lacks a comma, found at column 76 in the mapping opened at 59
    (alloc said `not YAML/JSON: while parsing a flow mapping`, with no place)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nresources: [{type: slot, count: 1, label: default, "
                   "with: [{type: core count: 1}]}]\ntasks: []\n")
    r = run(str(bad))
    assert (r.returncode, r.stdout) == (1, ""), r
    assert r.stderr.splitlines() == [
        f"Error: {bad}: line 2, column 76: did not find expected ',' or '}}' (while parsing "
        "a flow mapping started at line 2, column 59)"]
    bad.write_bytes(b"\xff\xfe\x00")
    r = run(str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
