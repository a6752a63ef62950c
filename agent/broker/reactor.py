"""A single-threaded event loop: one poll(2) over file descriptors plus a timer heap.

Everything in a broker runs on this one thread, so handlers never need locks.

ZeroMQ sockets are watched through their ZMQ_FD, as Flux's reactor watches them, not with
`zmq_poll`. libzmq's `zmq_poll` polls every descriptor once without waiting, asks each
ZeroMQ socket for ZMQ_EVENTS, polls again to wait, and asks each socket again: with four
ZeroMQ sockets (ROUTER, DEALER, ZAP handler, monitor) a forwarding broker made about 30
poll(2) and 34 getpid(2) calls per ping it forwarded (strace -c on rank 7 of 16, 300
pings), as every ZMQ_EVENTS query looks at the socket's mailbox with a poll(2) of its own.
Here a single poll(2) waits on the ZMQ_FDs and the plain descriptors, and ZMQ_EVENTS is
asked only of the sockets that can have changed: those a handler or timer used since the
last look (zframes records every socket it sends on or
receives from; `add` and `touch` record the others). ZMQ_FD is edge-triggered: it says
that the socket's state may have changed, and a send or receive can consume that signal
while leaving a message readable, which is why a socket that was used is asked before the
loop sleeps again; except a socket whose handler read it dry (zframes' `drained`: its
last call was a ZMQ_EVENTS query that found nothing, as fresh as the loop's own would be,
and a message arriving after it signals ZMQ_FD anew), which saves one poll(2) and one
getpid(2) per message received. The record is one per process, as the broker has one
reactor (it asks only its own sockets, then forgets the record). A timer's wait is rounded
up to the next millisecond, so a loop waiting for a timer due in 0.3 ms sleeps once
instead of polling with 0 until it is due.

A socket whose ZMQ_FD fired and whose handler waits only for input is handed POLLIN at
once, without a ZMQ_EVENTS query first (issue 32: a Cython call and an enum lookup less
before every message is read; the receive processes the socket's commands itself, with
the same system calls the query made). ZMQ_FD also fires for commands that bring no
message (a peer's pipe attached), so such a handler may find nothing to read: it reads
without blocking (zframes' `recv_frames(ready=True)` gives None then).

Handlers get ZeroMQ's event bits (zmq.POLLIN, POLLOUT, POLLERR) for sockets and
descriptors alike, as zmq_poll gave them: poll(2)'s POLLHUP, POLLERR and POLLNVAL on a
descriptor are reported as zmq.POLLERR.
"""

from __future__ import annotations

import heapq
import itertools
import math
import select
import time
from collections.abc import Callable
from typing import Any

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.zevents import events as _events
from fluxnode.agent.broker.zframes import drained, touched

_IN, _OUT = select.POLLIN, select.POLLOUT
_ZIN = zmq.POLLIN


def _to_poll(events: int) -> int:
    """ZeroMQ's event bits to poll(2)'s."""
    return (_IN if events & zmq.POLLIN else 0) | (_OUT if events & zmq.POLLOUT else 0)


def _from_poll(revents: int) -> int:
    """poll(2)'s returned bits to ZeroMQ's, as zmq_poll translates them."""
    out = zmq.POLLIN if revents & _IN else 0
    if revents & _OUT:
        out |= zmq.POLLOUT
    if revents & ~(_IN | _OUT):
        out |= zmq.POLLERR
    return out


class Timer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Reactor:
    def __init__(self, log: BrokerLog) -> None:
        self.log = log  # where a failed handler's traceback goes
        self._poller = select.poll()
        self._handlers: dict[Any, Callable[[int], None]] = {}
        self._zsockets: dict[Any, int] = {}  # ZeroMQ socket -> the events its handler wants
        self._zfds: dict[int, Any] = {}  # a ZeroMQ socket's ZMQ_FD -> the socket
        self._timers: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._running = False

    def add(self, sock: Any, events: int, handler: Callable[[int], None]) -> None:
        """Watch a zmq socket or file descriptor; `handler(revents)` runs when ready."""
        if isinstance(sock, zmq.Socket):
            if sock not in self._zsockets:
                fd = sock.get(zmq.FD)
                self._zfds[fd] = sock
                self._poller.register(fd, _IN)
            self._zsockets[sock] = events
            touched.add(sock)  # it may hold input already (bind and connect use its mailbox)
            self._handlers[sock] = handler
            return
        fd = _fd(sock)
        self._poller.register(fd, _to_poll(events))  # (registering again modifies)
        self._handlers[fd] = handler

    def modify(self, sock: Any, events: int) -> None:
        """Change what a watched socket or fd waits for (one no longer watched: nothing)."""
        if isinstance(sock, zmq.Socket):
            if sock in self._zsockets:
                self._zsockets[sock] = events
                touched.add(sock)
            return
        fd = _fd(sock)
        if fd in self._handlers:
            self._poller.modify(fd, _to_poll(events))

    def touch(self, sock: Any) -> None:
        """Say that `sock` was used outside zframes (its ZMQ_FD may have been consumed)."""
        touched.add(sock)
        drained.discard(sock)

    def remove(self, sock: Any) -> None:
        if isinstance(sock, zmq.Socket):
            if self._handlers.pop(sock, None) is not None:
                del self._zsockets[sock]
                fd = next(f for f, s in self._zfds.items() if s is sock)
                del self._zfds[fd]
                self._poller.unregister(fd)
            touched.discard(sock)
            return
        fd = _fd(sock)
        if self._handlers.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + delay, callback)
        heapq.heappush(self._timers, (timer.when, next(self._counter), timer))
        return timer

    def call_every(self, interval: float, callback: Callable[[], None]) -> Timer:
        """Repeat `callback` every `interval` seconds until the returned handle is cancelled."""
        handle = Timer(0.0, callback)

        def tick() -> None:
            if handle.cancelled:
                return
            callback()
            if not handle.cancelled:
                self.call_later(interval, tick)

        self.call_later(interval, tick)
        return handle

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run a handler; a bug in one must not take the daemon down with it."""
        try:
            fn(*args)
        except Exception:
            self.log.exception("reactor: handler %r failed", fn)

    def stop(self) -> None:
        self._running = False

    def _ready_sockets(self) -> list[tuple[Any, int]]:
        """The touched ZeroMQ sockets that have what their handler waits for, now."""
        ready = []
        ask, wanted = _events, self._zsockets
        for sock in list(touched):
            events = wanted.get(sock)
            if events is not None:
                revents = ask(sock) & events
                if revents:
                    ready.append((sock, revents))
        touched.clear()
        drained.clear()
        return ready

    def run(self) -> None:
        poll = self._poller.poll
        self._running = True
        while self._running:
            timeout: int | None = None  # no timer: wait for an event
            now = time.monotonic()
            while self._timers:
                when, _, timer = self._timers[0]
                if timer.cancelled:
                    heapq.heappop(self._timers)
                    continue
                if when <= now:
                    heapq.heappop(self._timers)
                    self._call(timer.callback)
                    if not self._running:
                        return
                    now = time.monotonic()
                    continue
                timeout = math.ceil((when - now) * 1000.0)  # in ms, rounded up
                break
            ready = self._ready_sockets() if touched else None
            if ready:
                if not self._dispatch(ready):
                    return
                continue
            fired = []
            for fd, revents in poll(timeout):
                sock = self._zfds.get(fd)
                if sock is not None:
                    if self._zsockets.get(sock) == _ZIN:
                        fired.append((sock, _ZIN))  # handed to its handler at once
                    else:
                        touched.add(sock)  # its state changed: asked at the top of the loop
                    continue
                handler = self._handlers.get(fd)
                if handler is not None:
                    try:  # (as `_call`)
                        handler(_from_poll(revents))
                    except Exception:
                        self.log.exception("reactor: handler %r failed", handler)
                if not self._running:
                    return
            if fired and not self._dispatch(fired):
                return

    def _dispatch(self, ready: list[tuple[Any, int]]) -> bool:
        """Run the handlers of ZeroMQ sockets found ready; False once the loop is stopped."""
        for sock, revents in ready:
            handler = self._handlers.get(sock)
            if handler is not None:
                touched.add(sock)  # ask again before sleeping: it may hold more
                drained.discard(sock)
                try:  # (as `_call`, without a frame of its own per message)
                    handler(revents)
                except Exception:
                    self.log.exception("reactor: handler %r failed", handler)
                if sock in drained and self._zsockets.get(sock) == _ZIN:
                    touched.discard(sock)  # unless the handler left it drained
            if not self._running:
                return False
        return True



def _fd(sock: Any) -> int:
    return int(sock if isinstance(sock, int) else sock.fileno())
