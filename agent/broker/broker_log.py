"""The broker's logger: one Flux-style line per record, to stderr and to `log-filename`.

Every line carries the host and rank (``TIME host broker[rank]: LEVEL message``) because an
instance's logs are read side by side: many brokers on one machine under ``fluxnode start``,
or one per node collected by Kubernetes. Lines at `log-stderr-level` or above go to stderr;
with `log-filename`, every line goes to that file as well.

Why not the `logging` package: `fluxnode start` forks a thousand brokers and every node runs
one. Setting up `logging` (two handlers, their locks and at-fork hooks, a text file object)
cost each forked broker about 1 ms of CPU and 130 page faults, and each record builds a
`LogRecord` and walks the stack for a caller the line never shows (issue 32). This logger
has the methods and level numbers of a `logging.Logger` that the broker uses (`debug` ...
`critical`, `exception`, `log`, `exc_info=`), formats ``msg % args`` the same way, and
appends a traceback as `logging.Formatter` does. The leader's modules log through
`logging.getLogger("fluxnode.module.NAME")`: `bridge_stdlib` sends the ``fluxnode`` logger
tree to the same lines, and is called only where a module is loaded.
"""

from __future__ import annotations

import os
import sys
import time
from functools import partialmethod
from typing import Any

DEBUG, INFO, WARNING, ERROR, CRITICAL = 10, 20, 30, 40, 50
LEVEL_NAMES = {DEBUG: "DEBUG", INFO: "INFO", WARNING: "WARNING", ERROR: "ERROR",
               CRITICAL: "CRITICAL"}
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"  # local time, as the broker's lines have always had
STDLIB_ROOT = "fluxnode"  # the logger tree bridge_stdlib sends here


class BrokerLog:
    """Writes ``TIME {prefix}LEVEL message`` lines; `prefix` is ``"host broker[rank]: "``."""

    def __init__(self, prefix: str, stderr_level: int, log_file: str | None = None) -> None:
        self.prefix = prefix
        self.stderr_level = stderr_level
        self.file_fd: int | None = None
        if log_file:
            # opened now, as logging.FileHandler did: a bad path fails the start (OSError)
            self.file_fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                                   0o666)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 -- logging.Logger's name
        return self.file_fd is not None or level >= self.stderr_level

    def log(self, level: int, msg: object, *args: object, exc_info: Any = False) -> None:
        if self.file_fd is None and level < self.stderr_level:
            return
        self.write(level, _message(msg, args), _exception_text(exc_info))

    def write(self, level: int, text: str, exc_text: str = "") -> None:
        """One line (with its traceback, if any) to the sinks its level goes to."""
        if exc_text:
            text = f"{text}\n{exc_text}"
        name = LEVEL_NAMES.get(level) or f"Level {level}"
        line = f"{time.strftime(DATE_FORMAT)} {self.prefix}{name} {text}\n"
        if level >= self.stderr_level:
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):  # stderr closed: the file still gets the line
                pass
        if self.file_fd is not None:
            try:
                os.write(self.file_fd, line.encode(errors="backslashreplace"))
            except OSError:
                pass

    # logging.Logger's level methods: `log` at a fixed level (`exception` with the traceback)
    debug = partialmethod(log, DEBUG)
    info = partialmethod(log, INFO)
    warning = partialmethod(log, WARNING)
    error = partialmethod(log, ERROR)
    exception = partialmethod(log, ERROR, exc_info=True)
    critical = partialmethod(log, CRITICAL)

    def close(self) -> None:
        if self.file_fd is not None:
            os.close(self.file_fd)
            self.file_fd = None

    def bridge_stdlib(self) -> None:
        """Send what the `logging` loggers under ``fluxnode`` record (a leader's modules)
        to these same lines, in place of any handler set before (as the broker's logging
        set-up always did: the fork launcher's own handlers are not a broker's)."""
        import logging

        broker_log = self

        class _ToBrokerLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    text = record.getMessage()
                except Exception:  # a bad format is logged as it came, not raised
                    text = f"{record.msg!r} {record.args!r}"
                exc = _exception_text(record.exc_info) if record.exc_info else ""
                broker_log.write(record.levelno, text, exc)

        root = logging.getLogger(STDLIB_ROOT)
        root.handlers[:] = [_ToBrokerLog()]
        root.setLevel(DEBUG if self.file_fd is not None else self.stderr_level)
        root.propagate = False


def _message(msg: object, args: Any) -> str:
    """``msg % args`` as logging's `LogRecord.getMessage` makes it; a format that does not
    fit its arguments is logged as given rather than raised into the broker."""
    text = str(msg)
    if len(args) == 1 and isinstance(args[0], dict) and args[0]:
        args = args[0]  # "%(name)s" with a mapping, as LogRecord takes it
    if args:
        try:
            text = text % args
        except (TypeError, ValueError, KeyError):
            text = f"{text} {args!r}"
    return text


def _exception_text(exc_info: Any) -> str:
    """The traceback `logging.Formatter.formatException` appends: `exc_info` is True (the
    exception being handled), an exception, or a (type, value, traceback) triple."""
    if not exc_info:
        return ""
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif not isinstance(exc_info, tuple):
        exc_info = sys.exc_info()
    if exc_info[0] is None:
        return ""
    import traceback  # only when there is a traceback to write

    text = "".join(traceback.format_exception(*exc_info))
    return text[:-1] if text.endswith("\n") else text
