"""The installed `kubectl-fluxnode` console script itself: it is on the virtualenv's PATH
(pyproject.toml's [project.scripts]), its help and its usage errors import no Kubernetes
client (start-up stays quick), and a missing command is a usage error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "kubectl-fluxnode"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=60)


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_help_imports_no_kubernetes_client():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "queue" in r.stdout and "why" in r.stdout and "resources" in r.stdout
    modules = imported(r.stderr)
    assert "argparse" in modules  # the log is read right
    assert not {m for m in modules if m.split(".")[0] in ("kubernetes", "urllib3", "click")}
    assert {m for m in modules if m.startswith("fluxnode")} == {
        "fluxnode", "fluxnode.commands", "fluxnode.commands.kubectl_plugin",
        "fluxnode.commands.kubectl_queue", "fluxnode.commands.kubectl_why"}


def test_no_command_is_a_usage_error():
    r = run()
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].endswith(
        "error: the following arguments are required: COMMAND")
