"""Run `fluxnode resource-query` as a subprocess, as a user would, and write the jobspecs
its cases read; and the lines Fluxion's resource-query frames each answer with under
``-F simple`` (pasted from its runs), so a test's expected text is its trees and these."""

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


SEP = "INFO: =============================\n"


def framed_match(tree: str, jobid: int, status: str = "ALLOCATED", at: str = "Now") -> str:
    """One match's answer: its tree, then Fluxion's JOBID/RESOURCES/SCHEDULED AT lines."""
    return (f"{tree}{SEP}INFO: JOBID={jobid}\nINFO: RESOURCES={status}\n"
            f"INFO: SCHEDULED AT={at}\n{SEP}")


def framed_find(tree: str, expression: str) -> str:
    """One ``find``'s answer: its tree, then the EXPRESSION lines."""
    return f"{tree}{SEP}INFO: EXPRESSION=\"{expression}\"\n{SEP}"


def no_match(jobid: int) -> str:
    """A match that found nothing (the job id is still used up)."""
    return f"{SEP}INFO: No matching resources found\nINFO: JOBID={jobid}\n{SEP}"
