"""The binder's writes (Bindings, Events, status patches) as plain HTTP/1.1 exchanges.

Two writes per pod are most of the binder's CPU. Through urllib3 (`RawApi`) each
costs the pool's bookkeeping, http.client's header checks and its email-module
header parser: ~0.1 ms of CPU for a request the API server answers in a few
hundred bytes. Here each writing thread keeps one connection to the API server,
made by the client's own urllib3 pool (`_new_conn`: the same TLS settings,
certificates and host checks), and a write is one ``sendall`` of the request, its answer
read by the project's one HTTP/1.1 answer parser (`agent/kube/http1.py`, sans-IO: fed what
``recv`` returns; status line, headers, a Content-Length or chunked body; h11 was measured
against it and costs 5.6-6.7 times as much an answer). Authentication headers come from the
client's configuration (its refresh hook keeps tokens current), asked again after
`AUTH_TTL` seconds: the hook of a kubeconfig's client rebuilds its settings on every
call, 40 us each, more than the rest of a write. Bodies are encoded by orjson: 0.5 us for
a Binding where the standard library's encoder took 9.

What a failure means is what it meant through urllib3: an HTTP error status is
the client's ApiException (status, reason, body); no answer is any other
exception (the caller treats the write's outcome as unknown: a Binding is tried
again and a 409 then says it was done). A connection the server closed while it
sat idle is noticed before the request is sent (as urllib3 does) and replaced, so
an idle binder never turns its first write into an unknown outcome. With an HTTP
proxy configured the binder keeps `RawApi`.

**Pipelining** (`pipeline`): writes that must land in a given order without a round trip
each (the FluxJob loop's resumes of equal Jobs, issue 30) are sent back to back on the one
connection, then their answers read in order. An HTTP/1.1 server answers pipelined requests
in the order received (RFC 9112 section 9.3.2) and handles them one after the other (Go's
net/http server as the API server runs it, aiohttp as the emulator does), so the writes are
applied in the order sent. RFC 9112 asks a client not to pipeline non-idempotent requests
because a connection lost midway leaves their outcomes unknown; the callers pipeline only
writes that mean the same when applied twice (a merge patch setting a field), and every
write whose answer was not read is reported as an unknown outcome, as a lone write's is.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

import orjson
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.http1 import ProtocolError, Response, ResponseParser
from kubernetes.client.exceptions import ApiException
from urllib3 import ProxyManager
from urllib3.util import parse_url
from urllib3.util.wait import wait_for_read

RECV_SIZE = 65536  # bytes asked of the socket at a time (a window's answers come in a few)
AUTH_TTL = 1.0  # seconds the authentication headers are kept before asking the client again
# requests of a pipeline sent before their answers are read: while the client is still
# sending, the server's answers pile up unread, and with enough of them (a Job's is ~4 KiB)
# both ends wait on full socket buffers; servers also stop reading a connection with many
# requests queued (aiohttp, the API emulator's server, at 32). At most this many at a time,
# each window's answers read before the next is sent.
PIPELINE_WINDOW = 16


class Write(NamedTuple):
    """One write of a pipeline: what `HttpWriter.request` takes."""

    method: str
    path: str
    body: Any
    content_type: str = "application/json"


class _Connection:
    """One kept-alive connection and the parser of its answers (one thread's)."""

    def __init__(self, conn: Any):
        self.conn = conn  # a urllib3 HTTP(S)Connection, connected
        self.sock = conn.sock
        self.parser = ResponseParser()

    def close(self) -> None:
        self.conn.close()

    def dropped(self) -> bool:
        """The server closed it (or sent something unasked) while it was idle."""
        try:
            return wait_for_read(self.sock, timeout=0.0)
        except OSError:
            return True

    def exchange(self, request: bytes, head: bool = False) -> Response:
        self.sock.sendall(request)
        return self.answer(head)

    def answer(self, head: bool = False) -> Response:
        """Read the next answer on the connection; _CloseAfter carries it when the server
        closes the connection after it."""
        parser = self.parser
        response = parser.next_response(head)
        while response is None:
            data = self.sock.recv(RECV_SIZE)
            if not data:
                response = parser.eof()  # or ProtocolError: closed before the answer's end
                break
            parser.feed(data)
            response = parser.next_response(head)
        if not response.keep_alive:
            raise _CloseAfter(response)
        return response


def _outcome(response: Response) -> bytes | Exception:
    if response.status >= 400:
        return ApiException(http_resp=response)
    return response.data


class _Closed(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """The server closed the connection in the middle of a pipeline."""


class _CloseAfter(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """The answer is complete, and the server closes the connection after it."""

    def __init__(self, response: Response):
        super().__init__()
        self.response = response


class HttpWriter:
    """`RawApi.request` over one kept-alive connection per writing thread."""

    def __init__(self, api_client: Any, timeout: float = 30.0):
        self._client = api_client
        self._timeout = timeout
        host = api_client.configuration.host.rstrip("/")
        url = parse_url(host)
        self._pool = api_client.rest_client.pool_manager.connection_from_url(host)
        self._prefix = (url.path or "").rstrip("/")
        port = url.port
        default = 443 if url.scheme == "https" else 80
        self._host_header = url.host if port in (None, default) else f"{url.host}:{port}"
        if url.host and ":" in url.host and not url.host.startswith("["):  # IPv6 literal
            self._host_header = f"[{url.host}]" + ("" if port in (None, default) else f":{port}")
        self._user_agent = f"fluxnode-binder ({api_client.user_agent})"
        self._auth_cache: tuple[float, str] = (0.0, "")  # (valid until, header lines)
        self._local = threading.local()
        self._all: list[_Connection] = []
        self._lock = threading.Lock()

    @staticmethod
    def usable_for(api_client: Any) -> bool:
        """Whether the client goes straight to the API server (no proxy)."""
        return not isinstance(api_client.rest_client.pool_manager, ProxyManager)

    def _headers(self, content_type: str, length: int) -> str:
        return (f"Host: {self._host_header}\r\nAccept: application/json\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"
                f"User-Agent: {self._user_agent}{self._auth()}")

    def _auth(self) -> str:
        """The authentication header lines (each after a CRLF), kept AUTH_TTL seconds."""
        until, lines = self._auth_cache
        now = time.monotonic()
        if now < until:
            return lines
        out = []
        for auth in self._client.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                key, value = str(auth["key"]), str(auth["value"])
                if "\r" in value or "\n" in value or "\r" in key or "\n" in key:
                    raise ValueError(f"header {key!r}: line breaks are not allowed")
                out.append(f"\r\n{key}: {value}")
        self._auth_cache = (now + AUTH_TTL, "".join(out))
        return self._auth_cache[1]

    def _connection(self) -> _Connection:
        c: _Connection | None = getattr(self._local, "conn", None)
        if c is not None and not c.dropped():
            return c
        if c is not None:
            self._forget(c)
        conn = self._pool._new_conn()  # the client's TLS settings
        conn.timeout = self._timeout
        conn.connect()
        c = self._local.conn = _Connection(conn)
        with self._lock:
            self._all.append(c)
        return c

    def _forget(self, c: _Connection) -> None:
        self._local.conn = None
        with self._lock:
            if c in self._all:
                self._all.remove(c)
        try:
            c.close()
        except OSError:
            pass

    def _encode(self, method: str, path: str, body: Any, content_type: str) -> bytes:
        data = orjson.dumps(body)
        target = self._prefix + path
        if any(ch in target for ch in " \r\n"):
            raise ValueError(f"bad request path {target!r}")
        head = f"{method} {target} HTTP/1.1\r\n{self._headers(content_type, len(data))}\r\n\r\n"
        return head.encode("latin-1") + data

    def request(
        self, method: str, path: str, body: Any, content_type: str = "application/json"
    ) -> None:
        """Send one write; an HTTP error raises ApiException, no answer any other exception.
        The answer's body is not parsed (the binder needs only the status)."""
        request = self._encode(method, path, body, content_type)
        c = self._connection()
        try:
            response = c.exchange(request)
        except _CloseAfter as done:
            self._forget(c)
            response = done.response
        except BaseException:
            self._forget(c)  # the answer (or part of it) is lost with the connection
            raise
        if response.status >= 400:
            raise ApiException(http_resp=response)

    def pipeline(self, writes: list[Write]) -> list[bytes | Exception]:
        """Send `writes` back to back on this thread's connection, `PIPELINE_WINDOW` at a
        time, reading each window's answers in order (see the module's docstring); a write
        after a closed connection is not sent. One outcome per write, in order: the answer's
        body (2xx), the client's ApiException (an HTTP error status: that write only), or
        another exception when its answer was not read (the connection failed or the server
        closed it first: the write may or may not have been applied)."""
        if not writes:
            return []
        requests = [self._encode(*w) for w in writes]
        c = self._connection()
        outcomes: list[bytes | Exception] = []
        try:
            for start in range(0, len(requests), PIPELINE_WINDOW):
                window = requests[start:start + PIPELINE_WINDOW]
                c.sock.sendall(b"".join(window))
                for _ in window:
                    try:
                        response = c.answer()
                    except _CloseAfter as done:
                        self._forget(c)
                        outcomes.append(_outcome(done.response))
                        raise _Closed from None
                    outcomes.append(_outcome(response))
        except _Closed:
            pass
        except (OSError, ProtocolError) as exc:  # no answer to the rest
            self._forget(c)
            outcomes.extend([exc] * (len(writes) - len(outcomes)))
        except BaseException:
            self._forget(c)
            raise
        lost = len(writes) - len(outcomes)
        if lost:  # the server closed the connection after answering only some
            outcomes.extend([ProtocolError("connection closed before the answer")] * lost)
        return outcomes

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass


def writer_for(api_client: Any, connections: int) -> HttpWriter | kube_raw.RawApi:
    """The binder's writer: plain HTTP exchanges unless a proxy is configured."""
    if HttpWriter.usable_for(api_client):
        return HttpWriter(api_client)
    return kube_raw.RawApi(api_client, connections=connections)
