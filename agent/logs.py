"""Structured logs of the long-running Kubernetes daemons (node agent, binder): one setup.

Kubernetes collects a container's stderr; a log pipeline indexes it best when every
record is one line of fields. Both daemons log through the ``fluxnode`` logger tree
with one handler on stderr, a UTC timestamp with milliseconds, the level in lower
case and the logger name; they differ only in the line's syntax, which their users
already parse: the binder writes JSON objects (``ts``, ``level``, ``logger``,
``msg``, ``error`` with a traceback), the node agent ``key=value`` pairs
(``time=... level=... logger=... msg="..."``, Kubernetes' logfmt). The broker
(agent/broker/logging_setup.py) uses the same setup with its Flux-style line and,
with ``log-filename``, a file that gets every level.
"""

from __future__ import annotations

import json
import logging
import sys
import time

ROOT_LOGGER = "fluxnode"


def utc_timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 UTC time of a record, in milliseconds: ``2024-05-01T12:00:00.123Z``."""
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log collectors index without parsing rules."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": utc_timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out)


class LogfmtFormatter(logging.Formatter):
    """One line per record, key=value (Kubernetes-style structured logs)."""

    def format(self, record: logging.LogRecord) -> str:
        return (
            f"time={utc_timestamp(record)} level={record.levelname.lower()} logger={record.name} "
            f"msg={json.dumps(record.getMessage())}"
        )


def setup_logging(
    level: str | int, formatter: logging.Formatter, *, log_file: str | None = None
) -> None:
    """Send every ``fluxnode.*`` record at ``level`` or above to stderr through ``formatter``,
    and with ``log_file`` every record at any level to that file too (replacing any handler
    set before: a daemon sets its logging once, at start)."""
    level = level.upper() if isinstance(level, str) else level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.setLevel(level)
    handlers: list[logging.Handler] = [handler]
    if log_file:
        file_handler = logging.FileHandler(log_file)
        file_handler.setFormatter(formatter)
        handlers.append(file_handler)
    root = logging.getLogger(ROOT_LOGGER)
    root.handlers[:] = handlers
    root.setLevel(logging.DEBUG if log_file else level)
    root.propagate = False
