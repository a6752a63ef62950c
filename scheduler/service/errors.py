"""Why the service refuses a request, as the live graph reports it.

Three answers, because a caller acts differently on each: a malformed request is
fixed by its sender (EINVAL), a busy one is asked again later (EBUSY), an
unsatisfiable one never fits the machine as it is (ENODEV).
"""

from __future__ import annotations

import errno


class InvalidRequest(ValueError):
    """The jobspec (or a replayed record) is malformed; the message says where. `errnum` is
    EINVAL, or E2BIG for one past the reader's size limits."""

    def __init__(self, message: str, errnum: int = errno.EINVAL) -> None:
        super().__init__(message)
        self.errnum = errnum


class Busy(Exception):
    """The request fits the machine but not right now."""


class Unsatisfiable(Exception):
    """The request can never fit the machine as it is; the message says why."""
