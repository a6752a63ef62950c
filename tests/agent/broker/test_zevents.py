"""ZMQ_EVENTS asked of libzmq directly (agent/broker/zevents.py, _zevents.c) against pyzmq's
own `Socket.get(zmq.EVENTS)`, the oracle, on real sockets in each state a broker meets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import zmq
from fluxnode.agent.broker import zevents, zmq_core
from fluxnode.agent.broker.zframes import recv_frames

direct = pytest.importorskip("fluxnode.agent.broker._zevents",
                             reason="built without a C compiler: zevents asks pyzmq")


@pytest.fixture
def ctx():
    context = zmq_core.Context(io_threads=1)
    yield context
    context.term()


def test_the_direct_call_is_chosen_where_it_is_built():
    assert zevents.DIRECT and zevents.events is direct.events


def test_each_state_is_answered_as_pyzmq_answers(ctx):
    router = zmq_core.Socket(ctx, zmq_core.ROUTER)
    dealer = zmq_core.Socket(ctx, zmq_core.DEALER)
    seen = []
    try:
        router.bind("inproc://zevents")

        def same(sock) -> None:
            expected = sock.get(zmq.EVENTS)
            assert zevents.events(sock) == expected
            seen.append(expected)

        same(router)  # no peer: nothing to read, a ROUTER may always send
        same(dealer)  # not connected: nothing either way
        dealer.connect("inproc://zevents")
        same(dealer)
        dealer.send(b"ping")
        same(router)  # a message waiting
        assert recv_frames(router) is not None
        same(router)
    finally:
        router.close(0)
        dealer.close(0)
    assert zmq.POLLIN | zmq.POLLOUT in seen and zmq.POLLOUT in seen  # the states were met


def test_a_closed_socket_is_left_to_pyzmq(ctx):
    """Not asked of libzmq (its handle is gone): pyzmq's own error, as its get raises it."""
    sock = zmq_core.Socket(ctx, zmq_core.PAIR)
    sock.close(0)
    with pytest.raises(zmq.ZMQError) as expected:
        sock.get(zmq.EVENTS)
    with pytest.raises(zmq.ZMQError) as got:
        zevents.events(sock)
    assert got.value.errno == expected.value.errno


def test_pure_python_asks_pyzmq():
    out = subprocess.run(
        [sys.executable, "-c", "from fluxnode.agent.broker import zevents; "
         "print(zevents.DIRECT, zevents.events.__name__)"],
        env={**os.environ, "FLUXNODE_PURE_PYTHON": "1"}, capture_output=True, text=True,
        check=True, timeout=60).stdout.split()
    assert out == ["False", "_asked_of_pyzmq"]
