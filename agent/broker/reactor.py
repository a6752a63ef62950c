"""A single-threaded event loop: one zmq.Poller over sockets/fds plus a timer heap.

Everything in a broker runs on this one thread, so handlers never need locks.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

import zmq
from fluxnode.agent.broker.broker_log import BrokerLog


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
        self.poller = zmq.Poller()
        self._handlers: dict[Any, Callable[[int], None]] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._running = False

    def add(self, sock: Any, events: int, handler: Callable[[int], None]) -> None:
        """Watch a zmq socket or file descriptor; `handler(revents)` runs when ready."""
        key = (
            sock
            if isinstance(sock, zmq.Socket)
            else int(sock if isinstance(sock, int) else sock.fileno())
        )
        self._handlers[key] = handler
        self.poller.register(key, events)

    def modify(self, sock: Any, events: int) -> None:
        key = (
            sock
            if isinstance(sock, zmq.Socket)
            else int(sock if isinstance(sock, int) else sock.fileno())
        )
        self.poller.modify(key, events)

    def remove(self, sock: Any) -> None:
        key = (
            sock
            if isinstance(sock, zmq.Socket)
            else int(sock if isinstance(sock, int) else sock.fileno())
        )
        if self._handlers.pop(key, None) is not None:
            self.poller.unregister(key)

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
        self._running = True
        while self._running:
            timeout = None
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
                timeout = max(0.0, (when - now) * 1000.0)
                break
            for key, revents in self.poller.poll(timeout):
                handler = self._handlers.get(key)
                if handler is not None:
                    self._call(handler, revents)
                if not self._running:
                    return
