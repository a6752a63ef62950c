"""The one message format spoken on the TBON, the local connector and by clients.

Modeled on Flux RFC 3: a message has a type, a topic, a target rank (nodeid),
a matchtag pairing responses with requests, a JSON payload, an errnum/errstr
for failed responses, and a route stack that lets responses retrace the path
of their request hop by hop (RFC 6 style).

On ZeroMQ a message is three frames ``[MAGIC, header JSON, payload]``; the
payload stays a separate frame so brokers that only forward it never parse it.
On a byte stream (the local Unix socket) the same frames are length-prefixed:
``u32 total`` then per frame ``u32 length`` + bytes.
"""

from __future__ import annotations

import errno
import itertools
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from fluxnode.agent.broker.jsonwire import decode as _decode
from fluxnode.agent.broker.jsonwire import encode as _encode

MAGIC = b"FLUXNODE1"
NODEID_ANY = -1
NODEID_UPSTREAM = -2
MAX_MESSAGE_SIZE = 64 * 1024 * 1024
#: Deepest nesting of JSON arrays and objects accepted in a header or payload (EPROTO
#: beyond): handlers walk payloads recursively, and 100,000 levels raised RecursionError.
MAX_JSON_DEPTH = 256
TYPES = ("request", "response", "event", "control")
_U32 = struct.Struct("!I")
_STR_ONLY = frozenset((str,))
_BYTES = (bytes, bytearray, memoryview)  # (a tuple: `bytes | bytearray` builds a union per call)


class MessageError(Exception):
    """A message that cannot be decoded; `partial` carries what could be read (for an error
    reply)."""

    def __init__(self, errnum: int, errstr: str, partial: dict[str, Any] | None = None) -> None:
        super().__init__(errstr)
        self.errnum = errnum
        self.errstr = errstr
        self.partial = partial or {}


class ServiceError(Exception):
    """Raised by a service handler to answer a request with an error response."""

    def __init__(self, errnum: int, errstr: str | None = None) -> None:
        self.errnum = errnum
        self.errstr = errstr or errno.errorcode.get(errnum, f"error {errnum}")
        super().__init__(self.errstr)


@dataclass
class Message:
    """One broker message (RFC 3): a request, response, event or control, its route and
    its payload, decoded or still as received."""

    type: str
    topic: str
    nodeid: int = NODEID_ANY
    matchtag: int = 0
    payload: dict | None = None
    errnum: int = 0
    errstr: str | None = None
    route: list[str] = field(default_factory=list)
    seq: int | None = None
    # Payload bytes as received and not yet parsed (forwarders never parse them).
    encoded_payload: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def request(
        cls, topic: str, payload: dict | None = None, nodeid: int = 0, matchtag: int = 0
    ) -> Message:
        return cls("request", topic, nodeid, matchtag, payload)

    def response(self, payload: dict | None = None) -> Message:
        return Message(
            "response", self.topic, self.nodeid, self.matchtag, payload, route=list(self.route)
        )

    def error(self, errnum: int, errstr: str | None = None) -> Message:
        errstr = errstr or errno.errorcode.get(errnum, f"error {errnum}")
        return Message(
            "response",
            self.topic,
            self.nodeid,
            self.matchtag,
            None,
            errnum,
            errstr,
            list(self.route),
        )

    def decode_payload(self) -> dict | None:
        """Parse the raw payload (once); bad JSON, JSON nested deeper than MAX_JSON_DEPTH or
        a non-object raises MessageError(EPROTO)."""
        if self.payload is None and self.encoded_payload:
            value = loads_bounded(self.encoded_payload, "payload")
            if not isinstance(value, dict):
                raise MessageError(errno.EPROTO, "payload must be a JSON object")
            self.payload = value
            self.encoded_payload = None
        return self.payload

    def payload_bytes(self) -> bytes:
        if self.payload is not None:
            return _encode(self.payload).encode()
        return self.encoded_payload or b""

    def header(self) -> dict[str, Any]:
        h: dict[str, Any] = {
            "type": self.type,
            "topic": self.topic,
            "nodeid": self.nodeid,
            "matchtag": self.matchtag,
        }
        if self.errnum:
            h["errnum"] = self.errnum
            h["errstr"] = self.errstr
        if self.route:
            h["route"] = self.route
        if self.seq is not None:
            h["seq"] = self.seq
        return h

    def to_frames(self) -> list[bytes]:
        return [
            MAGIC,
            _encode(self.header()).encode(),
            self.payload_bytes(),
        ]

    @classmethod
    def from_frames(cls, frames: list[bytes]) -> Message:
        """Decode and validate a frame list; the payload is left encoded."""
        if not frames or frames[0] != MAGIC:
            raise MessageError(errno.EPROTO, "bad magic frame (not a fluxnode message)")
        h = loads_bounded(frames[1], "header") if len(frames) > 1 else None
        if len(frames) != 3:
            raise MessageError(errno.EPROTO, f"expected 3 frames, got {len(frames)}", _partial(h))
        if not isinstance(h, dict):
            raise MessageError(errno.EPROTO, "header must be a JSON object")
        mtype, topic = h.get("type"), h.get("topic")
        if mtype not in TYPES:
            raise MessageError(errno.EPROTO, f"unknown message type {mtype!r}", _partial(h))
        if not isinstance(topic, str) or (not topic and mtype != "response"):
            raise MessageError(errno.EINVAL, "message has no topic", _partial(h))
        nodeid, matchtag = h.get("nodeid", NODEID_ANY), h.get("matchtag", 0)
        route, errnum, seq = h.get("route", []), h.get("errnum", 0), h.get("seq")
        if (
            not isinstance(nodeid, int)
            or not isinstance(matchtag, int)
            or not isinstance(errnum, int)
        ):
            raise MessageError(
                errno.EPROTO, "nodeid, matchtag and errnum must be integers", _partial(h)
            )
        if type(route) is not list or not set(map(type, route)) <= _STR_ONLY:
            # (exact types: json.loads makes no subclasses; the set of the entries' types is
            # made in C, where a generator ran a Python frame step per hop of the route)
            raise MessageError(errno.EPROTO, "route must be a list of strings", _partial(h))
        errstr = h.get("errstr")
        return cls(
            mtype,
            topic,
            nodeid,
            matchtag,
            None,
            errnum,
            errstr if isinstance(errstr, str) else None,
            route,
            seq if isinstance(seq, int) else None,
            frames[2] or None,
        )


def _partial(h: Any) -> dict[str, Any]:
    """What an error reply can use of a header that failed a check (built only then)."""
    if not isinstance(h, dict):
        return {}
    return {k: h[k] for k in ("type", "topic", "matchtag", "route", "nodeid") if k in h}


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS_ONLY = bytes(range(256)).translate(None, b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(data: bytes) -> int:
    """How deeply the arrays and objects of JSON text `data` nest (an upper bound for
    invalid JSON), computed without recursion and mostly in C."""
    opened = data.count(b"[") + data.count(b"{")
    if opened <= MAX_JSON_DEPTH:
        return opened  # (fast path: cannot be deeper)
    brackets = _JSON_STRING.sub(b"", data).translate(None, _BRACKETS_ONLY)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads_bounded(data: bytes, what: str) -> Any:
    """json.loads of a header or payload frame; MessageError(EPROTO) naming `what` for
    anything that is not JSON nested at most MAX_JSON_DEPTH deep."""
    if not isinstance(data, _BYTES):
        raise MessageError(errno.EPROTO, f"{what} is not a byte string")
    if type(data) is not bytes:
        data = bytes(data)
    # (no text of at most MAX_JSON_DEPTH bytes can nest deeper, and most headers and
    # payloads are: not counted, two scans of the frame less per message)
    if len(data) > MAX_JSON_DEPTH and json_depth(data) > MAX_JSON_DEPTH:
        raise MessageError(
            errno.EPROTO, f"{what} nests more than {MAX_JSON_DEPTH} arrays and objects deep"
        )
    try:
        if data[:1] == b"{" and data[1:2] != b"\0":
            # what json.loads(bytes) does for text that opens an object, without its
            # encoding sniffing: no UTF-16/32 text and no BOM begins with `{` then a non-NUL
            return _decode(data.decode("utf-8", "surrogatepass"))
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError also covers integers of more than 4300 digits
        raise MessageError(errno.EPROTO, f"{what} is not valid JSON: {exc}") from None


def encode_stream(frames: list[bytes]) -> bytes:
    """Length-prefix frames for a byte stream."""
    body = b"".join(_U32.pack(len(f)) + f for f in frames)
    return _U32.pack(len(body)) + body


class StreamDecoder:
    """Incremental decoder of length-prefixed frame lists (the local connector's framing)."""

    def __init__(self, max_size: int = MAX_MESSAGE_SIZE) -> None:
        self.buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        self.buf += data

    def next(self) -> list[bytes] | None:
        """Return the next complete frame list, None if incomplete; MessageError(EMSGSIZE/EPROTO) if
        bad."""
        if len(self.buf) < 4:
            return None
        (total,) = _U32.unpack_from(self.buf, 0)
        if total > self.max_size:
            raise MessageError(
                errno.EMSGSIZE, f"message of {total} bytes exceeds the {self.max_size} byte limit"
            )
        if len(self.buf) < 4 + total:
            return None
        body = bytes(self.buf[4 : 4 + total])
        del self.buf[: 4 + total]
        frames, pos = [], 0
        while pos < total:
            if pos + 4 > total:
                raise MessageError(errno.EPROTO, "truncated frame length")
            (n,) = _U32.unpack_from(body, pos)
            pos += 4
            if pos + n > total:
                raise MessageError(errno.EPROTO, "frame length exceeds message")
            frames.append(body[pos : pos + n])
            pos += n
        return frames
