"""The API emulator's client for admission webhooks: HTTP/1.1 over TLS on its own event loop.

A real API server calls a webhook from the goroutine serving the write, through a client it
keeps per webhook (its TLS configuration built once, keep-alive connections: k8s.io/apiserver
pkg/util/webhook ClientManager). The emulator used to hand each call to a worker thread
that asked through urllib3: the hop to the thread and back, urllib3's and http.client's
request and answer handling, and the thread's wait for the interpreter between each of its
steps cost ~0.6 ms of CPU a call and stretched the calls' p99 in a burst
(bench/workloads.py). Here the call is a coroutine on the emulator's loop (uvloop: its TLS
is compiled), written as one request and its answer read by the project's one HTTP/1.1
answer parser (`agent/kube/http1.py`, sans-IO: the binder's writes read theirs with it too),
fed what the stream gives; the loop serves other requests while it waits, so a webhook may
still call the API itself.

`WebhookClients` belongs to one emulator (one event loop: connections cannot move between
loops) and keeps, per endpoint and caBundle, one SSL context and up to `KEPT` idle
connections. What an answer may be: a status line, headers, then a body sized by
Content-Length, chunked, or (no length, ``Connection: close``) read to the end; a head of
more than `MAX_HEAD` bytes or a body of more than `MAX_BODY` fails the call, as does any
malformed framing (`CallFailed`, which admission reports as the API server does). A kept
connection that the server closed while idle is noticed as it is taken and dropped, and
one that breaks before any byte of an answer is asked again once on a new connection, as
Go's transport retries a request a reused connection lost. The whole call, connecting
included, is bounded by the webhook's timeoutSeconds; a call that fails or times out
closes its connection.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from dataclasses import dataclass, field

from fluxnode.agent.kube.http1 import Response, ResponseParser

KEPT = 8  # idle connections kept per endpoint (more are opened when needed, then closed)
ENDPOINTS = 32  # endpoints kept (the oldest closed past it: tests come and go)
MAX_HEAD = 64 * 1024  # an answer's status line and headers
MAX_BODY = 16 * 1024 * 1024  # an answer's body (the emulator's own request bound)
READ_SIZE = 65536  # bytes asked of the stream at a time


class CallFailed(Exception):
    """The webhook could not be asked, or answered something unusable."""


@dataclass(frozen=True)
class Endpoint:
    """Where a webhook is asked: the address to connect to, the name its certificate must
    carry, and the caBundle (base64 PEM; empty: the system's roots) that vouches for it."""

    host: str
    port: int
    server_name: str
    ca_bundle: str


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    parser: ResponseParser = field(default_factory=lambda: ResponseParser(MAX_HEAD, MAX_BODY))

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


@dataclass
class _Pool:
    context: ssl.SSLContext
    idle: list[_Connection] = field(default_factory=list)


class _Lost(Exception):
    """A reused connection broke before any byte of the answer (asked again once)."""


class WebhookClients:
    """Keep-alive HTTPS clients of one emulator's webhooks (see the module)."""

    def __init__(self) -> None:
        self._pools: dict[Endpoint, _Pool] = {}
        self.seconds: list[float] = []  # each exchange: request written -> answer read

    async def post(self, endpoint: Endpoint, path: str, body: bytes, timeout: float,
                   url: str) -> tuple[int, bytes]:
        """POST `body` (JSON) to `path`; the answer's status and body. CallFailed, its
        message starting ``Post "URL": ``, when it cannot be asked or answers malformed."""
        pool = self._pool(endpoint, url)
        try:
            async with asyncio.timeout(timeout):
                began = time.monotonic()
                try:
                    return await self._exchange(pool, endpoint, path, body, reuse=True)
                except _Lost:
                    return await self._exchange(pool, endpoint, path, body, reuse=False)
                finally:
                    self.seconds.append(time.monotonic() - began)
        except TimeoutError:
            raise CallFailed(f'Post "{url}": timed out awaiting the answer (after '
                             f"{timeout:g} s, the webhook's timeoutSeconds)") from None
        except CallFailed as exc:
            raise CallFailed(f'Post "{url}": {exc}') from None
        except (OSError, _Lost) as exc:
            raise CallFailed(f'Post "{url}": {exc or type(exc).__name__}') from None

    def close(self) -> None:
        """Close every kept connection (the emulator stops)."""
        for pool in self._pools.values():
            for connection in pool.idle:
                connection.close()
        self._pools.clear()

    def _pool(self, endpoint: Endpoint, url: str) -> _Pool:
        pool = self._pools.get(endpoint)
        if pool is not None:
            return pool
        if endpoint.ca_bundle:
            try:
                context = ssl.create_default_context(
                    cadata=base64.b64decode(endpoint.ca_bundle).decode())
            except (ValueError, ssl.SSLError) as exc:
                raise CallFailed(f'Post "{url}": unable to load root certificates: {exc}') \
                    from None
        else:
            context = ssl.create_default_context()
        pool = self._pools[endpoint] = _Pool(context)
        while len(self._pools) > ENDPOINTS:
            oldest = next(iter(self._pools))
            for connection in self._pools.pop(oldest).idle:
                connection.close()
        return pool

    async def _exchange(self, pool: _Pool, endpoint: Endpoint, path: str, body: bytes,
                        reuse: bool) -> tuple[int, bytes]:
        connection = None
        while reuse and pool.idle:
            kept = pool.idle.pop()
            if kept.usable():
                connection = kept
                break
            kept.close()
        reused = connection is not None
        if connection is None:
            reader, writer = await asyncio.open_connection(
                endpoint.host, endpoint.port, ssl=pool.context,
                server_hostname=endpoint.server_name, limit=MAX_HEAD)
            connection = _Connection(reader, writer)
        done = False
        try:
            connection.writer.write(
                b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                b"Accept: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (path.encode(), endpoint.server_name.encode(), endpoint.port, len(body),
                   body))
            answer = await _answer(connection, reused)
            done = answer.keep_alive
        finally:
            if done and len(pool.idle) < KEPT:
                pool.idle.append(connection)
            else:
                connection.close()
        return answer.status, answer.data


async def _answer(connection: _Connection, reused: bool) -> Response:
    """Read the answer (the connection's parser, agent/kube/http1.py, frames it and bounds
    it: its ProtocolError is a ConnectionError, so CallFailed with what is wrong). _Lost
    when a reused connection ends or is reset before any byte of it."""
    parser = connection.parser
    answer = parser.next_response()
    got = False
    while answer is None:
        try:
            data = await connection.reader.read(READ_SIZE)
        except (ConnectionResetError, BrokenPipeError):
            if reused and not got:
                raise _Lost() from None
            raise
        if not data:
            if reused and not got:
                raise _Lost()
            return parser.eof()
        got = True
        parser.feed(data)
        answer = parser.next_response()
    return answer

