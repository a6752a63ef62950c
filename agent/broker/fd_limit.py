"""The broker's file-descriptor limit.

Every client, child broker and TBON peer costs the broker descriptors, and the soft
limit a process inherits (often 1024) is far below what the kernel allows it (the hard
limit). Like most servers, a broker raises its soft limit to the hard one at start, so
running out takes a real flood; what happens then is the connector's and overlay's
concern (they back off instead of spinning).
"""

from __future__ import annotations

import resource


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (soft, hard) afterwards.
    Never fails: a limit that cannot be raised is left as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard
