"""Multipart messages through `zframes` (issue 32: the broker's hot path below pyzmq's
sugar): whole messages in order, None on an empty socket, errors as send_multipart's."""

from __future__ import annotations

import pytest
import zmq
from fluxnode.agent.broker.zframes import recv_frames, send_frames

from fluxnode.testing.waiting import wait_for


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://zframes")
    b.connect("inproc://zframes")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def test_an_empty_socket_gives_none(pair):
    _, b = pair
    assert recv_frames(b) is None


def test_a_socket_said_ready_that_is_not_gives_none(pair):
    _, b = pair
    assert recv_frames(b, ready=True) is None


def test_a_socket_said_ready_gives_its_message_whole(pair):
    a, b = pair
    send_frames(a, [b"a", b"", b"c"])
    wait_for(lambda: zmq.zmq_poll([(b, zmq.POLLIN)], 0) != [], 10, what="b to be readable")
    assert recv_frames(b, ready=True) == [b"a", b"", b"c"]
    assert recv_frames(b, ready=True) is None


def test_messages_come_whole_and_in_order(pair):
    a, b = pair
    sent = [[b"one"], [b"FLUXNODE1", b"", b"x" * 100_000], [b"a", b"b", b"c", b"d"]]
    for frames in sent:
        send_frames(a, frames)
    got: list[list[bytes]] = []

    def all_in() -> bool:
        frames = recv_frames(b)
        if frames is not None:
            got.append(frames)
        return len(got) == len(sent)

    wait_for(all_in, 10, what="three messages")
    assert got == sent
    assert recv_frames(b) is None


def test_a_router_peer_it_does_not_know_is_an_error_as_with_send_multipart():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    try:
        with pytest.raises(zmq.ZMQError) as exc:
            send_frames(router, [b"nobody", b"x"])
        assert exc.value.errno == zmq.EHOSTUNREACH
    finally:
        router.close(0)
        ctx.term()
