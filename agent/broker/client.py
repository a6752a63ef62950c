"""Client side of the broker: RPCs over the local connector or over CURVE TCP.

``local://PATH`` talks to the owner-only Unix socket of a broker. ``tcp://HOST:PORT``
connects a ZeroMQ DEALER to a broker's TBON ROUTER with the instance CURVE
certificate (as a non-broker peer, e.g. the binder talking to the leader).
Requests may be pipelined: `send` many, then `recv` the responses by matchtag.
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import socket
import time
import uuid
from collections import deque
from pathlib import Path

from fluxnode.agent.broker.message import (
    NODEID_ANY,
    Message,
    MessageError,
    StreamDecoder,
    encode_stream,
)

DEFAULT_URI_ENV = "FLUXNODE_URI"
RECV_CHUNK = 1 << 20  # bytes read from the local socket at once


class ConnectError(Exception):
    """Nothing usable listens at the URI.

    `uri` is the URI tried (None: none was given), `reason` what went wrong and `errnum` the
    OS error of the attempt if there was one (ENOENT: no socket at the path, ECONNREFUSED:
    nothing listens): a caller with options of its own re-words the error from them.
    """

    def __init__(self, uri: str | None, reason: str, errnum: int | None = None) -> None:
        self.uri = uri
        self.reason = reason
        self.errnum = errnum
        super().__init__(f"fluxnode: cannot connect to {uri}: {reason}" if uri
                         else f"fluxnode: {reason}")


class CurveCertError(ConnectError):
    """A tcp:// URI without a usable CURVE certificate: none given (`path` None), or the one
    at `path` cannot be read or is not a certificate."""

    def __init__(self, uri: str, path: str | None, reason: str) -> None:
        self.path = path
        super().__init__(uri, reason)


def _os_error(uri: str, exc: OSError) -> ConnectError:
    errnum = errno.ETIMEDOUT if isinstance(exc, TimeoutError) else exc.errno
    return ConnectError(uri, exc.strerror or str(exc), errnum)


class RPCError(Exception):
    """An error response (errnum, errstr) or a transport failure during an RPC."""

    def __init__(self, errnum: int, errstr: str | None = None) -> None:
        self.errnum = errnum
        self.errstr = errstr or os.strerror(errnum)
        super().__init__(self.errstr)


class CurveHandshakeError(RPCError):
    """The broker at `uri` refused the CURVE handshake: the certificate is not the instance's."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(errno.EPERM, f"{uri} refused the CURVE handshake (not this instance's "
                         "certificate?)")


class _LocalTransport:
    def __init__(self, uri: str, path: str, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError as exc:
            self.sock.close()
            raise _os_error(uri, exc) from None
        self.sock.setblocking(False)
        self.decoder = StreamDecoder()
        # Answers are read into this one buffer: `recv(1 << 20)` allocated a fresh MiB per
        # read, which malloc maps and unmaps each time (mmap, mremap, munmap and a page
        # fault per answer, measured with strace on `fluxnode ping`, issue 32).
        self._chunk = bytearray(RECV_CHUNK)
        self._view = memoryview(self._chunk)

    def send(self, frames: list[bytes]) -> None:
        data = memoryview(encode_stream(frames))
        while data:
            try:
                n = self.sock.send(data)
                data = data[n:]
            except (BlockingIOError, InterruptedError):
                # The broker is busy; drain what it already sent so neither side blocks.
                select.select([], [self.sock], [], 1.0)
            except OSError as exc:
                raise RPCError(errno.ECONNRESET, f"connection to broker lost: {exc}") from None

    def recv(self, timeout: float | None) -> list[bytes] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            frames = self.decoder.next()
            if frames is not None:
                return frames
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], remaining)
            if not ready:
                return None
            try:
                n = self.sock.recv_into(self._chunk)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                raise RPCError(errno.ECONNRESET, f"connection to broker lost: {exc}") from None
            if not n:
                raise RPCError(errno.ECONNRESET, "broker closed the connection")
            self.decoder.feed(self._view[:n])

    def close(self) -> None:
        self.sock.close()


class _TcpTransport:
    def __init__(self, uri: str, curve_cert: str | os.PathLike | None) -> None:
        # Lazy: only tcp:// needs ZeroMQ and CURVE (~60 ms of imports); local:// CLI commands skip
        # them.
        import zmq
        from fluxnode.broker_conf import certificate

        if curve_cert is None:
            raise CurveCertError(uri, None, "a CURVE certificate is required (curve_cert=PATH)")
        _probe(uri)
        try:
            cert = certificate.load(Path(curve_cert), require_secret=True)
        except Exception as exc:
            raise CurveCertError(uri, os.fspath(curve_cert), str(exc)) from None
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.routing_id = b"t" + uuid.uuid4().hex[:12].encode()
        self.sock.curve_serverkey = cert.public_key
        self.sock.curve_publickey = cert.public_key
        self.sock.curve_secretkey = cert.secret_key
        self.uri = uri
        # ZeroMQ reconnects by itself and never says a request was lost with its
        # connection: the monitor does, so a caller waiting for an answer from a broker that
        # died gives up at once instead of at its timeout.
        self.monitor = self.sock.get_monitor_socket(
            zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.sock.connect(uri)

    def _drain_events(self) -> int:
        """The monitor's events since the last call, ORed (0: none)."""
        import zmq
        from zmq.utils.monitor import parse_monitor_message

        seen = 0
        while self.monitor.poll(0):
            seen |= parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))["event"]
        return seen

    def send(self, frames: list[bytes]) -> None:
        self._drain_events()  # a drop before this request lost nothing of it
        self.sock.send_multipart(frames)

    def recv(self, timeout: float | None) -> list[bytes] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ready = dict(self.poller.poll(left))
            if self.sock in ready:
                return self.sock.recv_multipart()
            if self.monitor in ready:
                import zmq

                events = self._drain_events()
                if events & (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                             | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
                    raise CurveHandshakeError(self.uri)
                if events & zmq.EVENT_DISCONNECTED:
                    raise RPCError(errno.ECONNRESET, f"connection to {self.uri} lost while "
                                   "waiting for an answer (the request may be lost)")
                continue
            return None

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)
        self.ctx.term()


def _probe(uri: str) -> None:
    """ZeroMQ connects lazily and retries forever; check once that something listens."""
    host, _, port = uri[len("tcp://"):].rpartition(":")
    if not host or not port.isdigit():
        raise ConnectError(uri, "expected tcp://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as exc:
        raise _os_error(uri, exc) from None


class Client:
    """A connection to one broker. Not thread-safe; one per thread."""

    def __init__(
        self, transport: _LocalTransport | _TcpTransport, uri: str, timeout: float
    ) -> None:
        self._t = transport
        self.uri = uri
        self.timeout = timeout
        self._tags = itertools.count(1)
        self._pending: dict[int, deque[Message]] = {}  # a stream may bring several per tag
        self.events: deque[Message] = deque()

    @classmethod
    def connect(cls, uri: str | None = None, *, timeout: float = 10.0,
                curve_cert: str | os.PathLike | None = None) -> Client:
        uri = uri or os.environ.get(DEFAULT_URI_ENV)
        if not uri:
            raise ConnectError(None, f"no broker URI given and ${DEFAULT_URI_ENV} is not set "
                               "(run inside `fluxnode start` or pass --uri)")
        if uri.startswith("local://"):
            return cls(_LocalTransport(uri, uri[len("local://"):], timeout), uri, timeout)
        if uri.startswith("tcp://"):
            return cls(_TcpTransport(uri, curve_cert), uri, timeout)
        if uri.startswith("ssh://"):
            raise ConnectError(uri, f"use `fluxnode proxy {uri}` for ssh:// URIs")
        raise ConnectError(uri, "unknown URI scheme (expected local:// or tcp://)")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._t.close()

    def send(self, topic: str, payload: dict | None = None, nodeid: int = 0) -> int:
        """Send a request without waiting; returns its matchtag for `recv`."""
        tag = next(self._tags)
        self._t.send(Message("request", topic, nodeid, tag, payload).to_frames())
        return tag

    def recv(self, matchtag: int, timeout: float | None = None) -> Message:
        """Wait for the response to `matchtag` (responses to other tags are kept for later); a
        streaming request's responses come one per call, in order."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while matchtag not in self._pending:
            remaining = deadline - time.monotonic()
            frames = self._t.recv(max(0.0, remaining))
            if frames is None:
                raise RPCError(errno.ETIMEDOUT, f"no response from {self.uri} within {timeout:g}s")
            self._accept(frames)
        queue = self._pending[matchtag]
        msg = queue.popleft()
        if not queue:
            del self._pending[matchtag]
        return msg

    def _accept(self, frames: list[bytes]) -> None:
        try:
            msg = Message.from_frames(frames)
        except MessageError as exc:
            raise RPCError(exc.errnum, f"malformed message from broker: {exc.errstr}") from None
        if msg.type == "event":
            self.events.append(msg)
        elif msg.type == "response":
            if msg.matchtag == 0 and msg.errnum:
                raise RPCError(msg.errnum, msg.errstr)
            self._pending.setdefault(msg.matchtag, deque()).append(msg)

    def rpc(
        self, topic: str, payload: dict | None = None, nodeid: int = 0, timeout: float | None = None
    ) -> dict:
        msg = self.recv(self.send(topic, payload, nodeid), timeout)
        if msg.errnum:
            raise RPCError(msg.errnum, msg.errstr)
        try:
            return msg.decode_payload() or {}
        except MessageError as exc:
            raise RPCError(exc.errnum, exc.errstr) from None

    def subscribe(self, topic_prefix: str) -> None:
        """Receive events whose topic starts with `topic_prefix` (from the broker connected to)."""
        self.rpc("event.subscribe", {"topic": topic_prefix}, nodeid=NODEID_ANY)

    def recv_event(self, timeout: float | None = None) -> Message:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.events:
            frames = self._t.recv(max(0.0, deadline - time.monotonic()))
            if frames is None:
                raise RPCError(errno.ETIMEDOUT, f"no event within {timeout:g}s")
            self._accept(frames)
        msg = self.events.popleft()
        msg.decode_payload()
        return msg
