"""Run `fluxnode resource-query` as a subprocess, as a user would."""

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
