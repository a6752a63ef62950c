"""The API emulator's webhook client (fluxnode/testing/kube_webhook_client.py) against a
scripted TLS server on loopback (tests/support/scripted_server.py) that answers exactly the
bytes a test gives it.

Oracles from outside the client: HTTP/1.1 message framing (RFC 9112: Content-Length, chunked
transfer coding with its last chunk and trailers, a body delimited by the connection's end,
``Connection: close``), and what the server saw (its connections and requests, counted by the
server, not by the client)."""

from __future__ import annotations

import asyncio
import base64
import threading
from pathlib import Path

import pytest
from support.scripted_server import Server

from fluxnode.testing.kube_tls import make_serving_certs
from fluxnode.testing.kube_webhook_client import (
    MAX_BODY,
    MAX_HEAD,
    CallFailed,
    Endpoint,
    WebhookClients,
)

NAME = "hook.fluxnode.svc"
URL = f"https://{NAME}/mutate"


class TlsServer(Server):
    """The scripted server (tests/support/scripted_server.py) with a certificate for NAME
    from a CA of its own (`ca_bundle`)."""

    def __init__(self, directory: Path, replies: list, hold: threading.Event | None = None):
        certs = make_serving_certs(directory, dns_names=(NAME,), ips=(), name="webhook")
        self.ca_bundle = base64.b64encode(certs.ca_pem).decode()
        super().__init__(replies, certs.server_context(), hold)

    def endpoint(self, bundle: str | None = None) -> Endpoint:
        return Endpoint("127.0.0.1", self.port, NAME,
                        self.ca_bundle if bundle is None else bundle)


@pytest.fixture
def server(request, tmp_path):
    made: list[TlsServer] = []

    def make(replies: list, hold: threading.Event | None = None) -> TlsServer:
        made.append(TlsServer(tmp_path / f"s{len(made)}", replies, hold))
        return made[-1]

    yield make
    for s in made:
        s.close()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def run_on_one_loop(clients: WebhookClients, endpoint: Endpoint, n: int,
                    timeout: float = 5.0) -> list:
    """`n` posts one after another on one event loop (kept connections live on a loop)."""
    async def all_of() -> list:
        out = []
        for _ in range(n):
            try:
                out.append(await clients.post(endpoint, "/mutate?timeout=5s", b"{}", timeout,
                                              URL))
            except CallFailed as exc:
                out.append(exc)
        clients.close()
        return out

    return asyncio.run(all_of())


def test_answers_framed_by_length_chunks_or_the_connections_end(server):
    s = server([ok(b'{"x": 1}'),
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3;ext=1\r\n{\"y\r\n5\r\n\": 2}\r\n0\r\nTrailer: t\r\n\r\n",
                b"HTTP/1.1 201 Created\r\nConnection: close\r\n\r\n{\"z\": 3}"])
    clients = WebhookClients()
    answers = run_on_one_loop(clients, s.endpoint(), 3)
    assert answers == [(200, b'{"x": 1}'), (200, b'{"y": 2}'), (201, b'{"z": 3}')]
    # the first two kept one connection (HTTP/1.1 keep-alive); the request says its length
    assert s.connections == 1
    line, headers, body = s.requests[0]
    assert line == "POST /mutate?timeout=5s" and body == b"{}"
    assert headers["content-length"] == "2"
    assert headers["host"] == f"{NAME}:{s.port}"
    assert len(clients.seconds) == 3


def test_a_kept_connection_the_server_closed_is_asked_again_once(server):
    s = server([ok(b"{}"), None, ok(b'{"again": true}')])
    answers = run_on_one_loop(WebhookClients(), s.endpoint(), 2)
    # the second request lost its kept connection before any byte of an answer: asked
    # again on a new one (two connections in all), as Go's transport retries it
    assert answers == [(200, b"{}"), (200, b'{"again": true}')]
    assert s.connections == 2 and len(s.requests) == 3


def test_a_new_connection_closed_before_an_answer_fails_naming_the_url(server):
    s = server([None])
    (answer,) = run_on_one_loop(WebhookClients(), s.endpoint(), 1)
    assert isinstance(answer, CallFailed)
    assert str(answer).startswith(f'Post "{URL}": '), answer
    assert s.connections == 1  # not asked again: nothing was reused


@pytest.mark.parametrize("answer, words", [
    (b"SPDY/3 200 OK\r\n\r\n", "malformed HTTP status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed HTTP header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n", "malformed Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1),
     f"at most {MAX_BODY} are read"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX", "malformed chunk"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (MAX_BODY + 1),
     f"more than {MAX_BODY} bytes"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n",
     f"longer than {MAX_HEAD} bytes"),
])
def test_a_malformed_or_oversized_answer_fails_with_what_is_wrong(server, answer, words):
    s = server([answer])
    (failed,) = run_on_one_loop(WebhookClients(), s.endpoint(), 1)
    assert isinstance(failed, CallFailed), failed
    assert str(failed).startswith(f'Post "{URL}": ') and words in str(failed), failed


def test_a_certificate_the_bundle_does_not_vouch_for_fails(server, tmp_path):
    s = server([ok(b"{}")])
    other = make_serving_certs(tmp_path / "other", dns_names=(NAME,), ips=(), name="other")
    (failed,) = run_on_one_loop(WebhookClients(), s.endpoint(
        base64.b64encode(other.ca_pem).decode()), 1)
    assert isinstance(failed, CallFailed) and "certificate verify failed" in str(failed)
    (failed,) = run_on_one_loop(WebhookClients(), s.endpoint("bm90IGEgY2VydA=="), 1)
    assert isinstance(failed, CallFailed) and "unable to load root certificates" in str(failed)


def test_an_answer_later_than_the_timeout_fails_and_its_connection_is_not_kept(server):
    hold = threading.Event()
    s = server([ok, ok], hold)  # each answered with its request's body
    clients = WebhookClients()

    async def both() -> tuple:
        try:
            await clients.post(s.endpoint(), "/mutate?timeout=1s", b'{"n": 1}', 0.3, URL)
        except CallFailed as exc:
            first = exc
        hold.set()
        second = await clients.post(s.endpoint(), "/mutate?timeout=1s", b'{"n": 2}', 5.0, URL)
        clients.close()
        return first, second

    failed, second = asyncio.run(both())
    assert "timed out" in str(failed) and str(failed).startswith(f'Post "{URL}": '), failed
    # the late answer was never read as the next request's: that one went on a new
    # connection and got its own answer
    assert second == (200, b'{"n": 2}')
    assert s.connections == 2


def test_a_204_answer_has_no_body_and_its_connection_is_kept(server):
    """No body follows a 204 (RFC 9112 section 6.3), with or without a length: the answer
    ends at its head, and the next call goes on the same connection."""
    s = server([b"HTTP/1.1 204 No Content\r\n\r\n", ok(b'{"x": 1}')])
    answers = run_on_one_loop(WebhookClients(), s.endpoint(), 2)
    assert answers == [(204, b""), (200, b'{"x": 1}')]
    assert s.connections == 1
