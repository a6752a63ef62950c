"""The TBON sockets' options, set below pyzmq's sugar (zoptions, issue 32), are the ones
flux-config-tbon(5)'s [tbon] values and the overlay's own settings ask for. The oracle is
libzmq itself: each option read back with pyzmq's `getsockopt`."""

from __future__ import annotations

import pytest
import zmq
from fluxnode.agent.broker.overlay import HANDSHAKE_TIMEOUT, TbonParams
from fluxnode.agent.broker.zoptions import set_options
from fluxnode.broker_conf import certificate


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_tune_sets_every_tbon_option(ctx):
    params = TbonParams(torpid_min=5, torpid_max=30, tcp_user_timeout=20, connect_timeout=2.5,
                        hwm=1000, keepalive_count=4, keepalive_idle=60, keepalive_interval=7)
    sock = ctx.socket(zmq.DEALER)
    params.tune(sock)
    assert {o: sock.getsockopt(o) for o in (
        zmq.LINGER, zmq.SNDHWM, zmq.RCVHWM, zmq.MAXMSGSIZE, zmq.TCP_KEEPALIVE,
        zmq.TCP_KEEPALIVE_CNT, zmq.TCP_KEEPALIVE_IDLE, zmq.TCP_KEEPALIVE_INTVL, zmq.TCP_MAXRT,
        zmq.CONNECT_TIMEOUT, zmq.HANDSHAKE_IVL, zmq.RECONNECT_IVL, zmq.RECONNECT_IVL_MAX)} == {
        zmq.LINGER: 0, zmq.SNDHWM: 1000, zmq.RCVHWM: 1000, zmq.MAXMSGSIZE: 64 * 1024 * 1024,
        zmq.TCP_KEEPALIVE: 1, zmq.TCP_KEEPALIVE_CNT: 4, zmq.TCP_KEEPALIVE_IDLE: 60,
        zmq.TCP_KEEPALIVE_INTVL: 7, zmq.TCP_MAXRT: 20000, zmq.CONNECT_TIMEOUT: 2500,
        zmq.HANDSHAKE_IVL: int(HANDSHAKE_TIMEOUT * 1000), zmq.RECONNECT_IVL: 50,
        zmq.RECONNECT_IVL_MAX: 1000}


def test_tune_leaves_libzmqs_defaults_where_the_config_says_none(ctx):
    params = TbonParams(torpid_min=5, torpid_max=30, tcp_user_timeout=0, connect_timeout=0,
                        hwm=0, keepalive_enable=False)
    sock = ctx.socket(zmq.ROUTER)
    defaults = {o: sock.getsockopt(o) for o in (zmq.TCP_MAXRT, zmq.CONNECT_TIMEOUT,
                                                 zmq.TCP_KEEPALIVE_CNT)}
    params.tune(sock)
    assert {o: sock.getsockopt(o) for o in defaults} == defaults == {
        zmq.TCP_MAXRT: 0, zmq.CONNECT_TIMEOUT: 0, zmq.TCP_KEEPALIVE_CNT: -1}
    assert (sock.getsockopt(zmq.TCP_KEEPALIVE), sock.getsockopt(zmq.SNDHWM)) == (0, 0)


def test_byte_options_and_curve_keys(ctx):
    """The keys and the identity as a CURVE server set up through pyzmq's sugar sees them:
    the handshake completes and the message arrives from routing id 17."""
    cert = certificate.generate()
    server = ctx.socket(zmq.ROUTER)
    server.curve_server = True
    server.curve_secretkey, server.curve_publickey = cert.secret_key, cert.public_key
    port = server.bind_to_random_port("tcp://127.0.0.1")
    sock = ctx.socket(zmq.DEALER)
    set_options(sock, [(zmq.LINGER, 0), (zmq.ROUTING_ID, b"17"),
                       (zmq.CURVE_SERVERKEY, cert.public_key),
                       (zmq.CURVE_PUBLICKEY, cert.public_key),
                       (zmq.CURVE_SECRETKEY, cert.secret_key)])
    assert sock.getsockopt(zmq.ROUTING_ID) == b"17"
    assert sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.send(b"hello")
    assert server.poll(30_000) == zmq.POLLIN  # a deadline, not a sleep
    assert server.recv_multipart() == [b"17", b"hello"]


def test_a_bad_value_raises_as_setsockopt_does(ctx):
    sock = ctx.socket(zmq.DEALER)
    with pytest.raises(zmq.ZMQError) as err:
        set_options(sock, [(zmq.CURVE_SERVERKEY, b"not a key")])
    assert err.value.errno == zmq.EINVAL
