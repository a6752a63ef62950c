"""Who may talk to a broker: CURVE + ZAP on the TBON, owner-only local connector."""

import errno
import os
import socket
import stat

import pytest
import zmq
from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.agent.broker.message import Message
from fluxnode.broker_conf import certificate

from fluxnode.testing.waiting import wait_for


def test_tcp_client_with_instance_certificate_is_served(inst8):
    with Client.connect(inst8.tcp_uri(0), curve_cert=inst8.cert_path, timeout=10) as c:
        assert c.rpc("broker.ping", {"seq": 1}, nodeid=7)["route"].startswith("t")
        assert c.rpc("attr.get", {"name": "size"})["value"] == "8"


def test_tcp_client_with_wrong_key_is_refused_and_gets_nothing(inst8, tmp_path):
    other = tmp_path / "other.cert"
    certificate.write(other, certificate.generate())
    with Client.connect(inst8.tcp_uri(0), curve_cert=other, timeout=1.0) as c:
        with pytest.raises(RPCError) as exc:
            c.rpc("broker.ping", {}, nodeid=0)
        # told at once (not at its timeout) that the broker refused its certificate
        assert exc.value.errnum == errno.EPERM, exc.value
        assert "refused the CURVE handshake" in exc.value.errstr
    wait_for(
        lambda: "CURVE handshake failed" in inst8.log(0), timeout=5, what="failed handshake logged"
    )
    # the broker keeps serving
    assert inst8.rpc("broker.ping", {}, nodeid=0)


def test_peer_knowing_the_server_key_but_not_the_instance_secret_is_refused_by_zap(inst8):
    server = certificate.load(inst8.cert_path)
    mine = certificate.generate()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.curve_serverkey = server.public_key
    sock.curve_publickey = mine.public_key
    sock.curve_secretkey = mine.secret_key
    sock.connect(inst8.tcp_uri(0))
    try:
        sock.send_multipart(Message("request", "broker.ping", 0, 1, {}).to_frames())
        assert sock.poll(1000) == 0, "a peer with a foreign key got an answer"
    finally:
        sock.close()
        ctx.term()
    wait_for(
        lambda: "refused CURVE connection from 127.0.0.1" in inst8.log(0),
        timeout=5,
        what="ZAP refusal logged",
    )


def test_tcp_client_without_certificate_is_a_clear_error(inst8):
    with pytest.raises(ConnectError, match="CURVE certificate is required"):
        Client.connect(inst8.tcp_uri(0))


def test_local_socket_is_0600_in_a_0700_directory(inst8):
    path = inst8.broker_uri(0).removeprefix("local://")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


def test_connect_error_names_the_uri(tmp_path):
    with pytest.raises(ConnectError) as exc:
        Client.connect(f"local://{tmp_path}/x/local")
    assert (
        str(exc.value)
        == f"fluxnode: cannot connect to local://{tmp_path}/x/local: No such file or directory"
    )


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
def test_local_connector_refuses_other_uids_by_peer_credentials(inst8):
    path = inst8.broker_uri(1).removeprefix("local://")
    d = os.path.dirname(path)
    # Open the path up so only SO_PEERCRED stands in the way, then restore it.
    dirs, p = [], d
    while p != os.path.dirname(str(inst8.tmp_path)):
        dirs.append((p, stat.S_IMODE(os.stat(p).st_mode)))
        os.chmod(p, 0o755)
        p = os.path.dirname(p)
    os.chmod(path, 0o666)
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: become nobody, connect, report what happened
            try:
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                s.settimeout(5)
                s.sendall(b"\0\0\0\0")
                data = s.recv(10)
                os.write(w, b"closed" if data == b"" else b"data")
            except OSError as exc:
                os.write(w, f"error {exc.errno}".encode())
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        result = os.read(r, 100).decode()
        os.close(r)
    finally:
        for p, mode in dirs:
            os.chmod(p, mode)
        os.chmod(path, 0o600)
    assert result in ("closed", f"error {errno.ECONNRESET}", f"error {errno.EPIPE}")
    wait_for(lambda: "refused connection from pid" in inst8.log(1) and "uid 65534" in inst8.log(1),
             timeout=5, what="refusal logged")
