"""A scripted HTTP/1.1 server on loopback, plain or TLS, for tests of HTTP clients.

Each request it reads (request line, headers, a Content-Length body) is answered with the
next scripted reply: bytes sent as they are; a callable given the request's body, whose bytes
are sent (e.g. an echo); None closes the connection without answering; a reply ending in
`CLOSE` is sent without that marker, then the connection is closed, as is one saying
``Connection: close``. With `hold`, every reply waits for that event first. It counts its
connections and records each request as (request line's method and target, headers by lower
case name, body): what a test compares with what the client should have sent, from outside
the client.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable

from support.accept_loop import AcceptLoop

CLOSE = b"<close>"
Reply = bytes | Callable[[bytes], bytes] | None


class Server:
    """Accepts connections on 127.0.0.1 (`port`), each served on a thread of its own."""

    def __init__(self, replies: list[Reply], context: ssl.SSLContext | None = None,
                 hold: threading.Event | None = None):
        self.replies = list(replies)
        self.context, self.hold = context, hold
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.loop = AcceptLoop(self.sock, self._conn)

    @property
    def connections(self) -> int:
        return self.loop.connections

    def _conn(self, conn: socket.socket) -> None:
        if self.context is not None:
            try:
                conn = self.context.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                conn.close()  # the client refused our certificate
                return
        try:
            self._answer(conn)
        except (ssl.SSLError, OSError):
            return  # the client went away

    def _answer(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        with conn:
            while True:
                line = f.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := f.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = f.read(int(headers.get("content-length", "0")))
                self.requests.append((f"{method} {target}", headers, body))
                if self.hold is not None:
                    self.hold.wait(10)
                reply = self.replies.pop(0) if self.replies else None
                if callable(reply):
                    reply = reply(body)
                if reply is None:
                    return
                if reply.endswith(CLOSE):
                    conn.sendall(reply[: -len(CLOSE)])
                    return
                conn.sendall(reply)
                if b"Connection: close" in reply:
                    return

    def close(self) -> None:
        self.sock.close()
