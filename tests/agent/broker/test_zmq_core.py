"""agent/broker/zmq_core.py: libzmq through pyzmq's backend without its sugar. Each case
runs in a fresh interpreter (what is imported is the point). The oracles are pyzmq's own:
the message libzmq gives for an error (zmq.strerror), `import zmq` giving pyzmq's whole
package (its Context, its Frame subclass), CURVE keys libzmq accepts."""

from __future__ import annotations

import subprocess
import sys

PRELUDE = """
import sys
from fluxnode.agent.broker import zmq_core as z
def sugar():
    return sorted(m for m in sys.modules if m.startswith("zmq.sugar"))
"""


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_sockets_errors_and_curve_work_without_the_sugar():
    out = run("""
ctx = z.Context(io_threads=1)
a, b = z.Socket(ctx, z.PAIR), z.Socket(ctx, z.PAIR)
a.bind("inproc://t"); b.connect("inproc://t")
from fluxnode.agent.broker.zframes import recv_frames, send_frames
send_frames(a, [b"x", b"yz"])
print(z.zmq_poll([(b, z.POLLIN)], 5000) == [(b, z.POLLIN)], recv_frames(b), recv_frames(b))
try:
    a.bind("tcp://no-such-host-name.invalid:1")
except z.ZMQError as exc:
    print("error", exc.errno, exc.strerror)
lone = z.Socket(ctx, z.DEALER)  # connected to no one: a send would block
try:
    lone.send(b"x", z.NOBLOCK)
except z.Again as exc:
    print("again", exc.errno, exc.strerror)
lone.close(0)
from fluxnode.broker_conf import certificate
cert = certificate.generate()
print(len(cert.public_key), len(cert.secret_key), cert.metadata["keygen.zmq-version"])
a.close(0); b.close(0); ctx.term()
print("sugar", sugar())
""").splitlines()
    assert out[0] == "True [b'x', b'yz'] None"
    import zmq  # the oracle: pyzmq's own answers in this (test) process
    errno = int(out[1].split()[1])
    assert out[1] == f"error {errno} {zmq.strerror(errno)}"
    assert out[2] == f"again {zmq.EAGAIN} {zmq.strerror(zmq.EAGAIN)}"
    assert out[3] == f"40 40 {zmq.zmq_version()}"
    assert out[4] == "sugar []"


def test_importing_zmq_afterwards_gives_the_whole_package():
    out = run("""
print("before", sugar())
import zmq
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
print(type(ctx).__module__, type(zmq.Frame()).__module__, zmq.zmq_version())
print(isinstance(s, z.Socket), zmq.backend.Socket is z.Socket, zmq.COPY_THRESHOLD)
s.close(); ctx.term()
print("after", bool(sugar()))
""").splitlines()
    import zmq
    assert out[0] == "before []"
    assert out[1] == f"zmq.sugar.context zmq.sugar.frame {zmq.zmq_version()}"
    assert out[2] == f"True True {zmq.COPY_THRESHOLD}"
    assert out[3] == "after True"
