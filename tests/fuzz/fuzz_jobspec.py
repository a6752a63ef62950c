"""Fuzz target: the jobspec reader and the match request built from it (what `sched.alloc`
and `fluxnode resource-query` take from users). Allowed outcome: a request or a JobspecError."""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).parent))
with atheris.instrument_imports():
    from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
    from fluxnode.scheduler.jobspec.request import from_jobspec

from common import run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def one_input(data: bytes) -> None:
    try:
        spec = Jobspec.parse(data)
    except JobspecError:
        return
    try:
        from_jobspec(spec)
    except JobspecError:
        return


def seeds() -> list[bytes]:
    found = [p.read_bytes() for p in sorted((REPO / "example").glob("jobspec*.yaml"))]
    found += [p.read_bytes() for p in sorted((REPO / "tests").rglob("*.yaml"))
              if b"resources" in p.read_bytes()][:200]
    found.append(b'{"version": 1, "resources": [{"type": "slot", "count": 2, "label": "t", '
                 b'"with": [{"type": "core", "count": 1}]}], "tasks": [{"command": ["x"], '
                 b'"slot": "t", "count": {"per_slot": 1}}], "attributes": {"system": '
                 b'{"duration": 60}}}')
    return found


if __name__ == "__main__":
    run(one_input, seeds)
