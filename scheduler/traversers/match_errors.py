"""How a match fails: the exceptions the traverser raises, and what each tells the caller.

Design: a caller (resource-query, the scheduler service) must tell apart a request
that does not fit now (``NoMatch`` with ``busy``: retry later or reserve), one that
never fits this graph (``Unsatisfiable``), a failure Fluxion reports with another
errno (``TraverserErrno``, resource-query only) and bad input (``TraverserError``).
They live apart from ``dfu.Traverser`` so that its walks (``dfu_cancel``...) can raise
them without importing it; ``dfu`` exports them.
"""

from __future__ import annotations

import errno as _errno


class NoMatch(Exception):
    """No resources now (``busy``) or never for this request on this graph."""

    def __init__(self, busy: bool, reason: str = "") -> None:
        super().__init__(reason or ("resources busy" if busy else "no match"))
        self.busy = busy
        self.reason = reason


class Unsatisfiable(NoMatch):
    def __init__(self, reason: str = "unsatisfiable request") -> None:
        super().__init__(False, reason)


class TraverserErrno(NoMatch):
    """A failed match whose errno is neither EBUSY (busy) nor ENODEV (unsatisfiable).

    Fluxion's traverser reports some failures without setting errno (an update that
    selects nothing exclusively); the caller then sees whatever errno an earlier step
    left. Raised only when ``Traverser.report_errno`` is set (resource-query): Fluxion's
    resource-query consumes no jobid for it, and ENOENT reads as unsatisfiable."""

    def __init__(self, err: int) -> None:
        super().__init__(False, f"traverser: {_errno.errorcode.get(err, err)}")
        self.errno = err


class TraverserError(ValueError):
    """Bad input to the traverser (unknown job, path, status...)."""


# what the shell reports for a program that abort()s: 128 + SIGABRT
ABORT_EXIT = 134


def terminate_message(cxx_type: str, what: str) -> str:
    """What libstdc++'s terminate handler writes for an uncaught exception, before
    abort()."""
    return f"terminate called after throwing an instance of '{cxx_type}'\n  what():  {what}\n"


class FluxionAbort(Exception):
    """A request on which Fluxion's resource-query itself aborts: an exception of its C++
    that nothing catches. Raised only under ``Traverser.report_errno`` (resource-query),
    which then ends as Fluxion's does: ``stderr`` (libstdc++'s terminate message) and
    exit status ``ABORT_EXIT``. The scheduler service never sees one."""

    def __init__(self, cxx_type: str, what: str) -> None:
        super().__init__(what)
        self.stderr = terminate_message(cxx_type, what)
