"""Hostile broker inputs through a real instance (issue 11): `attr.get {"name": [1]}` was a
TypeError, a payload nested 100,000 deep a RecursionError. Each is now an error response
(EPROTO) and the broker goes on answering pings meanwhile (bound: see
tests/scheduler/service/test_service_hostile.py)."""

from __future__ import annotations

import errno
import json
import socket

import pytest
from fluxnode.agent.broker.message import Message, StreamDecoder, encode_stream

from fluxnode.testing.instance import Instance
from fluxnode.testing.ping_probe import PingProbe
from fluxnode.testing.waiting import wait_for

PING_BOUND = 1.0


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(2, tmp_path_factory.mktemp("hostile")) as inst:
        yield inst


def raw_request(inst, topic: str, payload: bytes) -> Message:
    """One request with `payload` bytes as they are, over the local socket (the client
    library would refuse to encode them), while pinging the broker."""
    path = inst.uri[len("local://"):]
    frames = Message("request", topic, 0, 7).to_frames()
    frames[2] = payload
    with PingProbe(inst.uri) as probe, socket.socket(socket.AF_UNIX) as s:
        wait_for(lambda: len(probe.latencies) >= 3, 10, what="pings before")
        s.settimeout(60)
        s.connect(path)
        s.sendall(encode_stream(frames))
        dec = StreamDecoder()
        while (got := dec.next()) is None:
            chunk = s.recv(65536)
            assert chunk, "broker closed the connection"
            dec.feed(chunk)
        before = len(probe.latencies)
        wait_for(lambda: len(probe.latencies) >= before + 3, 10, what="pings after")
    assert not probe.errors and probe.worst < PING_BOUND, (probe.errors, probe.worst)
    return Message.from_frames(got)


@pytest.mark.parametrize("name", [[1], {"a": 1}, 7, True])
def test_attr_get_with_a_non_string_name_is_eproto(inst, name):
    msg = raw_request(inst, "attr.get", json.dumps({"name": name}).encode())
    assert msg.errnum == errno.EPROTO
    assert msg.errstr.startswith("name: must be a string, not ")
    assert inst.rpc("attr.get", {"name": "size"})["value"] == "2"


@pytest.mark.parametrize("depth", [257, 100_000])
def test_deeply_nested_payload_is_eproto(inst, depth):
    payload = b'{"a":' * depth + b"1" + b"}" * depth
    msg = raw_request(inst, "broker.ping", payload)
    assert msg.errnum == errno.EPROTO, msg
    assert "nests more than 256 arrays and objects deep" in msg.errstr
    # within the bound, the same shape is fine
    ok = raw_request(inst, "broker.ping", b'{"a":' * 255 + b"1" + b"}" * 255)
    assert ok.errnum == 0


def test_huge_integer_payload_is_eproto(inst):
    msg = raw_request(inst, "broker.ping", b'{"a":' + b"9" * 5000 + b"}")
    assert msg.errnum == errno.EPROTO and "payload is not valid JSON" in msg.errstr
