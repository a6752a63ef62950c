"""The API emulator's connections write the answers to pipelined requests together (a cork).

aiohttp writes each response as soon as it is made: one TLS record and one `send` per
answer. A client that pipelines (the binder sends a chunk's Bindings, then its Events, on
one connection, HTTP/1.1 answering them in order) has its requests parsed at once and
handled one after another, each in a task of its own, a turn or two of the event loop
apart. `CorkedTransport` keeps what is written and hands it to the TLS transport in one
write once no parsed request of that connection is left waiting (checked at the end of a
turn of the loop, `loop.call_soon`), and after a burst one turn later still, when the last
request's handler writes its answer: the answers to a pipelined burst leave in one write
(two when a handler waits, e.g. for a webhook) instead of one each (bench/workloads.py:
8 Bindings, then 8 Events per Job). A lone answer, or a watch's events, go out at the end
of the turn they were written in, as nothing is waiting; the bytes and their order are
the same.
`close` and `write_eof` send what is kept first; `abort` drops it, as aborting a transport
drops its buffer.

The server's handler class (`CorkedRequestHandler`) gives aiohttp this transport in place
of the real one, with the handler's queue of parsed requests as what is waiting (aiohttp's
`_messages`; none when a version lacks it, and then each turn's writes go out together);
everything but writing goes to the real transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sized
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


class CorkedTransport:
    """A transport whose writes go out together: at the end of the turn of the loop they
    were made in, or once the connection's pipelined requests are answered (waiting at most
    `MAX_TURNS` turns)."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop,
                 waiting: Callable[[], Sized] = tuple):
        self._transport, self._loop, self._waiting = transport, loop, waiting
        self._kept: list[bytes] = []
        self._size = 0
        # whether requests were seen waiting since the last write out, and for how many
        # turns none has been since (`_flush_when_idle`)
        self._after_waiting, self._idle, self._turns = False, 0, 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._kept:
            self._loop.call_soon(self._flush_when_idle)
        self._kept.append(bytes(data))
        self._size += len(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    # the most turns a write waits for more answers: a handler that waits (a webhook) while
    # requests are queued behind it must not keep the loop turning for long
    MAX_TURNS = 256

    def _flush_when_idle(self) -> None:
        if self._kept and not self._transport.is_closing() and self._turns < self.MAX_TURNS:
            self._turns += 1
            if len(self._waiting()):  # more answers are coming
                self._after_waiting, self._idle = True, 0
                self._loop.call_soon(self._flush_when_idle)
                return
            if self._after_waiting and self._idle < 1:
                # the last request taken is likely being answered in the next turn (its
                # handler runs in a task of its own, started after the request was taken)
                self._idle += 1
                self._loop.call_soon(self._flush_when_idle)
                return
        self._after_waiting, self._idle, self._turns = False, 0, 0
        self.flush()

    def flush(self) -> None:
        """Hand what was kept to the real transport (unless it is closing: then it is lost
        with the connection, as anything written to a closing transport is)."""
        if not self._kept:
            return
        data = self._kept[0] if len(self._kept) == 1 else b"".join(self._kept)
        self._kept, self._size = [], 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._kept, self._size = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # reading, pausing, extra info, is_closing...
        return getattr(self._transport, name)


class CorkedRequestHandler(RequestHandler):
    """aiohttp's request handler on a `CorkedTransport`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's TLS transport is not an asyncio.Transport subclass, only alike)
        def waiting() -> Sized:
            return getattr(self, "_messages", ())

        super().connection_made(CorkedTransport(transport, self._loop, waiting))  # type: ignore[arg-type]


class CorkedServer(web.Server):
    """aiohttp's low-level server whose connections are corked."""

    def __call__(self) -> RequestHandler:
        return CorkedRequestHandler(self, loop=self._loop, **self._kwargs)
