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
from hypothesis import given
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
