"""A single-threaded event loop: one zmq_poll over sockets/fds plus a timer heap.

Everything in a broker runs on this one thread, so handlers never need locks. The poll
list is kept as the (socket or fd, events) pairs libzmq's `zmq_poll` takes, and handed to
the backend's `zmq_poll` as it is (no pyzmq Poller: its `poll` rebuilt its arguments and a
dict of results on every wakeup). A timer's wait is rounded up to the next millisecond,
so a loop waiting for a timer due in 0.3 ms sleeps once instead of polling with 0 until
it is due.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog


def _key(sock: Any) -> Any:
    """What zmq_poll is given for `sock`: a zmq socket itself, else its file descriptor."""
    if isinstance(sock, zmq.Socket):
        return sock
    return int(sock if isinstance(sock, int) else sock.fileno())


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
        self._items: list[tuple[Any, int]] = []  # zmq_poll's list, in registration order
        self._handlers: dict[Any, Callable[[int], None]] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._running = False

    def add(self, sock: Any, events: int, handler: Callable[[int], None]) -> None:
        """Watch a zmq socket or file descriptor; `handler(revents)` runs when ready."""
        key = _key(sock)
        if key in self._handlers:
            self._set_events(key, events)
        else:
            self._items.append((key, events))
        self._handlers[key] = handler

    def modify(self, sock: Any, events: int) -> None:
        """Change what a watched socket or fd waits for (one no longer watched: nothing)."""
        key = _key(sock)
        if key in self._handlers:
            self._set_events(key, events)

    def _set_events(self, key: Any, events: int) -> None:
        self._items = [(k, events if k == key else e) for k, e in self._items]

    def remove(self, sock: Any) -> None:
        key = _key(sock)
        if self._handlers.pop(key, None) is not None:
            self._items = [(k, e) for k, e in self._items if k != key]

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

    def run(self) -> None:
        poll = zmq.zmq_poll
        self._running = True
        while self._running:
            timeout = -1  # no timer: wait for an event
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
            for key, revents in poll(self._items, timeout):
                handler = self._handlers.get(key)
                if handler is not None:
                    self._call(handler, revents)
                if not self._running:
                    return
