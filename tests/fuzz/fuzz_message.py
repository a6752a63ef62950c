"""Fuzz target: the message decoder every peer reaches (local connector stream framing,
TBON frames, JSON header and payload). Allowed outcome: a Message, or MessageError."""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).parent))
with atheris.instrument_imports():
    from fluxnode.agent.broker.message import (
        Message,
        MessageError,
        StreamDecoder,
        encode_stream,
    )

from common import run  # noqa: E402

MAX = 1 << 20  # a small limit so oversize paths are reached quickly


def one_input(data: bytes) -> None:
    decoder = StreamDecoder(MAX)
    decoder.feed(data)
    while True:
        try:
            frames = decoder.next()
        except MessageError:
            return  # the stream cannot be resynchronized: the connector hangs up
        if frames is None:
            return
        try:
            msg = Message.from_frames(frames)
            msg.decode_payload()
            msg.to_frames()
        except MessageError:
            continue  # answered with an error; the stream goes on


def seeds() -> list[bytes]:
    msgs = [
        Message.request("broker.ping", {"seq": 1, "pad": "pp"}, nodeid=3, matchtag=7),
        Message.request("sched.alloc", {"jobspec": {"version": 1}, "labels": {"a": "b"}}),
        Message("response", "attr.get", 0, 2, None, 2, "no such attribute"),
        Message("event", "heartbeat", -1, 0, {"seq": [1, 2, {"x": None}]}),
        Message("control", "hello", 0, 0, {"rank": 1, "status": "full", "online": [1, 3]}),
    ]
    return [encode_stream(m.to_frames()) for m in msgs] + [
        b"".join(encode_stream(m.to_frames()) for m in msgs)]


if __name__ == "__main__":
    run(one_input, seeds)
