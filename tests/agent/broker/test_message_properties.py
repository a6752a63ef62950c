"""Property tests for message framing (issue 11): `Message.from_frames`, payload decoding
and the stream decoder never raise anything but MessageError, and round-trip."""

from __future__ import annotations

import json

from fluxnode.agent.broker.message import (
    MAGIC,
    MAX_JSON_DEPTH,
    TYPES,
    Message,
    MessageError,
    StreamDecoder,
    encode_stream,
    json_depth,
    loads_bounded,
)
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import JSON, PROFILE

HEADER_FIELD = st.sampled_from(["type", "topic", "nodeid", "matchtag", "errnum", "errstr",
                                "route", "seq"])
JSONISH = st.binary(max_size=40) | st.builds(
    lambda parts: "".join(parts).encode(),
    st.lists(st.sampled_from(['{', '}', '[', ']', '"a"', ':', ',', '1', 'null', '"\\u', '9' * 30]),
             max_size=30),
)


@PROFILE
@given(st.sampled_from(TYPES), st.text(min_size=1, max_size=10), st.integers(-2, 2**31),
       st.integers(0, 2**31), st.dictionaries(st.text(max_size=5), JSON, max_size=4),
       st.lists(st.text(max_size=5), max_size=3))
def test_round_trip(mtype, topic, nodeid, matchtag, payload, route):
    msg = Message(mtype, topic, nodeid, matchtag, payload, route=route)
    back = Message.from_frames(msg.to_frames())
    assert (back.type, back.topic, back.nodeid, back.matchtag, back.route) == (
        mtype, topic, nodeid, matchtag, route)
    assert back.decode_payload() == payload


@PROFILE
@given(st.lists(st.binary(max_size=30) | JSONISH, max_size=4),
       st.dictionaries(HEADER_FIELD, JSON, max_size=8))
def test_from_frames_raises_only_message_error(frames, header):
    for candidate in (frames, [MAGIC, *frames[:2]], [MAGIC, json.dumps(header).encode(),
                                                      *frames[:1]]):
        try:
            msg = Message.from_frames(candidate)
            msg.decode_payload()
        except MessageError:
            pass


@PROFILE
@given(JSONISH | st.binary(max_size=60))
def test_payload_decodes_or_is_eproto(payload):
    msg = Message("request", "t", encoded_payload=payload)
    try:
        value = msg.decode_payload()
    except MessageError as exc:
        assert exc.errnum == 71  # EPROTO
        return
    assert value is None or isinstance(value, dict)


@PROFILE
@given(st.integers(0, 3 * MAX_JSON_DEPTH), st.sampled_from(["[", '{"k":']))
def test_depth_bound_is_exact(depth, opener):
    closer = "]" if opener == "[" else "}"
    data = ('{"a":' + opener * depth + "1" + closer * depth + "}").encode()
    assert json_depth(data) >= depth + 1
    msg = Message("request", "t", encoded_payload=data)
    if depth + 1 <= MAX_JSON_DEPTH:
        assert msg.decode_payload()
    else:
        try:
            msg.decode_payload()
            raise AssertionError("accepted")
        except MessageError as exc:
            assert "nests more than" in exc.errstr


@PROFILE
@given(st.lists(st.lists(st.binary(max_size=20), max_size=4), max_size=4),
       st.binary(max_size=30), st.integers(1, 17))
def test_stream_decoder_raises_only_message_error(messages, junk, chunk):
    data = b"".join(encode_stream(m) for m in messages) + junk
    dec = StreamDecoder(max_size=1 << 16)
    got = []
    try:
        for i in range(0, len(data), chunk):
            dec.feed(data[i:i + chunk])
            while (frames := dec.next()) is not None:
                got.append(frames)
    except MessageError:
        return
    assert got[:len(messages)] == messages


OBJECTISH = st.builds(lambda tail, head: head + tail, JSONISH | st.binary(max_size=30),
                      st.sampled_from([b"{", b"{\x00", b"\xef\xbb\xbf{", b""]))


@PROFILE
@given(OBJECTISH | st.builds(lambda v, enc: json.dumps(v, ensure_ascii=False).encode(enc),
                             JSON, st.sampled_from(["utf-8", "utf-16-le", "utf-32-be"])))
def test_loads_bounded_reads_what_json_loads_reads(data):
    """Issue 32's fast path for text opening an object (no encoding sniffing) decodes
    exactly what json.loads(bytes) decodes, and fails where it fails."""
    try:
        expected = ("ok", json.loads(data))
    except (UnicodeDecodeError, ValueError, RecursionError):
        expected = ("error", None)
    try:
        got = ("ok", loads_bounded(data, "payload"))
    except MessageError:
        got = ("error", None)
    if json_depth(data) <= MAX_JSON_DEPTH:
        assert got == expected


@PROFILE
@given(st.dictionaries(st.text(max_size=5), JSON, max_size=4), st.lists(st.text(max_size=5),
                                                                        max_size=3))
def test_frames_hold_the_compact_json_of_json_dumps(payload, route):
    """One shared encoder writes the bytes json.dumps(separators=(",", ":")) writes."""
    msg = Message("request", "t.x", 3, 7, payload, route=route)
    _, header, body = msg.to_frames()
    assert header == json.dumps(msg.header(), separators=(",", ":")).encode()
    assert body == json.dumps(payload, separators=(",", ":")).encode()


# Header fields as a peer may write them: the values our brokers write and what JSON can
# hold besides (escapes, non-ASCII, lone surrogates, long integers, bools, floats, nesting).
HEADER_TEXT = st.text(max_size=6) | st.sampled_from(
    ["", "c1", "0", "broker.ping", 'a"b', "a\\b", "\x00", "\x1f", "\x7f", "é", "\ud800", "\\u"])
HEADER_VALUE = (HEADER_TEXT | st.integers(-(2**70), 2**70) | st.booleans() | st.none()
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.lists(HEADER_TEXT | st.integers(-3, 3) | st.none(), max_size=3))
HEADER_KEYS = ("type", "topic", "nodeid", "matchtag", "errnum", "errstr", "route", "seq")


TYPICAL = {"type": st.sampled_from(TYPES), "topic": HEADER_TEXT,
           "nodeid": st.integers(-2, 2**63), "matchtag": st.integers(0, 10**19),
           "errnum": st.integers(-3, 200), "errstr": HEADER_TEXT,
           "route": st.lists(HEADER_TEXT, max_size=4), "seq": st.integers(-1, 10**18)}
# what a byte inserted into a header may turn it into: an integer with a leading zero,
# a fraction or an exponent, a space, an escape or a quote, a NUL, bytes that are not
# UTF-8 or are a surrogate's
TWEAKS = [b"0", b"-", b"+", b".5", b"e1", b" ", b"\\", b'"', b"\x00", b"\xff", b"\xed\xa0\x80",
          b",", b"]", b"}", b"[", b"null"]


@st.composite
def header_texts(draw):
    """Header frames: half in `header_bytes`' form from the values a message holds (the
    short reading's case), half from anything JSON holds, in any key order or spacing (the
    two readings must agree on what they refuse); a third of them then changed by a few
    bytes inserted, replaced or cut."""
    header = {}
    canonical = draw(st.booleans())
    for key in HEADER_KEYS:
        if canonical:
            if key in ("type", "topic", "nodeid", "matchtag") or draw(st.booleans()):
                header[key] = draw(TYPICAL[key])
        elif draw(st.booleans()) or key in ("type", "topic"):
            header[key] = draw(TYPICAL[key] | HEADER_VALUE)
    if canonical and ("errnum" in header) != ("errstr" in header):
        header.pop("errnum", None)
        header.pop("errstr", None)
    if not canonical and draw(st.booleans()):
        header = dict(draw(st.permutations(list(header.items()))))
    separators = (",", ":") if canonical else draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(header, separators=separators, ensure_ascii=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 2)) == 0:
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.sampled_from(TWEAKS) | st.binary(max_size=2)) + data[
            i + draw(st.integers(0, 2)):]
    return data


def _read(read, frames):
    try:
        msg = read(frames)
    except MessageError as exc:
        return ("error", exc.errnum, exc.errstr, exc.partial)
    return ("ok", msg, type(msg.nodeid), type(msg.matchtag), msg.encoded_payload)


@PROFILE
@given(header_texts(), st.binary(max_size=8))
@example(b'{"type":"request","topic":"","nodeid":1,"matchtag":2}', b"")  # no topic
@example(b'{"type":"response","topic":"","nodeid":1,"matchtag":2}', b"{}")
@example(b'{"type":"request","topic":"t","nodeid":01,"matchtag":2}', b"")  # a leading zero
@example(b'{"type":"request","topic":"t","nodeid":-0,"matchtag":2,"seq":1e3}', b"")
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["a\\"b"]}', b"")
@example(b'{"type":"request","topic":"\xed\xa0\x80","nodeid":1,"matchtag":2}', b"")
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":[]}', b"")
@example(b'{"type":"response","topic":"t","nodeid":1,"matchtag":2,"errnum":2,"errstr":null}',
         b"")
def test_header_short_reading_is_the_json_decoders(header, payload):
    """Issue 32: `from_frames` reads a header in `header_bytes`' form with a regular
    expression; for every header, in that form or not, it gives what the JSON decoder and
    the checks after it give (`from_frames_full`): the same Message, or the same error."""
    frames = [MAGIC, header, payload]
    got = _read(Message.from_frames, frames)
    assert repr(got) == repr(_read(Message.from_frames_full, frames))
    if got[0] == "ok":  # and written again as json.dumps writes it
        msg = got[1]
        assert msg.header_bytes() == json.dumps(msg.header(), separators=(",", ":")).encode()



class _Str(str):
    pass


MESSAGE_FIELD = (HEADER_TEXT | st.integers(-(2**70), 2**70) | st.booleans() | st.none()
                 | st.builds(_Str, HEADER_TEXT) | st.lists(HEADER_TEXT, max_size=3)
                 | st.tuples(HEADER_TEXT) | st.lists(st.integers(-3, 3), min_size=1, max_size=2))


TYPICAL_MESSAGE = {"type": "request", "topic": "t", "nodeid": 1, "matchtag": 2, "errnum": 71,
                   "errstr": "x", "route": ["c1"], "seq": None}
MESSAGE_TYPICAL = dict(TYPICAL, errnum=st.integers(0, 200), seq=st.none() | TYPICAL["seq"],
                       errstr=st.none() | HEADER_TEXT)


@PROFILE
@given(st.fixed_dictionaries(MESSAGE_TYPICAL), st.sampled_from([None, *HEADER_KEYS]),
       MESSAGE_FIELD)
@example(dict(TYPICAL_MESSAGE, errnum=0), "errnum", True)
@example(TYPICAL_MESSAGE, "nodeid", True)
@example(TYPICAL_MESSAGE, "seq", False)
@example(TYPICAL_MESSAGE, "route", "abc")
@example(TYPICAL_MESSAGE, "route", ("a", "b"))
@example(TYPICAL_MESSAGE, "route", [1])
@example(TYPICAL_MESSAGE, "topic", None)
@example(TYPICAL_MESSAGE, "errstr", _Str('x"y'))
def test_header_bytes_are_json_dumps(fields, odd, value):
    """Issue 32: `header_bytes` writes a header itself when its fields have a message's
    types; whatever they hold (here all a message's types, or one field `odd` anything),
    the bytes (or the TypeError) are json.dumps's."""
    fields = dict(fields)
    if odd is not None:
        fields[odd] = value
    msg = Message(**fields)
    try:
        expected = json.dumps(msg.header(), separators=(",", ":")).encode()
    except TypeError:
        expected = TypeError
    try:
        got = msg.header_bytes()
    except TypeError:
        got = TypeError
    assert got == expected


def _dumps_or_type_error(msg):
    try:
        return json.dumps(msg.header(), separators=(",", ":")).encode()
    except TypeError:
        return TypeError


def _header_bytes_or_type_error(msg):
    try:
        return msg.header_bytes()
    except TypeError:
        return TypeError


FORWARD_STEPS = st.lists(st.one_of(
    st.tuples(st.just("append"), HEADER_TEXT | st.integers(-3, 3) | st.none()),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("set"), st.tuples(st.integers(-4, 4), HEADER_TEXT | st.integers(0, 3))),
    st.tuples(st.just("route"), st.lists(HEADER_TEXT, max_size=3) | st.tuples(HEADER_TEXT)),
    st.tuples(st.sampled_from(["type", "topic", "nodeid", "matchtag", "errnum", "errstr",
                               "seq"]), MESSAGE_FIELD | st.integers(-3, 3) | st.none()),
), max_size=3)


@PROFILE
@given(header_texts(), FORWARD_STEPS)
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["c1"]}',
         [("append", "0")])
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"seq":5}', [("append", "0")])
@example(b'{"type":"response","topic":"t","nodeid":1,"matchtag":2,"route":["c1","0"]}',
         [("pop", None)])
@example(b'{"type":"response","topic":"t","nodeid":1,"matchtag":2,"route":["c1"],"seq":5}',
         [("pop", None)])
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["c1"]}',
         [("nodeid", True)])
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["c1"]}',
         [("append", 7)])
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["c1"]}',
         [("set", (0, "c2"))])
@example(b'{"type":"request","topic":"t","nodeid":1,"matchtag":2,"route":["c1"]}',
         [("set", (0, "c2")), ("append", "0")])
@example(b'{"type":"response","topic":"t","nodeid":1,"matchtag":2,"route":["c1","0"]}',
         [("set", (0, "c2")), ("pop", None)])
@example(b'{"type":"request","topic":"t","nodeid":-0,"matchtag":2}', [])  # read as 0
@example(b'{"type":"response","topic":"t","nodeid":1,"matchtag":2,"errnum":0,"errstr":"x"}',
         [])  # written without errnum 0
@example(b'{"type":"request","topic":"\xc3\xa9","nodeid":1,"matchtag":2}', [])  # escaped
def test_forwarded_header_is_json_dumps(header, steps):
    """Issue 32: a forwarding broker adds or removes a hop of a message it read and writes
    its header again; after any changes to a message read (hops added, removed or changed,
    the route replaced, any other field set to anything), `header_bytes` gives json.dumps's
    bytes of the message as it is (or its TypeError)."""
    try:
        msg = Message.from_frames([MAGIC, header, b""])
    except MessageError:
        return
    for what, value in steps:
        if what in ("append", "pop", "set") and type(msg.route) is not list:
            continue  # (a tuple put there by a step before)
        if what == "append":
            msg.route.append(value)
        elif what == "pop":
            if msg.route:
                msg.route.pop()
        elif what == "set":
            if msg.route:
                msg.route[value[0] % len(msg.route)] = value[1]
        elif what == "route":
            msg.route = value
        else:
            setattr(msg, what, value)
    assert _header_bytes_or_type_error(msg) == _dumps_or_type_error(msg)
