"""Where the broker's log lines go: stderr at `log-stderr-level`, and everything to `log-filename`.

Every line carries the host and rank (``host broker[rank]: LEVEL message``) because an
instance's logs are read side by side: many brokers on one machine under
``fluxnode start``, or one per node collected by Kubernetes. Modules log under
``fluxnode.module.NAME`` and share the same handlers.
"""

from __future__ import annotations

import logging

from fluxnode.agent import logs
from fluxnode.agent.broker import attributes


def setup_logging(rank: int, hostname: str, attrs: dict[str, str]) -> logging.Logger:
    fmt = logging.Formatter(
        f"%(asctime)s {hostname} broker[{rank}]: %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    level = attributes.stderr_level(attrs.get("log-stderr-level", "6"))
    logs.setup_logging(level, fmt, log_file=attrs.get("log-filename") or None)
    return logging.getLogger("fluxnode.broker")
