"""Leaving the overlay: one broker alone, or the whole instance from the leader (flux-core's
shutdown.c).

* SIGTERM/SIGINT make this broker leave: goodbye to its parent, and its children keep
  reconnecting until it is back (its pod was deleted, it will be restarted).
* ``broker.shutdown`` on rank 0 stops the instance the way Flux does: each broker
  tells its children to shut down, waits until they have said goodbye (or
  `SHUTDOWN_GRACE` seconds), then says goodbye to its own parent, so the tree
  empties from the leaves up.

Signals arrive through a socketpair given to `signal.set_wakeup_fd`, so they are
handled on the event loop like any other input, never inside a Python signal handler.
The calls are `_signal`'s, the C module under `signal`, whose Python layer turns each
number given and returned into an enum member: a forked broker ran `signal.py`'s
wrappers and `enum`'s lookups for nothing, and copied their pages (issue 32).
"""

from __future__ import annotations

import _signal
import _socket

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import Message
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.agent.broker.reactor import Reactor, Timer
from fluxnode.agent.broker.services import ServiceRegistry

SHUTDOWN_GRACE = 5.0


class Shutdown:
    def __init__(self, reactor: Reactor, overlay: Overlay, log: BrokerLog) -> None:
        self.reactor = reactor
        self.overlay = overlay
        self.log = log
        self.in_progress = False
        self._timer: Timer | None = None
        self._sigsocks: tuple[_socket.socket, _socket.socket] | None = None

    def register(self, services: ServiceRegistry) -> None:
        """On the leader: ``broker.shutdown`` stops the instance."""
        services.register("broker.shutdown", self._request)

    def install_signals(self) -> None:
        rfd, wfd = _socket.socketpair()  # `_socket`: see connector.py
        rfd.setblocking(False)
        wfd.setblocking(False)
        self._sigsocks = (rfd, wfd)
        _signal.set_wakeup_fd(wfd.fileno(), warn_on_full_buffer=False)
        for sig in (_signal.SIGTERM, _signal.SIGINT):
            _signal.signal(sig, lambda *_: None)

        def on_signal(_revents: int) -> None:
            try:
                data = rfd.recv(64)
            except BlockingIOError:
                return
            for b in data:
                if b in (_signal.SIGTERM, _signal.SIGINT):
                    self.log.info("broker: received signal %d, leaving the overlay", b)
                    self.leave()

        self.reactor.add(rfd, zmq.POLLIN, on_signal)

    def leave(self) -> None:
        """Stop this broker only (e.g. its pod is deleted): goodbye to the parent, children
        keep reconnecting until it is back. `broker.shutdown` on rank 0 stops the instance."""
        self._finish()

    def begin(self) -> None:
        """Shut down the subtree below first, then say goodbye to the parent (as Flux does)."""
        if self.in_progress:
            return
        self.in_progress = True
        self.overlay.broadcast_children(Message("control", "shutdown", payload={}))
        self._timer = self.reactor.call_later(SHUTDOWN_GRACE, self._finish)
        self.check()

    def check(self) -> None:
        """After any overlay change: finish once the last child has said goodbye."""
        if self.in_progress and not self.overlay.connected_children():
            self._finish()

    def _request(self, msg: Message) -> dict:
        self.reactor.call_later(0, self.begin)
        return {}

    def _finish(self) -> None:
        if self._timer:
            self._timer.cancel()
        if self.overlay.dealer is not None:
            self.overlay.goodbye()
            self.overlay.dealer.set(zmq.LINGER, 1000)
        self.reactor.stop()
