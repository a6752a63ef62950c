"""The broker's reactor (agent/broker/reactor.py) with real ZeroMQ sockets and pipes.

ZeroMQ sockets are watched through their edge-triggered ZMQ_FD: a message must not be left
waiting because a send or receive consumed the descriptor's signal. The oracle for what a
handler is told about a plain descriptor is libzmq's own zmq_poll on the same descriptor.
Deadlines are timers of the reactor under test: a lost wakeup shows as the deadline
firing first.
"""

from __future__ import annotations

import os

import pytest
import zmq
from fluxnode.agent.broker import zmq_core
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.zframes import recv_frames, send_frames

DEADLINE = 30.0  # seconds; only reached when a wakeup was lost


@pytest.fixture
def pair():
    ctx = zmq_core.Context(io_threads=1)
    a, b = zmq_core.Socket(ctx, zmq_core.PAIR), zmq_core.Socket(ctx, zmq_core.PAIR)
    a.bind("inproc://reactor")
    b.connect("inproc://reactor")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def _reactor(_tmp_path) -> Reactor:
    return Reactor(BrokerLog("test", 3))


def test_a_burst_read_one_message_per_wakeup_is_all_read(pair, tmp_path):
    """The handler takes one message per call and answers on the same socket (which may
    consume the ZMQ_FD signal for the rest): every message is still handled."""
    a, b = pair
    reactor = _reactor(tmp_path)
    got: list[bytes] = []
    expired = []

    def on_b(revents: int) -> None:
        assert revents == zmq_core.POLLIN
        frames = recv_frames(b, ready=True)
        if frames is not None:
            got.append(frames[0])
            send_frames(b, [b"ack"])
            if len(got) == 200:
                reactor.stop()

    reactor.add(b, zmq_core.POLLIN, on_b)
    reactor.call_later(DEADLINE, lambda: (expired.append(True), reactor.stop()))
    for i in range(200):
        send_frames(a, [str(i).encode()])
    reactor.run()
    assert not expired, f"{len(got)} of 200 messages handled before the deadline"
    assert got == [str(i).encode() for i in range(200)]


def test_messages_sent_from_a_timer_and_answered_are_seen(pair, tmp_path):
    """Ping-pong between two sockets in one reactor, started from a timer: each answer
    arrives on a socket that was just used to send."""
    a, b = pair
    reactor = _reactor(tmp_path)
    rounds: list[int] = []
    expired = []

    def on_a(_revents: int) -> None:
        while (frames := recv_frames(a)) is not None:
            n = int(frames[0])
            rounds.append(n)
            if n == 100:
                reactor.stop()
                return
            send_frames(a, [str(n + 1).encode()])

    def on_b(_revents: int) -> None:
        while (frames := recv_frames(b)) is not None:
            send_frames(b, frames)

    reactor.add(a, zmq_core.POLLIN, on_a)
    reactor.add(b, zmq_core.POLLIN, on_b)
    reactor.call_later(0.001, lambda: send_frames(a, [b"0"]))
    reactor.call_later(DEADLINE, lambda: (expired.append(True), reactor.stop()))
    reactor.run()
    assert not expired, f"stopped after {len(rounds)} rounds"
    assert rounds == list(range(101))


def test_a_descriptor_is_reported_as_zmq_poll_reports_it(tmp_path):
    """Data, then the writer closed (POLLIN and POLLHUP from poll(2)): the handler's bits are
    libzmq's zmq_poll's for the same descriptor."""
    reactor = _reactor(tmp_path)
    r, w = os.pipe()
    seen: list[int] = []

    def on_r(revents: int) -> None:
        seen.append(revents)
        reactor.stop()

    try:
        reactor.add(r, zmq_core.POLLIN, on_r)
        for step in (lambda: os.write(w, b"x"), lambda: os.close(w)):
            step()
            reactor.run()
            ((_fd, expected),) = zmq.zmq_poll([(r, zmq.POLLIN)], 0)
            assert seen[-1] == int(expected)
        assert seen[-1] & zmq_core.POLLERR  # the hang-up, as zmq_poll gives it
    finally:
        os.close(r)


def test_a_removed_socket_is_not_handled(pair, tmp_path):
    """A message waits on a socket no longer watched; a pipe made readable at the same time
    ends the loop after one wakeup, in which the removed handler must not run."""
    a, b = pair
    reactor = _reactor(tmp_path)
    handled = []
    reactor.add(b, zmq_core.POLLIN, lambda _ev: handled.append(recv_frames(b)))
    reactor.remove(b)
    send_frames(a, [b"x"])
    r, w = os.pipe()
    try:
        reactor.add(r, zmq_core.POLLIN, lambda _ev: reactor.stop())
        os.write(w, b"x")
        reactor.run()
    finally:
        os.close(r)
        os.close(w)
    assert handled == []
    assert zmq.zmq_poll([(b, zmq.POLLIN)], DEADLINE * 1000) == [(b, zmq.POLLIN)]
    assert recv_frames(b) == [b"x"]


def test_a_signal_without_a_message_reaches_the_handler_and_the_message_after_it(tmp_path):
    """ZMQ_FD also fires for a command that brings no message: a new peer's pipe attached to
    a ROUTER (libzmq's `bind` command to the socket). The reactor hands the input-only
    handler POLLIN at once, without asking ZMQ_EVENTS; the handler finds nothing to read,
    and the message the peer sends only then is still handled."""
    ctx = zmq_core.Context(io_threads=1)
    router = zmq_core.Socket(ctx, zmq_core.ROUTER)
    dealer = zmq_core.Socket(ctx, zmq_core.DEALER)
    reactor = _reactor(tmp_path)
    calls: list[list[bytes] | None] = []
    expired = []
    r, w = os.pipe()

    def on_router(revents: int) -> None:
        assert revents == zmq_core.POLLIN
        frames = recv_frames(router, ready=True)
        calls.append(frames)
        if frames is None and len(calls) == 1:
            send_frames(dealer, [b"after"])  # the peer is attached now
        elif frames is not None:
            reactor.stop()

    try:
        router.bind("tcp://127.0.0.1:*")
        endpoint = router.get(zmq.LAST_ENDPOINT).decode()
        reactor.add(router, zmq_core.POLLIN, on_router)
        # The dealer connects from a pipe's handler, which runs only once the loop polls: by
        # then the loop has asked the router (just added) for ZMQ_EVENTS, so the attach can
        # only come while it sleeps. Connected from a timer instead, which runs before that
        # first question, the attach could be done by the time it is asked (the machine
        # loaded): ZMQ_EVENTS then takes the command and its signal, rightly finds no
        # message, and the handler that would send one is never called (3 runs in 1,000).
        def connect(_revents: int) -> None:
            reactor.remove(r)
            dealer.connect(endpoint)

        reactor.add(r, zmq_core.POLLIN, connect)
        os.write(w, b"x")
        reactor.call_later(DEADLINE, lambda: (expired.append(True), reactor.stop()))
        reactor.run()
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()
        for fd in (r, w):
            os.close(fd)
    assert not expired, f"handler calls before the deadline: {calls}"
    assert calls[0] is None  # the attach alone
    assert calls[-1] is not None and calls[-1][1:] == [b"after"]
