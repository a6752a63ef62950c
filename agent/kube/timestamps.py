"""Kubernetes' two wire formats of a time, in one place.

The API has ``Time`` (RFC 3339 in UTC to the second: a condition's
``lastTransitionTime``, a core Event's ``firstTimestamp``) and ``MicroTime`` (the same
with six digits of microseconds: an ``events.k8s.io`` Event's ``eventTime``, a Lease's
``acquireTime`` and ``renewTime``). A real API server rejects a MicroTime field written
without them, and the emulator does too.

:func:`stamps` gives both from one clock read, so an Event's ``eventTime`` and its
``firstTimestamp`` never disagree on the second. The second's text is formatted once
per second and kept: the binder writes thousands of Events a second in a burst.
"""

from __future__ import annotations

import time

__all__ = ["micro_time_now", "stamps", "time_now"]

# (second since the epoch, its text): replaced as a whole, so a reader on another
# thread sees either the old pair or the new one, never a mix
_second: tuple[int, str] = (-1, "")


def stamps(now: float | None = None) -> tuple[str, str]:
    """``now`` (default: the clock) as a Time and as a MicroTime."""
    global _second
    if now is None:
        now = time.time()
    second = int(now)
    cached = _second  # one read: another thread may replace it meanwhile
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _second = cached
    text = cached[1]
    micros = min(int((now - second) * 1_000_000), 999_999)
    return f"{text}Z", f"{text}.{micros:06d}Z"


def time_now() -> str:
    """Now as a Time: RFC 3339 in UTC to the second."""
    return stamps()[0]


def micro_time_now() -> str:
    """Now as a MicroTime: RFC 3339 in UTC with microseconds."""
    return stamps()[1]
