"""Bad input never crashes a broker: malformed frames, unknown topics, oversize, pipelining."""

import errno
import json
import random
import socket
import struct
import threading
import time

import zmq
from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.agent.broker.message import MAGIC, Message, StreamDecoder, encode_stream
from fluxnode.broker_conf import certificate


def raw_local(inst, frames_list):
    """Send raw frame lists over the local socket; return the decoded responses."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(inst.broker_uri(0).removeprefix("local://"))
    s.settimeout(10)
    for frames in frames_list:
        s.sendall(encode_stream(frames))
    dec, out = StreamDecoder(), []
    while len(out) < len(frames_list):
        data = s.recv(65536)
        if not data:
            break
        dec.feed(data)
        while (f := dec.next()) is not None:
            out.append(Message.from_frames(f))
    s.close()
    return out


def header(**h):
    return json.dumps(h).encode()


def test_malformed_messages_get_errors_and_the_broker_keeps_serving(inst8):
    req = {"type": "request", "topic": "broker.ping", "nodeid": 0}
    responses = raw_local(inst8, [
        [MAGIC, header(**req, matchtag=1)],                              # wrong frame count
        [MAGIC, b"{not json", b""],                                      # bad header JSON
        [MAGIC, header(**{**req, "type": "bogus"}, matchtag=3), b""],   # unknown type
        [MAGIC, header(type="request", nodeid=0, matchtag=4), b""],     # missing topic
        [MAGIC, header(**req, matchtag=5), b"[1,"],                      # bad payload JSON
        [MAGIC, header(**{**req, "topic": "no.such"}, matchtag=6), b""],  # unknown topic
        [MAGIC, header(**{**req, "nodeid": 7}, matchtag=7), b"{oops"],   # bad payload, 3 hops away
        [MAGIC, header(**{**req, "topic": "no.such", "nodeid": 7}, matchtag=8), b""],
    ])
    by_tag = {m.matchtag: m for m in responses}
    assert by_tag[1].errnum == errno.EPROTO and "expected 3 frames" in by_tag[1].errstr
    assert by_tag[0].errnum == errno.EPROTO and "header is not valid JSON" in by_tag[0].errstr
    assert by_tag[3].errnum == errno.EPROTO and "unknown message type" in by_tag[3].errstr
    assert by_tag[4].errnum == errno.EINVAL and "no topic" in by_tag[4].errstr
    assert by_tag[5].errnum == errno.EPROTO and "payload is not valid JSON" in by_tag[5].errstr
    assert by_tag[6].errnum == errno.ENOSYS
    assert by_tag[7].errnum == errno.EPROTO
    assert by_tag[8].errnum == errno.ENOSYS and "no.such" in by_tag[8].errstr
    assert inst8.rpc("broker.ping", {"ok": True}, nodeid=7)["ok"] is True
    assert "malformed message" in inst8.log(0)


def test_oversized_local_message_gets_emsgsize_and_is_disconnected(inst8):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(inst8.broker_uri(0).removeprefix("local://"))
    s.settimeout(10)
    s.sendall(struct.pack("!I", 0xFFFFFFF0))
    dec = StreamDecoder()
    while (frames := dec.next()) is None:
        data = s.recv(65536)
        assert data, "broker closed without an error response"
        dec.feed(data)
    assert Message.from_frames(frames).errnum == errno.EMSGSIZE
    assert s.recv(10) == b""
    assert inst8.rpc("broker.ping", {}, nodeid=0) is not None


def test_malformed_frames_on_the_tbon_router_get_errors(inst8):
    cert = certificate.load(inst8.cert_path)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.routing_id = b"traw"
    sock.curve_serverkey = cert.public_key
    sock.curve_publickey = cert.public_key
    sock.curve_secretkey = cert.secret_key
    sock.connect(inst8.tcp_uri(0))
    try:
        sock.send_multipart([MAGIC, header(type="request", topic="broker.ping", nodeid=0, matchtag=9)])
        sock.send_multipart([MAGIC, header(type="request", topic="x.y", nodeid=3, matchtag=10), b""])
        sock.send_multipart([b"junk"])  # no header at all: logged and dropped
        got = {}
        while len(got) < 2:
            assert sock.poll(10000), "no error response from the broker"
            m = Message.from_frames(sock.recv_multipart())
            got[m.matchtag] = m
        assert got[9].errnum == errno.EPROTO
        assert got[10].errnum == errno.ENOSYS
    finally:
        sock.close()
        ctx.term()
    assert inst8.rpc("broker.ping", {}, nodeid=3) is not None


def test_unknown_rank_and_service_errors(inst8):
    with inst8.client() as c:
        for nodeid, topic, err in ((99, "broker.ping", errno.EHOSTUNREACH), (5, "nope.nope", errno.ENOSYS),
                                   (-1, "nope.nope", errno.ENOSYS)):
            try:
                c.rpc(topic, {}, nodeid=nodeid)
                raise AssertionError("expected an error")
            except RPCError as exc:
                assert exc.errnum == err


def test_many_clients_pipeline_requests_to_all_ranks_concurrently(inst8):
    errors = []

    def worker(n):
        try:
            with Client.connect(inst8.uri) as c:
                tags = {c.send("broker.ping", {"n": n, "i": i}, nodeid=i % 8): i for i in range(200)}
                for tag, i in tags.items():
                    msg = c.recv(tag)
                    assert msg.errnum == 0 and msg.decode_payload()["i"] == i
        except Exception as exc:  # reported below
            errors.append(exc)

    # daemon threads: a worker stuck in recv must not keep the test process alive after the failure
    threads = [threading.Thread(target=worker, args=(n,), name=f"client-{n}", daemon=True) for n in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    # a join that timed out returns quietly: a hung worker must fail the test, not pass it
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"workers still running after 60 s: {hung}"
    assert not errors


def test_service_errors_and_module_interface(inst8):
    info = inst8.rpc("testmod.info")
    assert info["rank"] == 0 and info["size"] == 8 and info["attr_rank"] == "0"
    assert info["nnodes"] == 8 and info["down"] == []
    assert info["changes"] and info["changes"][-1] == {"nnodes": 8, "down": []}
    try:
        inst8.rpc("testmod.fail")
        raise AssertionError("expected an error")
    except RPCError as exc:
        assert exc.errnum == errno.EPERM and exc.errstr == "testmod says no"
    # a module service is reachable from any rank (NODEID_ANY goes upstream to the leader)
    with inst8.client(rank=7) as c:
        assert c.rpc("testmod.info", nodeid=-1)["rank"] == 0


def test_events_from_the_leader_reach_every_broker_with_sequence_numbers(inst8):
    tcp = Client.connect(inst8.tcp_uri(1), curve_cert=inst8.cert_path)  # a TCP peer of interior rank 1
    clients = [inst8.client(rank=r) for r in (0, 4, 7)] + [tcp]
    try:
        for c in clients:
            c.subscribe("test.")
        inst8.rpc("testmod.publish", {"topic": "test.hello", "payload": {"x": 1}})
        inst8.rpc("event.pub", {"topic": "test.again", "payload": {"x": 2}})
        for c in clients:
            e1, e2 = c.recv_event(), c.recv_event()
            assert (e1.topic, e1.payload, e2.topic, e2.payload) == ("test.hello", {"x": 1}, "test.again", {"x": 2})
            assert e2.seq == e1.seq + 1
    finally:
        for c in clients:
            c.close()


def test_upstream_requests_are_handled_by_the_parent(inst8):
    with inst8.client(rank=3) as c:
        assert c.rpc("broker.ping", {}, nodeid=-2)["route"].endswith("!3!1")
        assert c.rpc("attr.get", {"name": "rank"}, nodeid=-1)["value"] == "3"


def test_random_garbage_never_takes_a_broker_down(inst8):
    rng = random.Random(1234)
    cert = certificate.load(inst8.cert_path)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.curve_serverkey = cert.public_key
    sock.curve_publickey = cert.public_key
    sock.curve_secretkey = cert.secret_key
    sock.connect(inst8.tcp_uri(1))
    pieces = [MAGIC, b"{", b"{}", b"[]", b"null", header(type="request", topic="broker.ping", nodeid=7),
              header(type="control", topic="hello"), header(type="event", topic="x"),
              header(type="response", topic="", route=["0", "c9"]), header(type="request", topic="a", route=[1]),
              bytes(rng.randrange(256) for _ in range(64)), b"\xff" * 3]
    try:
        for _ in range(300):
            sock.send_multipart([rng.choice(pieces) for _ in range(rng.randint(1, 5))])
        for _ in range(50):  # raw bytes on the local connector, each on a fresh connection
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(inst8.broker_uri(rng.choice([0, 3, 7])).removeprefix("local://"))
            s.sendall(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
            s.close()
    finally:
        sock.close()
        ctx.term()
    with inst8.client() as c:
        tags = {c.send("broker.ping", {"r": r}, nodeid=r): r for r in range(8)}
        assert all(c.recv(t).decode_payload()["r"] == r for t, r in tags.items())
    assert all(inst8.rpc("broker.status", nodeid=0)["online"] == "0-7" for _ in range(2))
    for rank in range(8):  # bad input is logged as such, never as a crashed handler
        assert "Traceback" not in inst8.log(rank), inst8.log(rank)
