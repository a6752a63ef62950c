"""HTTP/1.1 pipelining against the API emulator, whose connections write the answers to
pipelined requests together (fluxnode/testing/kube_corked.py).

Oracles from outside the emulator: RFC 9112 section 9.3.2 (a server answers pipelined
requests in the order they came), the API server's answers (201 Created for a create, 409
AlreadyExists for a name taken, 200 for a GET), read with the standard library's HTTP
response parser from one TLS socket."""

from __future__ import annotations

import http.client
import json
import socket
import ssl

import pytest


class _Socket:
    """A connected socket whose responses http.client reads one after another from one
    buffered file (HTTPResponse takes a socket and asks it for a file, which it closes
    once it has read a body: here that leaves the file open for the next answer)."""

    def __init__(self, sock: ssl.SSLSocket):
        self.file = sock.makefile("rb")

    def makefile(self, *_args, **_kwargs):
        return self

    def close(self) -> None:
        pass

    def __getattr__(self, name: str):
        return getattr(self.file, name)


def _connect(kube) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(kube.ca_path))
    raw = socket.create_connection(("127.0.0.1", kube.port), timeout=30)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _request(kube, method: str, path: str, body: dict | None = None,
             close: bool = False) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1",
            f"Authorization: Bearer {kube.token}", "Accept: application/json",
            f"Content-Length: {len(data)}"]
    if body is not None:
        head.append("Content-Type: application/json")
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def _answers(sock: ssl.SSLSocket, count: int) -> list[tuple[int, dict]]:
    reader = _Socket(sock)
    out = []
    for _ in range(count):
        response = http.client.HTTPResponse(reader)  # type: ignore[arg-type]
        response.begin()
        out.append((response.status, json.loads(response.read())))
    return out


def _configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"name": name}}


@pytest.mark.parametrize("count", [1, 9, 40])
def test_pipelined_requests_are_answered_in_order(kube, count):
    """Creates, one of them of a name already taken, then GETs of each, all sent in one
    write on one connection: every answer comes, in the order of the requests."""
    path = "/api/v1/namespaces/default/configmaps"
    names = [f"cm-{i}" for i in range(count)]
    burst = [_request(kube, "POST", path, _configmap(n)) for n in names]
    taken_at = count // 2 + 1  # after the first create
    burst.insert(taken_at, _request(kube, "POST", path, _configmap(names[0])))
    burst += [_request(kube, "GET", f"{path}/{n}") for n in names]
    with _connect(kube) as sock:
        sock.sendall(b"".join(burst))
        answers = _answers(sock, len(burst))
    statuses = [status for status, _ in answers]
    assert statuses == [201] * taken_at + [409] + [201] * (count - taken_at) + [200] * count
    created = [a["metadata"]["name"] for s, a in answers[:count + 1] if s == 201]
    assert created == names
    taken = answers[taken_at][1]
    assert (taken["reason"], taken["details"]["name"]) == ("AlreadyExists", names[0])
    read = [(a["metadata"]["name"], a["data"]) for _, a in answers[count + 1:]]
    assert read == [(n, {"name": n}) for n in names]


def test_a_pipeline_ending_in_connection_close_gets_every_answer(kube):
    """A pipeline whose last request asks to close the connection: every answer is sent,
    then the connection ends (nothing after the last answer)."""
    path = "/api/v1/namespaces/default/configmaps"
    burst = [_request(kube, "POST", path, _configmap(f"c-{i}")) for i in range(5)]
    burst.append(_request(kube, "GET", f"{path}/c-4", close=True))
    with _connect(kube) as sock:
        sock.sendall(b"".join(burst))
        answers = _answers(sock, len(burst))
        rest = sock.makefile("rb").read()
    assert [s for s, _ in answers] == [201] * 5 + [200]
    assert answers[-1][1]["metadata"]["name"] == "c-4"
    assert rest == b""


def test_pipelined_creates_that_wait_for_a_webhook_are_answered_in_order(kube, tmp_path):
    """Pod creates sent back to back, each of which waits for an admission webhook (over
    HTTPS, from the server's loop) while the next ones are queued: each is admitted as the
    webhook decided and answered in its order."""
    from support.webhook_server import WebhookServer

    def label(request: dict) -> dict:
        name = request["object"]["metadata"]["name"]
        return {"allowed": True, "patch": [
            {"op": "add", "path": "/metadata/labels", "value": {"seen": name}}]}

    with WebhookServer(tmp_path / "hook", "label", "fluxnode", label) as server:
        kube.service_endpoints[server.service] = server.address
        kube.create("mutatingwebhookconfigurations.admissionregistration.k8s.io", {
            "metadata": {"name": "label"},
            "webhooks": [{"name": "label.example.com", "sideEffects": "None",
                          "admissionReviewVersions": ["v1"],
                          "clientConfig": server.service_config(),
                          "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                                     "apiVersions": ["v1"], "resources": ["pods"]}]}]})
        names = [f"p-{i}" for i in range(6)]
        pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}} for n in names]
        with _connect(kube) as sock:
            sock.sendall(b"".join(_request(kube, "POST", "/api/v1/namespaces/default/pods", p)
                                  for p in pods))
            answers = _answers(sock, len(pods))
        assert [s for s, _ in answers] == [201] * len(pods)
        assert [(a["metadata"]["name"], a["metadata"]["labels"]) for _, a in answers] == \
            [(n, {"seen": n}) for n in names]
        assert [r["request"]["name"] for r in server.reviews] == names
