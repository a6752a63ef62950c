"""The wire format on its own: frames, stream framing, validation errors."""

import errno

import pytest
from fluxnode.agent.broker.message import (
    MAGIC,
    Message,
    MessageError,
    StreamDecoder,
    encode_stream,
)

from fluxnode.commands.ping import parse_target


def test_frames_round_trip_keeps_payload_encoded_until_asked():
    msg = Message("request", "broker.ping", 7, 42, {"pad": "x"}, route=["c1", "0"])
    back = Message.from_frames(msg.to_frames())
    assert back.payload is None and back.encoded_payload == b'{"pad":"x"}'
    assert back.decode_payload() == {"pad": "x"}
    assert (back.type, back.topic, back.nodeid, back.matchtag, back.route) == (
        "request",
        "broker.ping",
        7,
        42,
        ["c1", "0"],
    )


def test_error_response_keeps_route_and_matchtag():
    req = Message("request", "x.y", 3, 9, None, route=["c2", "0"])
    err = req.error(errno.ENOSYS)
    assert (err.type, err.matchtag, err.errnum, err.errstr, err.route) == (
        "response",
        9,
        errno.ENOSYS,
        "ENOSYS",
        ["c2", "0"],
    )


@pytest.mark.parametrize(
    ("frames", "errnum", "text"),
    [
        (
            [MAGIC, b'{"type":"request","topic":"a","matchtag":1}'],
            errno.EPROTO,
            "expected 3 frames",
        ),
        ([b"nope", b"{}", b""], errno.EPROTO, "bad magic"),
        ([MAGIC, b"[1]", b""], errno.EPROTO, "header must be a JSON object"),
        ([MAGIC, b'{"type":"bogus","topic":"a"}', b""], errno.EPROTO, "unknown message type"),
        ([MAGIC, b'{"type":"request"}', b""], errno.EINVAL, "no topic"),
        (
            [MAGIC, b'{"type":"request","topic":"a","nodeid":"x"}', b""],
            errno.EPROTO,
            "must be integers",
        ),
        (
            [MAGIC, b'{"type":"request","topic":"a","route":[1]}', b""],
            errno.EPROTO,
            "route must be a list of strings",
        ),
    ],
)
def test_malformed_frames_raise_message_error(frames, errnum, text):
    with pytest.raises(MessageError) as exc:
        Message.from_frames(frames)
    assert exc.value.errnum == errnum and text in exc.value.errstr


def test_partial_header_is_kept_for_the_error_reply():
    with pytest.raises(MessageError) as exc:
        Message.from_frames([MAGIC, b'{"type":"request","topic":"a","matchtag":5}'])
    assert exc.value.partial["matchtag"] == 5


def test_bad_payload_json_is_eproto():
    msg = Message.from_frames([MAGIC, b'{"type":"request","topic":"a"}', b"{oops"])
    with pytest.raises(MessageError) as exc:
        msg.decode_payload()
    assert exc.value.errnum == errno.EPROTO


def test_stream_decoder_handles_split_and_batched_input():
    a = Message("request", "a.b", 0, 1, {"i": 1}).to_frames()
    b = Message("request", "c.d", 1, 2, None).to_frames()
    data = encode_stream(a) + encode_stream(b)
    dec = StreamDecoder()
    out = []
    for i in range(len(data)):  # one byte at a time
        dec.feed(data[i:i + 1])
        while (f := dec.next()) is not None:
            out.append(f)
    assert out == [a, b]


def test_stream_decoder_rejects_oversize_before_buffering():
    dec = StreamDecoder(max_size=1000)
    dec.feed((5000).to_bytes(4, "big"))
    with pytest.raises(MessageError) as exc:
        dec.next()
    assert exc.value.errnum == errno.EMSGSIZE


@pytest.mark.parametrize(("target", "expected"), [
    ("7", (7, "7", "broker.ping")),
    ("3!sched", (3, "3", "sched.ping")),
    ("any", (-1, "any", "broker.ping")),
    ("upstream", (-2, "upstream", "broker.ping")),
    ("kvs", (-1, "any", "kvs.ping")),
])
def test_ping_targets(target, expected):
    assert parse_target(target) == expected
