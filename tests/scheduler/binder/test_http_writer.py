"""The binder's plain HTTP/1.1 writes against a scripted server (every answer shape the API
server may send, and every way a connection can end), and pipelined writes against the API
emulator (applied in the order sent)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess

import pytest
from fluxnode.scheduler.binder.http_writer import (
    AUTH_TTL,
    HttpWriter,
    ProtocolError,
    Write,
    writer_for,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.scripted_server import CLOSE, Server

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for


def api_client(port: int, token: str = "t0k") -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def ok(status: int = 201, body: bytes = b'{"kind":"Binding"}', extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} Created\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    return (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{half:x};ext=1\r\n".encode() + body[:half] + b"\r\n"
            + f"{len(body) - half:x}\r\n".encode() + body[half:] + b"\r\n0\r\nX-T: 1\r\n\r\n")


@pytest.fixture
def server(request):
    srv = Server(request.param)
    yield srv
    srv.close()


@pytest.mark.parametrize("server", [[ok(), chunked(b'{"a": 1, "b": 2}'), ok(200), ok()]],
                         indirect=True)
def test_writes_share_one_connection_per_thread_whatever_the_answer_framing(server):
    w = HttpWriter(api_client(server.port))
    for i in range(4):
        w.request("POST", f"/api/v1/namespaces/ns/pods/p{i}/binding", {"i": i})
    assert server.connections == 1
    line, headers, body = server.requests[0]
    assert line == "POST /api/v1/namespaces/ns/pods/p0/binding"
    assert json.loads(body) == {"i": 0}
    assert headers["authorization"] == "Bearer t0k"
    assert headers["content-type"] == "application/json"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    w.close()


@pytest.mark.parametrize("server", [[ok(409, b'{"message": "pod p is already bound"}'), ok()]],
                         indirect=True)
def test_an_error_status_is_the_clients_api_exception_and_the_connection_stays(server):
    w = HttpWriter(api_client(server.port))
    with pytest.raises(ApiException) as exc:
        w.request("POST", "/api/v1/namespaces/ns/pods/p/binding", {})
    assert exc.value.status == 409
    assert json.loads(exc.value.body)["message"] == "pod p is already bound"
    w.request("POST", "/api/v1/namespaces/ns/events", {})
    assert server.connections == 1


@pytest.mark.parametrize("server", [[ok(extra="Connection: close\r\n"), ok()]], indirect=True)
def test_a_server_closing_after_its_answer_gets_a_new_connection(server):
    w = HttpWriter(api_client(server.port))
    w.request("POST", "/a", {})
    w.request("POST", "/b", {})
    assert server.connections == 2 and len(server.requests) == 2


@pytest.mark.parametrize("server", [[ok(), ok()]], indirect=True)
def test_a_connection_closed_while_idle_is_replaced_before_the_next_write(server):
    w = HttpWriter(api_client(server.port))
    w.request("POST", "/a", {})
    # the server side goes away while the connection is idle (an API server restart,
    # an idle timeout): the next write must not be sent into it and lost
    w._local.conn.sock.shutdown(socket.SHUT_RD)
    w.request("POST", "/b", {})
    assert [r[0] for r in server.requests] == ["POST /a", "POST /b"]
    assert server.connections == 2


@pytest.mark.parametrize(
    "server",
    [[None], [b"HTTP/1.1 201 Created\r\nContent-Length: 50\r\n\r\n{\"short\"" + CLOSE],
     [b"garbage\r\n\r\n" + CLOSE],
     [b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + CLOSE]],
    indirect=True,
    ids=["no answer", "cut body", "not http", "bad chunk"],
)
def test_no_complete_answer_is_an_unknown_outcome_not_an_api_error(server):
    w = HttpWriter(api_client(server.port))
    with pytest.raises((ConnectionError, ProtocolError, OSError)) as exc:
        w.request("POST", "/api/v1/namespaces/ns/pods/p/binding", {})
    assert not isinstance(exc.value, ApiException)
    assert w._local.conn is None  # that connection is never used again


@pytest.mark.parametrize("server", [[ok()]], indirect=True)
def test_header_injection_through_a_token_is_refused(server):
    w = HttpWriter(api_client(server.port, token="x\r\nX-Evil: 1"))
    with pytest.raises(ValueError, match="line breaks"):
        w.request("POST", "/a", {})
    assert not server.requests


def test_a_proxy_keeps_the_urllib3_path():
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:1"
    cfg.proxy = "http://127.0.0.1:2"
    assert not isinstance(writer_for(client.ApiClient(cfg), 4), HttpWriter)
    plain = client.Configuration()
    plain.host = "http://127.0.0.1:1"
    assert isinstance(writer_for(client.ApiClient(plain), 4), HttpWriter)


def self_signed(tmp_path, name: str) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return str(cert), str(key)


def tls_server(replies: list, cert: str, key: str) -> Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return Server(replies, context)


def test_tls_with_the_clients_certificate_settings(tmp_path):
    cert, key = self_signed(tmp_path, "server")
    other, _ = self_signed(tmp_path, "other")
    srv = tls_server([ok(), ok(), ok()], cert, key)
    try:
        cfg = client.Configuration()
        cfg.host = f"https://127.0.0.1:{srv.port}"
        cfg.ssl_ca_cert = cert
        w = HttpWriter(client.ApiClient(cfg))
        w.request("POST", "/a", {"x": 1})
        w.request("POST", "/b", {"x": 2})
        assert [r[0] for r in srv.requests] == ["POST /a", "POST /b"]
        assert srv.connections == 1
        assert srv.requests[0][1]["host"] == f"127.0.0.1:{srv.port}"
        w.close()
        # a server whose certificate the client's CA did not sign is refused, unanswered
        cfg.ssl_ca_cert = other
        with pytest.raises((ssl.SSLError, OSError)) as exc:
            HttpWriter(client.ApiClient(cfg)).request("POST", "/c", {})
        assert not isinstance(exc.value, ApiException)
        assert len(srv.requests) == 2
    finally:
        srv.close()


@pytest.mark.parametrize(
    "server", [[ok(200, b'{"n": 1}'), ok(404, b'{"message": "jobs \\"b\\" not found"}'),
                chunked(b'{"n": 3}'), ok(201, b'{"n": 4}')]], indirect=True)
def test_a_pipeline_answers_each_write_in_order_and_an_error_is_that_writes_only(server):
    w = HttpWriter(api_client(server.port))
    outcomes = w.pipeline([Write("PATCH", f"/j/{name}", {"i": i}, "application/merge-patch+json")
                           for i, name in enumerate("abc")])
    assert json.loads(outcomes[0]) == {"n": 1}
    assert isinstance(outcomes[1], ApiException) and outcomes[1].status == 404
    assert json.loads(outcomes[2]) == {"n": 3}
    assert [r[0] for r in server.requests] == ["PATCH /j/a", "PATCH /j/b", "PATCH /j/c"]
    assert [json.loads(r[2]) for r in server.requests] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert server.requests[0][1]["content-type"] == "application/merge-patch+json"
    w.request("POST", "/d", {})  # the same connection goes on
    assert server.connections == 1
    assert w.pipeline([]) == []


@pytest.mark.parametrize(
    "server", [[ok(200, extra="Connection: close\r\n"), ok(200), ok(200)],
               [ok(200), None]],
    indirect=True, ids=["close after the first answer", "closed without the second"])
def test_writes_of_a_pipeline_left_unanswered_are_unknown_outcomes(server):
    w = HttpWriter(api_client(server.port))
    outcomes = w.pipeline([Write("PATCH", f"/j/{n}", {}) for n in "abc"])
    assert outcomes[0] == b'{"kind":"Binding"}'
    assert all(isinstance(o, OSError) and not isinstance(o, ApiException)
               for o in outcomes[1:]), outcomes
    assert w._local.conn is None  # that connection is never used again


def test_the_emulator_applies_pipelined_patches_in_the_order_sent():
    """The API emulator (aiohttp, as the API server's Go net/http) handles a connection's
    requests one after another: the resourceVersions of pipelined writes follow the order
    sent, whatever the objects' names."""
    kube = KubeEmulator(namespaces=("default",)).start()
    try:
        api = kube.api_client()
        core = client.CoreV1Api(api)
        names = [f"cm-{i}" for i in (5, 1, 4, 0, 3, 2)]
        for name in names:
            core.create_namespaced_config_map("default", {"metadata": {"name": name}})
        w = HttpWriter(api)
        outcomes = w.pipeline(
            [Write("PATCH", f"/api/v1/namespaces/default/configmaps/{name}",
                   {"data": {"k": name}}, "application/merge-patch+json") for name in names]
            + [Write("PATCH", "/api/v1/namespaces/default/configmaps/missing",
                     {"data": {}}, "application/merge-patch+json")])
        versions = [int(json.loads(o)["metadata"]["resourceVersion"]) for o in outcomes[:-1]]
        assert versions == sorted(versions) and len(set(versions)) == len(names), versions
        assert [json.loads(o)["data"]["k"] for o in outcomes[:-1]] == names
        assert isinstance(outcomes[-1], ApiException) and outcomes[-1].status == 404
        w.close()
    finally:
        kube.stop()


@pytest.mark.parametrize("server", [[ok()] * 2000], indirect=True)
def test_a_token_changed_in_the_clients_configuration_is_sent_soon_after(server):
    """Authentication headers are kept AUTH_TTL seconds (the client's refresh hook is
    costly), then asked again: a rotated token reaches the wire without a restart."""
    api = api_client(server.port)
    w = HttpWriter(api)
    w.request("POST", "/a", {})
    api.configuration.api_key = {"authorization": "n3w"}

    def sent_new() -> bool:
        w.request("POST", "/a", {})
        return server.requests[-1][1]["authorization"] == "Bearer n3w"

    wait_for(sent_new, 10 * AUTH_TTL, interval=0.01, what="the new token sent")
    assert server.requests[0][1]["authorization"] == "Bearer t0k"
    assert server.connections == 1
