"""ZeroMQ socket options set below pyzmq's sugar layer (issue 32).

A broker sets about fifteen options on its TBON sockets once, at start: the [tbon]
timings, the CURVE keys, its routing id. Through the sugar (`sock.linger = 0`,
`sock.setsockopt(zmq.X, value)`) each went through `__setattr__`, a lookup of the option's
name as an enum and the type checks around it: the ten options of `TbonParams.tune` cost a
broker forked from `fluxnode start` about 0.2 ms of CPU and 54 page faults per socket,
against 40 µs and 15 faults for the Cython backend's `set` (the method the sugar ends in)
called with plain ints. The values are what the sugar would have passed: ints, and bytes
for the byte options (keys, identities, the ZAP domain).
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxnode.agent.broker import zmq_core as zmq

_set = zmq.Socket.set


def set_options(sock: zmq.Socket, options: Iterable[tuple[int, int | bytes]]) -> None:
    """Set each (option, value) on `sock`, in order; zmq.ZMQError as `setsockopt` raises it."""
    for option, value in options:
        _set(sock, int(option), value)
