"""The local connector: a Unix socket only the instance owner may use.

Why not rely on file permissions alone: a socket in a 0700 directory with mode
0600 keeps others out of the path, and SO_PEERCRED is checked as well (as the
Flux local connector does) so a leaked descriptor or a lax directory still
cannot let another uid in. Clients speak the normal message format with
length-prefixed frames and may pipeline any number of requests.

Why limits (`ConnectorLimits`): every client shares the broker's one event loop and
memory, so no client may make it hold without end. Input: a message may be at most
`max_message` bytes, and all clients' partly received messages together at most
`input_budget` (a client that would take more is answered ENOBUFS and disconnected;
the others are served). Output: a client that does not read its answers is not
read from either once `output_pause` bytes wait for it (it blocks in its own send
buffer, the kernel's flow control), and one that still lets `output_limit` bytes pile
up (events it subscribed to) is disconnected. Running out of descriptors (EMFILE) stops
accepting for a backoff that doubles to a second, logged once per `EMFILE_LOG_EVERY`, so
a flood of connections never turns into a busy loop.

Sockets are made with `_socket`, the C module under the standard `socket` (whose Python
layer, its enums and the `selectors` and `array` it imports, is 0.3 MiB of a worker's
RSS, issue 32): its `socket` type has every method used here, and `_accept` gives the
new descriptor, which is wrapped in a socket of the same type.
"""

from __future__ import annotations

import _socket
import errno
import itertools
import os
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import (
    MAX_MESSAGE_SIZE,
    Message,
    MessageError,
    StreamDecoder,
    encode_stream,
)
from fluxnode.agent.broker.reactor import Reactor

# plain ints for the test of every client wakeup (`int & zmq.PollEvent` goes through enum)
_POLLOUT = int(zmq.POLLOUT)
_POLLIN = int(zmq.POLLIN)
_POLLIN_ERR = int(zmq.POLLIN | zmq.POLLERR)

READ_CHUNK = 256 * 1024
ACCEPT_BACKOFF_MIN = 0.05  # seconds without accepting after EMFILE, doubling...
ACCEPT_BACKOFF_MAX = 1.0  # ...up to this
EMFILE_LOG_EVERY = 10.0  # seconds between two "out of descriptors" log lines
CLIENT_HOP_PREFIX = "c"  # a local client's hop in a message route: c1, c2, ...


def is_client_hop(hop: str) -> bool:
    """Whether `hop` (a route entry) names a client of this broker's local connector, not
    an overlay peer."""
    return hop.startswith(CLIENT_HOP_PREFIX)


@dataclass(frozen=True)
class ConnectorLimits:
    """What one broker's local connector may hold for its clients (bytes)."""

    max_message: int = MAX_MESSAGE_SIZE  # one message, as on the TBON
    input_budget: int = 2 * MAX_MESSAGE_SIZE  # partly received messages of all clients together
    output_pause: int = 4 * 1024 * 1024  # stop reading a client whose answers wait unread
    output_limit: int = 2 * MAX_MESSAGE_SIZE  # disconnect a client whose output passes this


class ConnectorError(Exception):
    """The local socket cannot be set up safely (path, ownership, permissions)."""


def socket_path(uri: str) -> Path:
    if not uri.startswith("local://"):
        raise ConnectorError(f"local-uri must start with local:// (got {uri!r})")
    path = uri[len("local://") :]
    if not path.startswith("/"):
        raise ConnectorError(f"local-uri must be an absolute path (got {uri!r})")
    return Path(path)


def prepare_directory(directory: Path) -> None:
    """Create the socket's directory 0700, or insist an existing one is ours and private."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = directory.stat()
    if st.st_uid != os.getuid():
        raise ConnectorError(
            f"{directory}: owned by uid {st.st_uid}, not by the broker's uid {os.getuid()}"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(directory, 0o700)


class LocalClient:
    __slots__ = ("id", "sock", "decoder", "outbuf", "uid", "subscriptions", "events")

    def __init__(self, cid: str, sock: _socket.socket, uid: int, max_message: int) -> None:
        self.id = cid
        self.sock = sock
        self.decoder = StreamDecoder(max_message)
        self.outbuf = bytearray()
        self.uid = uid
        self.subscriptions: list[str] = []
        self.events = _POLLIN  # what the reactor watches its socket for


class LocalConnector:
    """Accepts owner-only clients; hands each decoded request to `on_message(msg, client_id)`."""

    def __init__(self, reactor: Reactor, uri: str, log: BrokerLog,
                 on_message: Callable[[Message, str], None], allow_root: bool = False,
                 limits: ConnectorLimits | None = None) -> None:
        self.reactor = reactor
        self.uri = uri
        self.path = socket_path(uri)
        self.log = log
        self.on_message = on_message
        self.allow_root = allow_root
        self.limits = limits or ConnectorLimits()
        self.clients: dict[str, LocalClient] = {}
        self._ids = itertools.count(1)
        self.listener: _socket.socket | None = None
        self._accept_backoff = 0.0
        self._emfile_logged = float("-inf")
        self._emfile_count = 0

    def start(self) -> None:
        prepare_directory(self.path.parent)
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # Bind under a temporary name and rename once listening, so the path never
        # names a socket that refuses connections.
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        if tmp.exists():
            tmp.unlink()
        old = os.umask(0o177)
        try:
            sock.bind(str(tmp))
        finally:
            os.umask(old)
        os.chmod(tmp, 0o600)
        sock.listen(1024)
        os.rename(tmp, self.path)
        sock.setblocking(False)
        self.listener = sock
        self.reactor.add(sock, zmq.POLLIN, self._accept)

    def close(self) -> None:
        for cid in list(self.clients):
            self._drop(cid, None)
        if self.listener is not None:
            self.reactor.remove(self.listener)
            self.listener.close()
            self.listener = None
            try:
                self.path.unlink()
            except OSError:
                pass

    def _accept(self, _revents: int) -> None:
        assert self.listener is not None
        while True:
            try:
                fd, _ = self.listener._accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause_accepting(exc)
                else:
                    self.log.error("local connector: accept failed: %s", exc)
                return
            self._accept_backoff = 0.0
            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
            pid, uid, _gid = struct.unpack(
                "3i", conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
            )
            if uid != os.getuid() and not (uid == 0 and self.allow_root):
                self.log.warning(
                    "local connector: refused connection from pid %d uid %d (only uid %d may "
                    "connect)",
                    pid,
                    uid,
                    os.getuid(),
                )
                conn.close()
                continue
            conn.setblocking(False)
            cid = f"{CLIENT_HOP_PREFIX}{next(self._ids)}"
            client = LocalClient(cid, conn, uid, self.limits.max_message)
            self.clients[cid] = client
            self.reactor.add(conn, zmq.POLLIN, lambda ev, c=cid: self._ready(c, ev))

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors (or kernel memory): the pending connection stays in the
        backlog; stop polling the listener for a while instead of failing at full speed."""
        assert self.listener is not None
        self._accept_backoff = min(ACCEPT_BACKOFF_MAX,
                                   max(ACCEPT_BACKOFF_MIN, 2 * self._accept_backoff))
        self._emfile_count += 1
        now = time.monotonic()
        if now - self._emfile_logged >= EMFILE_LOG_EVERY:
            self.log.error(
                "local connector: cannot accept connections: %s (%d clients connected; %d "
                "refusals since the last such line); retrying in %.2fs",
                exc.strerror, len(self.clients), self._emfile_count, self._accept_backoff,
            )
            self._emfile_logged = now
            self._emfile_count = 0
        listener = self.listener
        self.reactor.remove(listener)

        def resume() -> None:
            if self.listener is listener:
                self.reactor.add(listener, zmq.POLLIN, self._accept)
                self._accept(zmq.POLLIN)

        self.reactor.call_later(self._accept_backoff, resume)

    def _input_held(self) -> int:
        return sum(len(c.decoder.buf) for c in self.clients.values())

    def _ready(self, cid: str, revents: int) -> None:
        client = self.clients.get(cid)
        if client is None:
            return
        if revents & _POLLOUT:
            self._flush(client)
        if revents & _POLLIN_ERR:
            self._read(client)

    def _read(self, client: LocalClient) -> None:
        try:
            data = client.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client.id, None)
            return
        if len(client.decoder.buf) + len(data) > READ_CHUNK and \
                self._input_held() + len(data) > self.limits.input_budget:
            self.log.error(
                "local connector: client %s: partly received messages of all clients would "
                "exceed the %d byte input budget; disconnecting it", client.id,
                self.limits.input_budget)
            self._write(client, Message("response", "", -1, 0, None, errno.ENOBUFS,
                                        "the broker's input budget is exhausted; message "
                                        "refused (try again later or send less at once)"))
            self._flush(client)
            self._drop(client.id, None)
            return
        client.decoder.feed(data)
        while client.id in self.clients:
            try:
                frames = client.decoder.next()
            except MessageError as exc:
                # The stream cannot be resynchronized: answer once, then hang up.
                self.log.error(
                    "local connector: client %s: %s; disconnecting", client.id, exc.errstr
                )
                err = Message("response", "", -1, 0, None, exc.errnum, exc.errstr)
                self._write(client, err)
                self._flush(client)
                self._drop(client.id, None)
                return
            if frames is None:
                return
            try:
                msg = Message.from_frames(frames)
            except MessageError as exc:
                self.log.error(
                    "local connector: client %s sent a malformed message: %s", client.id, exc.errstr
                )
                p = exc.partial
                err = Message(
                    "response",
                    p.get("topic") if isinstance(p.get("topic"), str) else "",
                    -1,
                    p.get("matchtag") if isinstance(p.get("matchtag"), int) else 0,
                    None,
                    exc.errnum,
                    exc.errstr,
                )
                self._write(client, err)
                continue
            if msg.type == "request" and msg.topic == "event.subscribe":
                self._subscribe(client, msg)
                continue
            if msg.type != "request":
                self.log.error(
                    "local connector: client %s sent a %s message; only requests are accepted",
                    client.id,
                    msg.type,
                )
                if msg.type != "response":
                    self._write(
                        client,
                        msg.error(errno.EPROTO, f"clients may only send requests, not {msg.type}"),
                    )
                continue
            msg.route.append(client.id)
            self.on_message(msg, client.id)

    def _subscribe(self, client: LocalClient, msg: Message) -> None:
        try:
            topic = (msg.decode_payload() or {}).get("topic")
        except MessageError as exc:
            self._write(client, msg.error(exc.errnum, exc.errstr))
            return
        if not isinstance(topic, str):
            self._write(
                client, msg.error(errno.EINVAL, "event.subscribe needs a string 'topic' prefix")
            )
            return
        client.subscriptions.append(topic)
        self._write(client, msg.response({}))

    def send(self, cid: str, msg: Message) -> bool:
        client = self.clients.get(cid)
        if client is None:
            return False
        self._write(client, msg)
        return True

    def deliver_event(self, msg: Message) -> None:
        for client in list(self.clients.values()):
            if any(msg.topic.startswith(t) for t in client.subscriptions):
                self._write(client, msg)

    def _write(self, client: LocalClient, msg: Message) -> None:
        was_empty = not client.outbuf
        client.outbuf += encode_stream(msg.to_frames())
        if len(client.outbuf) > self.limits.output_limit:
            self.log.error(
                "local connector: client %s does not read: %d bytes wait for it (limit %d); "
                "disconnecting it", client.id, len(client.outbuf), self.limits.output_limit)
            self._drop(client.id, None)
            return
        if was_empty:
            self._flush(client)
        elif len(client.outbuf) > self.limits.output_pause:
            self._poll(client)

    def _flush(self, client: LocalClient) -> None:
        while client.outbuf:
            try:
                n = client.sock.send(client.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(client.id, None)
                return
            del client.outbuf[:n]
        if client.id in self.clients:
            self._poll(client)

    def _poll(self, client: LocalClient) -> None:
        """Watch for input unless the client's unread output passed `output_pause`; watch for
        room to write while output waits."""
        events = 0 if len(client.outbuf) > self.limits.output_pause else _POLLIN
        if client.outbuf:
            events |= _POLLOUT
        if events != client.events:  # (most answers leave at once: nothing to change)
            client.events = events
            self.reactor.modify(client.sock, events)

    def _drop(self, cid: str, reason: str | None) -> None:
        client = self.clients.pop(cid, None)
        if client is None:
            return
        self.reactor.remove(client.sock)
        client.sock.close()
