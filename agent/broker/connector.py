"""The local connector: a Unix socket only the instance owner may use.

Why not rely on file permissions alone: a socket in a 0700 directory with mode
0600 keeps others out of the path, and SO_PEERCRED is checked as well (as the
Flux local connector does) so a leaked descriptor or a lax directory still
cannot let another uid in. Clients speak the normal message format with
length-prefixed frames and may pipeline any number of requests.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path

import zmq
from fluxnode.agent.broker.message import Message, MessageError, StreamDecoder, encode_stream
from fluxnode.agent.broker.reactor import Reactor

READ_CHUNK = 256 * 1024


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
    __slots__ = ("id", "sock", "decoder", "outbuf", "uid", "subscriptions")

    def __init__(self, cid: str, sock: socket.socket, uid: int) -> None:
        self.id = cid
        self.sock = sock
        self.decoder = StreamDecoder()
        self.outbuf = bytearray()
        self.uid = uid
        self.subscriptions: list[str] = []


class LocalConnector:
    """Accepts owner-only clients; hands each decoded request to `on_message(msg, client_id)`."""

    def __init__(self, reactor: Reactor, uri: str, log: logging.Logger,
                 on_message: Callable[[Message, str], None], allow_root: bool = False) -> None:
        self.reactor = reactor
        self.uri = uri
        self.path = socket_path(uri)
        self.log = log
        self.on_message = on_message
        self.allow_root = allow_root
        self.clients: dict[str, LocalClient] = {}
        self._ids = itertools.count(1)
        self.listener: socket.socket | None = None

    def start(self) -> None:
        prepare_directory(self.path.parent)
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.log.error("local connector: accept failed: %s", exc)
                return
            pid, uid, _gid = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
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
            cid = f"c{next(self._ids)}"
            client = LocalClient(cid, conn, uid)
            self.clients[cid] = client
            self.reactor.add(conn, zmq.POLLIN, lambda ev, c=cid: self._ready(c, ev))

    def _ready(self, cid: str, revents: int) -> None:
        client = self.clients.get(cid)
        if client is None:
            return
        if revents & zmq.POLLOUT:
            self._flush(client)
        if revents & (zmq.POLLIN | zmq.POLLERR):
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
        if was_empty:
            self._flush(client)

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
            self.reactor.modify(client.sock, zmq.POLLIN | (zmq.POLLOUT if client.outbuf else 0))

    def _drop(self, cid: str, reason: str | None) -> None:
        client = self.clients.pop(cid, None)
        if client is None:
            return
        self.reactor.remove(client.sock)
        client.sock.close()
