"""A make target that needs a tool it cannot find says so in one line, and runs nothing.

`make kind-up` on a machine without kind printed `/bin/sh: 2: kind: not found` and `Error
127`; `make deploy` without a cluster printed kubectl's `localhost:8080 connection refused`.
Each now names what is missing and the page that explains the setup. The tools are pointed
at paths that cannot exist, so the test reads the same on a machine that has them.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from support.paths import REPO

MISSING = {"DOCKER": "/nonexistent/docker", "KIND": "/nonexistent/kind",
           "KUBECTL": "/nonexistent/kubectl"}
PAGE = "docs/installer.md, section 'Deploy on kind'"


def make(*goals: str, **variables: str) -> subprocess.CompletedProcess:
    """make as a person runs it from a shell: not a sub-make of `make check` (whose
    MAKEFLAGS and MAKELEVEL would add `Entering directory` lines)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    return subprocess.run(["make", *(f"{k}={v}" for k, v in variables.items()), *goals],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("goal", "tool"), [
    ("kind-up", "Docker: '/nonexistent/docker' is not on PATH"),
    ("image", "Docker: '/nonexistent/docker' is not on PATH"),
    ("kind-load", "kind (https://kind.sigs.k8s.io/): '/nonexistent/kind' is not on PATH"),
    ("deploy", "kubectl: '/nonexistent/kubectl' is not on PATH"),
    ("undeploy", "kubectl: '/nonexistent/kubectl' is not on PATH"),
])
def test_a_missing_tool_is_named_in_one_line(goal: str, tool: str):
    done = make(goal, **MISSING)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"Makefile:{_line_of(done.stderr)}: *** make {goal} needs {tool}; see {PAGE}.  Stop."]


def test_kubectl_without_a_cluster_is_named_with_its_context():
    """`false` stands for a kubectl that reaches no server (its `version` fails)."""
    done = make("deploy", KUBECTL="false")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"Makefile:{_line_of(done.stderr)}: *** make deploy: kubectl reaches no cluster "
        f"(context: none); 'make kind-up' makes one; see {PAGE}.  Stop."]


def test_the_page_named_has_that_section():
    text = (REPO / "docs/installer.md").read_text()
    assert re.search(r"^## Deploy on kind$", text, re.M)
    for tool in ("Docker", "kind", "kubectl"):
        assert tool in text.split("## Deploy on kind", 1)[1].split("\n## ", 1)[0]


def _line_of(stderr: str) -> str:
    m = re.match(r"Makefile:(\d+): ", stderr)
    assert m, stderr
    return m.group(1)
