"""Who may connect to a broker's TBON ROUTER: holders of the instance certificate only (RFC 27 ZAP).

CURVE proves that a peer holds the secret key of the public key it presents, not that
it is one of us. All brokers share one keypair (flux-config-bootstrap(5)), so the ZAP
handler, served on this broker's event loop at the inproc endpoint libzmq asks,
accepts exactly the instance public key and refuses anything else. A peer encrypting
to the wrong server key never gets as far as ZAP: a monitor on the ROUTER logs those
failed handshakes too. `refused` counts both kinds. The same monitor (a socket has only
one) passes the other events it was asked for to a listener: the admission guard's
accepted and disconnected connections (overlay_guard.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.zframes import recv_frames, send_frames
from fluxnode.agent.broker.zmq_core import z85

ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class InstanceKeyAuthenticator:
    def __init__(
        self, reactor: Reactor, ctx: zmq.Context, log: BrokerLog, public_key: bytes
    ) -> None:
        self.reactor = reactor
        self.ctx = ctx
        self.log = log
        self.refused = 0
        self._raw_key = z85.decode(public_key)
        self.zap: zmq.Socket | None = None
        self.monitor: zmq.Socket | None = None
        self._listener: Callable[[list[bytes]], None] | None = None

    def open(self) -> None:
        """Serve ZAP requests (before the ROUTER binds, so no handshake goes unchecked)."""
        self.zap = zmq.Socket(self.ctx, zmq.REP)
        self.zap.set(zmq.LINGER, 0)
        self.zap.bind(ZAP_ENDPOINT)
        self.reactor.add(self.zap, zmq.POLLIN, self._zap_ready)

    def watch(
        self,
        router: zmq.Socket,
        events: int = 0,
        listener: Callable[[list[bytes]], None] | None = None,
    ) -> None:
        """Log the failed handshakes of `router` that never reach ZAP; hand the raw monitor
        messages of `events` to `listener`."""
        self._listener = listener
        self.monitor = zmq.monitor_socket(
            router, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH | events
        )
        self.reactor.add(self.monitor, zmq.POLLIN, self._monitor_ready)

    def unwatch(self, router: zmq.Socket | None) -> None:
        if self.monitor is not None and router is not None:
            self.reactor.remove(self.monitor)
            router.monitor(None, 0)
            self.monitor.close(0)
        self.monitor = None

    def close(self) -> None:
        if self.zap is not None:
            self.reactor.remove(self.zap)
            self.zap.close()
        self.zap = None

    def _zap_ready(self, _revents: int) -> None:
        assert self.zap is not None
        while True:
            frames = recv_frames(self.zap)
            if frames is None:
                return
            version, request_id, _domain, address, _identity, mechanism = frames[:6]
            ok = mechanism == b"CURVE" and len(frames) >= 7 and frames[6] == self._raw_key
            if ok:
                send_frames(self.zap, [version, request_id, b"200", b"OK", b"instance", b""])
            else:
                self.refused += 1
                self.log.warning(
                    "overlay: refused %s connection from %s: public key is not the instance "
                    "certificate",
                    mechanism.decode(errors="replace"),
                    address.decode(errors="replace"),
                )
                send_frames(self.zap,
                            [version, request_id, b"400", b"unknown public key", b"", b""])

    def _monitor_ready(self, _revents: int) -> None:
        assert self.monitor is not None
        while True:
            frames = recv_frames(self.monitor)
            if frames is None:
                return
            if len(frames) < 2 or len(frames[0]) < 6:
                continue
            event = struct.unpack("=h", frames[0][:2])[0]
            if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:  # ZAP refusals are logged above
                self.refused += 1
                self.log.warning(
                    "overlay: refused connection on %s: CURVE handshake failed (peer does not "
                    "have the instance certificate)",
                    frames[1].decode(errors="replace"),
                )
            elif event != zmq.EVENT_HANDSHAKE_FAILED_AUTH and self._listener is not None:
                self._listener(frames)
