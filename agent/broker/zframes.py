"""Whole multipart messages in and out of a ZeroMQ socket, below pyzmq's sugar layer.

Every message a broker forwards crosses `recv_multipart` and `send_multipart` once each,
and the sugar around them cost more than the routing itself (issue 32, ping parity with
Flux): each frame's flags were combined as enum Flags, each send went through keyword
arguments and checks for DRAFT routing ids, and draining a socket ended in a `zmq.Again`
exception, whose construction looks up its errno as an enum. Here the Cython backend's
`recv`, `send` and `get` (the methods the sugar itself ends in) are called with plain
ints, an empty socket is asked once (`ZMQ_EVENTS`) instead of raising, and whether more
parts follow is read from each received zmq.Frame. Frames come back as bytes. Asking costs
about as much as receiving a message (1.4 µs: the backend looks the option up as an
enum), so the first read after the reactor found the socket readable does not ask.
"""

from __future__ import annotations

from collections.abc import Sequence

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.zevents import events as _events

_NOBLOCK = zmq.NOBLOCK
_MORE = zmq.NOBLOCK | zmq.SNDMORE
_POLLIN = zmq.POLLIN
_recv = zmq.Socket.recv

# Every socket a message was sent on or received from since the reactor last asked: its
# ZMQ_FD (edge-triggered) may have been consumed by the call, so the reactor asks
# ZMQ_EVENTS of these before it sleeps (reactor.py).
touched: set[zmq.Socket] = set()
# Sockets whose last call was a ZMQ_EVENTS query that found nothing to read (a drained
# socket): that answer is as fresh as the reactor's would be, so the reactor does not ask
# again after the handler that drained it (one poll(2) and one getpid(2) less per message
# received). Any later call on the socket through this module, or `Reactor.touch`, takes
# it off.
drained: set[zmq.Socket] = set()
_send = zmq.Socket.send


def recv_frames(sock: zmq.Socket, ready: bool = False) -> list[bytes] | None:
    """The next whole message waiting on `sock`, or None if there is none. `ready`: the
    reactor has just found a message waiting (ZMQ_EVENTS), so the socket is not asked
    again; if it was wrong after all, the receive's EAGAIN gives None."""
    touched.add(sock)
    if ready:
        try:
            frame = _recv(sock, _NOBLOCK, False)
        except zmq.Again:
            return None
    elif not _events(sock) & _POLLIN:
        drained.add(sock)
        return None
    else:
        frame = _recv(sock, _NOBLOCK, False)
    frames = [frame.bytes]
    while frame.more:  # (not `get(RCVMORE)`: the backend looks every option up as an enum)
        frame = _recv(sock, _NOBLOCK, False)
        frames.append(frame.bytes)
    return frames


def recv_parts(sock: zmq.Socket) -> list[zmq.Frame] | None:
    """As recv_frames, but the zmq.Frame objects themselves (to read a frame's SRCFD)."""
    touched.add(sock)
    drained.discard(sock)
    if not _events(sock) & _POLLIN:
        return None
    frame = _recv(sock, _NOBLOCK, False)
    parts = [frame]
    while frame.more:
        frame = _recv(sock, _NOBLOCK, False)
        parts.append(frame)
    return parts


def send_frames(sock: zmq.Socket, frames: Sequence[bytes]) -> None:
    """Queue a whole message without blocking; zmq.ZMQError (e.g. EAGAIN at the high water
    mark, EHOSTUNREACH for a router's unknown peer) as `send_multipart` raises it."""
    touched.add(sock)
    drained.discard(sock)
    last = len(frames) - 1
    for i in range(last):
        _send(sock, frames[i], _MORE)
    _send(sock, frames[last], _NOBLOCK)
