"""What a `fluxnode binder` process says in its log that tests read back: the ports it got.

Tests start the binder with ``--http-port 0 --webhook-port 0`` (the kernel picks free ports,
so no other process can take them between a probe and the bind) and read the ports from the
lines fluxnode/commands/binder.py logs once each server listens:
``binder IDENTITY serving /healthz /readyz /metrics on HOST:PORT`` and
``binder IDENTITY serving the admission webhook on HOST:PORT``. This is the one reader of
those lines.
"""

from __future__ import annotations

import re
from pathlib import Path

HEALTH = "/healthz /readyz /metrics"
WEBHOOK = "the admission webhook"


def served_port(log_path: Path, identity: str, what: str) -> int | None:
    """The port binder `identity` says it serves `what` (HEALTH or WEBHOOK) on, from its log
    at `log_path`; None until it has said so (or while the log does not exist yet)."""
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    found = re.search(rf"binder {re.escape(identity)} serving {re.escape(what)} on "
                      r"127\.0\.0\.1:(\d+)", text)
    return int(found[1]) if found else None
