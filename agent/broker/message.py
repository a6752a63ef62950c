"""The one message format spoken on the TBON, the local connector and by clients.

Modeled on Flux RFC 3: a message has a type, a topic, a target rank (nodeid),
a matchtag pairing responses with requests, a JSON payload, an errnum/errstr
for failed responses, and a route stack that lets responses retrace the path
of their request hop by hop (RFC 6 style).

On ZeroMQ a message is three frames ``[MAGIC, header JSON, payload]``; the
payload stays a separate frame so brokers that only forward it never parse it.
On a byte stream (the local Unix socket) the same frames are length-prefixed:
``u32 total`` then per frame ``u32 length`` + bytes.

Every hop reads a message's header and writes it again, so both are done without the JSON
machinery where they can be (issue 32): `header_bytes` writes the compact JSON of a header
whose fields have a message's types itself, and `from_frames` reads a header in exactly
that form with one regular expression; anything else goes through the JSON encoder and
decoder. The bytes and the Messages are the same either way (the property tests hold
them to it). A forwarding broker's instructions per ping went from 293,000 to 262,000.
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
from fluxnode.agent.broker.jsonwire import quote as _quote

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

    def header_bytes(self) -> bytes:
        """The header frame: the compact JSON of `header()`, byte for byte.

        Every message a broker sends has its header written, and the C encoder's set-up and
        the dict it is given cost more than the text (14,000 instructions per header,
        callgrind): a header whose fields have the types a message holds (str, int, a list
        of str) is written here with one C call per string (`_quote`, json's own escaping),
        the same text json.dumps writes; any other (a subclass, a tuple route, a bool) goes
        through the encoder as before.
        """
        nodeid, matchtag, errnum, route, seq = (self.nodeid, self.matchtag, self.errnum,
                                                self.route, self.seq)
        if type(nodeid) is int and type(matchtag) is int and type(errnum) is int and (
                seq is None or type(seq) is int) and type(route) is list:
            try:
                text = (f'{{"type":{_quote(self.type)},"topic":{_quote(self.topic)},'
                        f'"nodeid":{nodeid},"matchtag":{matchtag}')
                if errnum:
                    errstr = self.errstr
                    text += (f',"errnum":{errnum},"errstr":'
                             f'{"null" if errstr is None else _quote(errstr)}')
                if route:
                    text += f',"route":[{",".join(map(_quote, route))}]'
                if seq is not None:
                    text += f',"seq":{seq}'
                return (text + "}").encode()
            except TypeError:  # a field of another type: the encoder says what it makes of it
                pass
        return _encode(self.header()).encode()

    def to_frames(self) -> list[bytes]:
        return [MAGIC, self.header_bytes(), self.payload_bytes()]

    @classmethod
    def from_frames(cls, frames: list[bytes]) -> Message:
        """Decode and validate a frame list; the payload is left encoded."""
        if len(frames) == 3 and type(frames[1]) is bytes and frames[0] == MAGIC:
            found = _HEADER(frames[1])
            if found is not None:
                mtype, topic, nodeid, matchtag, errnum, errstr, route, seq = found.groups()
                if topic or mtype == b"response":
                    try:
                        return cls(
                            _TYPE_NAMES[mtype],
                            topic.decode(),
                            int(nodeid),
                            int(matchtag),
                            None,
                            0 if errnum is None else int(errnum),
                            None if errstr is None else errstr.decode(),
                            [] if route is None else route.decode().split('","'),
                            None if seq is None else int(seq),
                            frames[2] or None,
                        )
                    except UnicodeDecodeError:
                        pass  # (not UTF-8: the full decode says what is wrong)
        return cls.from_frames_full(frames)

    @classmethod
    def from_frames_full(cls, frames: list[bytes]) -> Message:
        """`from_frames` through the JSON decoder, whatever the header's form: what
        `from_frames` does with any header `_HEADER` does not match, and gives the same
        Message for one it does (the property tests compare the two)."""
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


# A header as `header_bytes` writes it (keys in its order, no white space, strings without
# escapes, integers of at most 18 digits), read with one regular expression instead of the
# JSON scanner (10,800 instructions per header, callgrind; the dict it builds and the checks
# of every field after it as much again). What it matches is JSON that json.loads reads to
# exactly these fields, so `from_frames` gives the same Message either way; anything else
# (a peer's spacing, an escape, an error without errstr, a longer integer) takes the full
# decode and its checks. The test holding the two to each other:
# tests/agent/broker/test_message_properties.py.
_JSON_INT = rb"(-?(?:0|[1-9][0-9]{0,17}))"
_JSON_STR = rb'"([^"\\\x00-\x1f]*)"'
_HEADER = re.compile(
    rb'\{"type":"(request|response|event|control)","topic":' + _JSON_STR
    + rb',"nodeid":' + _JSON_INT + rb',"matchtag":' + _JSON_INT
    + rb'(?:,"errnum":' + _JSON_INT + rb',"errstr":' + _JSON_STR + rb")?"
    + rb'(?:,"route":\["((?:[^"\\\x00-\x1f]*)(?:","[^"\\\x00-\x1f]*)*)"\])?'
    + rb'(?:,"seq":' + _JSON_INT + rb")?\}"
).fullmatch
_TYPE_NAMES = {t.encode(): t for t in TYPES}


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
    """Length-prefix frames for a byte stream.

    (One join of the lengths and the frames: a generator joined, with each frame copied
    once to prefix it and the body once more to prefix that, ran a Python frame step per
    frame; every request a client sends and every answer the connector writes pass here.)
    """
    parts = [b""]
    size = 0
    for frame in frames:
        n = len(frame)
        parts += (_U32.pack(n), frame)
        size += 4 + n
    parts[0] = _U32.pack(size)
    return b"".join(parts)


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
