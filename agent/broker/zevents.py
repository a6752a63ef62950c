"""A ZeroMQ socket's ZMQ_EVENTS, the question the reactor asks most (issue 32, ping).

The reactor watches each ZeroMQ socket through its edge-triggered ZMQ_FD, so it asks
ZMQ_EVENTS of a socket whose descriptor fired or that a handler used before it sleeps
(reactor.py, zframes.py): about 15 times per ping at depth 4. Through pyzmq's
`Socket.get` one question costs about 8,900 instructions (a deep closed check and the
option's type looked up among enums) for a call libzmq answers in a few hundred, 11% of
all a ping costs the brokers and the client. `_zevents.c` asks libzmq itself: it finds
`zmq_getsockopt` in the libzmq pyzmq already loaded and reads the socket's handle from
pyzmq's own `underlying` attribute, after pyzmq's own `closed`.

`events(sock)` gives the bits as pyzmq's `get(zmq.EVENTS)` does; where it cannot tell (a
closed socket, an error) it asks pyzmq's `get` itself, which answers or raises as before,
so callers need no case of their own. Where the
extension was not built (no C compiler), where libzmq is not a shared object of its own,
or with FLUXNODE_PURE_PYTHON=1 (as for the scheduler's compiled loops,
scheduler/compiled.py), `events` is pyzmq's `get` itself. tests/agent/broker/
test_zevents.py holds both to the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fluxnode.agent.broker import zmq_core as zmq

_get = zmq.Socket.get
_EVENTS = zmq.EVENTS


def _asked_of_pyzmq(sock: Any) -> int:
    return _get(sock, _EVENTS)


def _choose() -> tuple[Callable[[Any], int], bool]:
    """(events, whether it is libzmq's own)."""
    if os.environ.get("FLUXNODE_PURE_PYTHON", "") not in ("", "0"):
        return _asked_of_pyzmq, False
    try:
        from fluxnode.agent.broker import _zevents  # type: ignore[attr-defined]
    except ImportError:  # built without a compiler (an optional extension)
        return _asked_of_pyzmq, False
    if not _zevents.bind():
        return _asked_of_pyzmq, False
    return _zevents.events, True


events, DIRECT = _choose()
