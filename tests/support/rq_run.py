"""Run `fluxnode resource-query` as a subprocess, as a user would, and write the jobspecs
its cases read."""

from __future__ import annotations

import subprocess
import sys


def rq(tmp_path, graph, commands: str, *args: str) -> tuple[str, str, int]:
    """(the -t output file's text, stderr, exit code) of one run reading ``commands``."""
    out = tmp_path / "out.R"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(graph), "-d",
         "-t", str(out), *args],
        input=commands, capture_output=True, text=True, timeout=60)
    return (out.read_text() if out.exists() else ""), proc.stderr, proc.returncode


def jobspec(resources: list[dict], duration: int) -> dict:
    """A version-9999 jobspec (RFC 25) of `resources`, one task per `default` slot."""
    return {"version": 9999, "resources": resources,
            "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": duration}}}
