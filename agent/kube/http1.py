"""HTTP/1.1 answers read from bytes: one sans-IO parser for the project's two raw clients.

Two clients of ours read HTTP/1.1 answers themselves: the binder's writes to the API server
(`scheduler/binder/http_writer.py`, a blocking socket, pipelined) and the API emulator's
calls to admission webhooks (`fluxnode/testing/kube_webhook_client.py`, asyncio streams).
Each keeps only its I/O: it hands whatever bytes arrive to `ResponseParser.feed`, asks
`next_response` for a complete answer (None: more bytes are needed), and says `eof` when
the peer closed. The framing rules are written once, here (RFC 9112):

- a status line ``HTTP/1.x NNN reason``, then header lines ``name: value`` up to an empty
  line; empty lines before the status line are skipped, a bare LF ends a line as CRLF does,
  and an interim answer (1xx: we never send ``Expect``) is skipped for the one after it;
- no body after HEAD, 204 or 304; otherwise chunked (chunk extensions ignored, trailers
  read and dropped) when Transfer-Encoding says so, else Content-Length bytes, else the body
  runs to the connection's end (`eof` completes it);
- the connection may serve another request (`Response.keep_alive`) when the answer is
  HTTP/1.1, does not say ``Connection: close`` and was not delimited by the connection's end.

What a peer may send is bounded: the head (status line and headers) to `max_head` bytes and
`MAX_HEADERS` lines, a chunk-size or trailer line by the same `max_head`, and the body to
`max_body` when given (Content-Length past it fails before any body byte is read). Malformed
framing is a `ProtocolError` naming what is wrong and quoting the first bytes of it.

Why not h11, the kept sans-IO HTTP/1.1 library: measured on the binder's own path, 64
pipelined PATCH answers parsed from bytes, h11 (0.16) costs ~310,000 instructions an answer
more than this parser, 5.6-6.7 times its cost (docs/dependencies.md has the numbers and the
script); the binder makes ~18 writes per workload of 8 pods, so h11 would add a quarter to a
third to the binder's CPU. Its event state machine (a client must also send each request
through it, and it does not pipeline) is most of that cost.

Parsing is linear in the bytes fed, however they are split: a body already begun is moved
out of the buffer into parts as it arrives, and the search for a head's end resumes where
the last one stopped.
"""

from __future__ import annotations

import re

MAX_HEAD = 64 * 1024  # an answer's status line and headers, by default
MAX_HEADERS = 200  # header lines of one answer

_HEAD_END = re.compile(rb"\n\r?\n")  # the empty line ending a head (CRLF or bare LF)
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_NO_BODY = (204, 304)

# what is being read (self._state)
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _TO_CLOSE = range(6)


class ProtocolError(ConnectionError):
    """The peer's answer is not HTTP/1.x framed as expected (or exceeds a bound); what
    the request did is unknown. A ConnectionError: the connection cannot be used again."""


class Response:
    """One complete answer. `status`, `reason`, `data` and `getheaders()` are what the
    official client's ApiException reads from an answer (as from urllib3's), so a binder's
    error answer is handed to it as it is."""

    __slots__ = ("status", "reason", "headers", "data", "keep_alive")

    def __init__(self, status: int, reason: str, headers: dict[str, str], data: bytes,
                 keep_alive: bool):
        self.status, self.reason, self.headers = status, reason, headers
        self.data, self.keep_alive = data, keep_alive

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def __repr__(self) -> str:
        return (f"Response({self.status} {self.reason!r}, {len(self.data)} bytes, "
                f"keep_alive={self.keep_alive})")


class ResponseParser:
    """The answers of one connection, in order (see the module). Not thread-safe: one per
    connection, used by whoever reads that connection."""

    __slots__ = ("max_head", "max_body", "_buf", "_pos", "_scanned", "_state", "_status",
                 "_reason", "_headers", "_keep", "_parts", "_size", "_left")

    def __init__(self, max_head: int = MAX_HEAD, max_body: int | None = None):
        self.max_head, self.max_body = max_head, max_body
        self._buf = b""
        self._pos = 0  # bytes of _buf already consumed
        self._scanned = 0  # _buf searched for a head's end up to here (less 2)
        self._state = _HEAD
        self._parts: list[bytes] = []  # the body so far
        self._size = 0  # its length
        self._left = 0  # bytes of body (Content-Length) or of the chunk still to come

    def feed(self, data: bytes) -> None:
        """Bytes as they arrived from the connection."""
        if self._pos >= len(self._buf):
            self._buf, self._pos, self._scanned = data, 0, 0
        else:
            self._buf = self._buf[self._pos:] + data
            self._scanned = max(0, self._scanned - self._pos)
            self._pos = 0

    def eof(self) -> Response:
        """The peer closed the connection: the answer whose body ran to the connection's end,
        else ProtocolError (closed before an answer, or in the middle of one)."""
        if self._state == _TO_CLOSE:
            return self._done(False)
        if self._state == _HEAD and self._pos == len(self._buf):
            raise ProtocolError("connection closed before the answer")
        raise ProtocolError("connection closed in the middle of the answer")

    def next_response(self, head: bool = False) -> Response | None:
        """The next complete answer from the bytes fed, or None until more are fed. `head`:
        the answer is to a HEAD request (no body), said on each call until it is returned."""
        if self._state == _HEAD:
            while True:
                if not self._head():
                    return None
                if not 100 <= self._status < 200:
                    break  # (an interim answer: the real one follows)
            self._frame(head)
        while True:
            state = self._state
            if state == _LENGTH:
                buf, pos, left = self._buf, self._pos, self._left
                have = len(buf) - pos
                if have < left:  # keep what came, wait for the rest
                    if have:
                        self._add(buf[pos:])
                        self._left = left - have
                        self._buf, self._pos = b"", 0
                    return None
                self._pos = pos + left
                if not self._parts:  # all of it in one piece: no copy of parts
                    return self._answer(buf[pos:pos + left], self._keep)
                self._add(buf[pos:pos + left])
                return self._done(self._keep)
            if state == _CHUNK_SIZE:
                line = self._line()
                if line is None:
                    return None
                text = line.split(b";", 1)[0].strip()
                if not text or text.strip(_HEX_DIGITS):  # int() would take 0x, _, + and -
                    raise ProtocolError(f"malformed chunk size {text[:20]!r}")
                size = int(text, 16)
                if size == 0:
                    if self._buf.startswith(b"\r\n", self._pos):  # no trailers: the end
                        self._pos += 2
                        return self._done(self._keep)
                    self._state = _TRAILERS
                    continue
                if self.max_body is not None:
                    self._check_body(self._size + size)
                buf, pos = self._buf, self._pos
                end = pos + size
                if buf.startswith(b"\r\n", end):  # the whole chunk is here: take it
                    self._parts.append(buf[pos:end])
                    self._size += size
                    self._pos = end + 2
                else:
                    self._left = size
                    self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                buf, pos, left = self._buf, self._pos, self._left
                have = len(buf) - pos
                if have < left:
                    if have:
                        self._add(buf[pos:])
                        self._left = left - have
                        self._buf, self._pos = b"", 0
                    return None
                end = pos + left
                after = buf[end:end + 2]
                if after == b"\r\n":
                    skip = 2
                elif after[:1] == b"\n":
                    skip = 1
                elif after in (b"", b"\r"):  # its CRLF is still to come
                    if left:
                        self._add(buf[pos:end])
                        self._left = 0
                        self._pos = end
                    return None
                else:
                    raise ProtocolError("malformed chunk (no CRLF after its data)")
                if left:
                    self._add(buf[pos:end])
                self._pos = end + skip
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                line = self._line()
                if line is None:
                    return None
                if not line.strip():  # the empty line after the trailers (if any)
                    return self._done(self._keep)
                self._left += len(line) + 1  # (0 after the last chunk)
                if self._left > self.max_head:
                    raise ProtocolError(f"the answer's trailers are longer than "
                                        f"{self.max_head} bytes")
            else:  # _TO_CLOSE: everything until eof()
                if self._pos < len(self._buf):
                    self._add(self._buf[self._pos:])
                    self._check_body(self._size)
                    self._buf, self._pos = b"", 0
                return None

    def _head(self) -> bool:
        """Parse a complete head into the parser's fields; False until one has arrived."""
        buf, pos = self._buf, self._pos
        while buf.startswith(b"\r\n", pos) or buf.startswith(b"\n", pos):  # before a head
            pos += 2 if buf[pos] == 13 else 1
        self._pos = pos
        if pos >= len(buf):
            return False
        scanned = self._scanned - 2
        end = _HEAD_END.search(buf, scanned if scanned > pos else pos)
        if end is None or end.start() - pos > self.max_head:
            if len(buf) - pos > self.max_head:
                raise ProtocolError(f"the answer's headers are longer than {self.max_head} "
                                    "bytes")
            self._scanned = len(buf)
            return False
        self._pos = end.end()
        self._scanned = 0
        lines = buf[pos:end.start()].decode("latin-1").split("\n")
        if len(lines) > MAX_HEADERS + 1:
            raise ProtocolError(f"more than {MAX_HEADERS} header lines")
        status_line = lines[0].rstrip("\r")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not (version.startswith("HTTP/1.") and len(code) == 3 and code.isascii()
                and code.isdigit()):
            raise ProtocolError(f"malformed HTTP status line {status_line[:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError(f"malformed HTTP header line {line.rstrip()[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._status, self._reason, self._headers = int(code), reason, headers
        connection = headers.get("connection")
        self._keep = version == "HTTP/1.1" and (
            connection is None or "close" not in connection.lower().replace(" ", "").split(","))
        return True

    def _frame(self, head: bool) -> None:
        """From the head just read: how its body is delimited."""
        headers = self._headers
        if head or self._status in _NO_BODY:
            self._left, self._state = 0, _LENGTH
        elif "transfer-encoding" in headers and "chunked" in headers["transfer-encoding"].lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            text = headers["content-length"]
            if not (text.isascii() and text.isdigit()):
                raise ProtocolError(f"malformed Content-Length {text[:40]!r}")
            self._left = int(text)
            if self.max_body is not None and self._left > self.max_body:
                raise ProtocolError(f"an answer of {self._left} bytes (at most "
                                    f"{self.max_body} are read)")
            self._state = _LENGTH
        else:
            self._state = _TO_CLOSE

    def _line(self) -> bytes | None:
        """The next line of a chunked body (a chunk's size, a trailer), its end excluded."""
        buf, pos = self._buf, self._pos
        end = buf.find(b"\n", pos)
        if end < 0:
            if len(buf) - pos > self.max_head:
                raise ProtocolError(f"a chunk-size or trailer line longer than "
                                    f"{self.max_head} bytes")
            return None
        self._pos = end + 1
        return buf[pos:end]

    def _add(self, part: bytes) -> None:
        self._parts.append(part)
        self._size += len(part)

    def _check_body(self, size: int) -> None:
        if self.max_body is not None and size > self.max_body:
            raise ProtocolError(f"an answer of more than {self.max_body} bytes")

    def _done(self, keep: bool) -> Response:
        data = b"".join(self._parts)
        self._parts = []
        self._size = 0
        return self._answer(data, keep)

    def _answer(self, data: bytes, keep: bool) -> Response:
        self._state = _HEAD
        return Response(self._status, self._reason, self._headers, data, keep)
