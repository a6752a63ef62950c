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
