"""The HTTPS server of fluxnode's admission webhook: AdmissionReview v1 in, verdict out.

Every binder replica serves it on its own port (``fluxnode binder --webhook-port``), behind
the Service the MutatingWebhookConfiguration names; what it decides is admission.py's. The
API server calls ``POST /mutate`` with a JSON AdmissionReview and waits at most the
configuration's timeoutSeconds, so the work per request is small and bounded:

- a body over `MAX_BODY` bytes is a 413 before it is read, no Content-Length a 411, a
  connection idle for `IO_TIMEOUT` seconds is closed;
- a body that is not an AdmissionReview is answered with one that refuses with code 400
  and says what is wrong (webhook_answer.py, as controller-runtime does); an object
  fluxnode will not admit is an AdmissionReview with ``allowed: false`` and the field named;
- nothing a request carries reaches past the handler: an unexpected exception is logged
  and answered with an AdmissionReview refusing with code 500, and the server goes on.

TLS: the serving certificate changes at runtime (webhook_certs.py rotates it), so each
accepted connection is wrapped with the context current at that moment (`use` swaps it);
the handshake runs in the request's thread, not the accept loop, so a slow client holds up
no other. The server is `serving` once it listens with a certificate: the binder's
readiness probe waits for that.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fluxnode.scheduler.binder import webhook_answer
from fluxnode.scheduler.binder.admission import Admission
from prometheus_client import CollectorRegistry, Histogram

log = logging.getLogger("fluxnode.webhook")

PATH = "/mutate"
MAX_BODY = 4 * 1024 * 1024  # an AdmissionReview holds one object (etcd's limit is 1.5 MiB)
IO_TIMEOUT = 10.0
WEBHOOK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1)


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """A TLS server context for one certificate chain and key (TLS 1.2 at least)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext | None = None

    def get_request(self):
        sock, address = self.socket.accept()
        context = self.context
        if context is None:  # no certificate yet: nothing can be served
            sock.close()
            raise OSError("no serving certificate yet")
        sock.settimeout(IO_TIMEOUT)
        # without TCP_NODELAY a write after one not yet acknowledged waits for the client's
        # delayed ACK, 40 ms on Linux (the answer was two writes; it is one now, `_reply`,
        # but TLS may still send it as more than one segment)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request, client_address) -> None:
        # a client that went away mid-handshake or mid-request: nothing to answer
        log.debug("webhook connection from %s failed", client_address, exc_info=True)


class WebhookServer:
    """Serve `admission` on host:port over HTTPS once a certificate is given (`use`)."""

    def __init__(self, host: str, port: int, admission: Admission,
                 registry: CollectorRegistry | None = None):
        self.admission = admission
        self.requests = Histogram(
            "fluxnode_binder_webhook_duration_seconds",
            "Seconds answering one admission request, by result (allowed, refused, bad).",
            ["result"], buckets=WEBHOOK_BUCKETS,
            registry=registry if registry is not None else CollectorRegistry(),
        )
        self.server = _Server((host, port), self._handler_class())
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook",
                                        daemon=True)
        self._started = False

    @property
    def serving(self) -> bool:
        return self._started and self.server.context is not None

    def use(self, cert_path: Path, key_path: Path) -> None:
        """Serve this certificate from the next connection on (already open ones keep
        theirs). Raises ssl.SSLError if the pair does not load."""
        self.server.context = server_context(cert_path, key_path)

    def start(self) -> WebhookServer:
        self._thread.start()
        self._started = True
        log.info("admission webhook on port %d (POST %s)", self.port, PATH)
        return self

    def stop(self) -> None:
        self._started = False
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: bytes) -> tuple[int, bytes, str]:
        """(HTTP code, body, result) for one request body."""
        return 200, *webhook_answer.answer(self.admission, body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections
            timeout = IO_TIMEOUT

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                started = time.perf_counter()
                if self.path.split("?", 1)[0] != PATH:
                    self._reply(404, f"not found: POST {PATH}\n".encode(), "text/plain")
                    return
                length = self.headers.get("Content-Length")
                if length is None or not length.isdigit():
                    self._reply(411, b"a Content-Length is required\n", "text/plain",
                                close=True)
                    return
                if int(length) > MAX_BODY:
                    self._reply(413, f"body over {MAX_BODY} bytes\n".encode(), "text/plain",
                                close=True)
                    return
                body = self.rfile.read(int(length))
                try:
                    code, reply, result = webhook.answer(body)
                except Exception:  # a bug must cost one request, never the server
                    log.exception("admission request failed")
                    code, reply, result = 200, webhook_answer.failed(body), "bad"
                ctype = "application/json" if code == 200 else "text/plain"
                # timed to the answer's write (one sendall into the socket's buffer), counted
                # before it: whoever got the answer can read the count that includes it
                webhook.requests.labels(result).observe(time.perf_counter() - started)
                self._reply(code, reply, ctype)

            def do_GET(self) -> None:  # noqa: N802
                self._reply(405, f"POST an AdmissionReview to {PATH}\n".encode(), "text/plain")

            def _reply(self, code: int, body: bytes, ctype: str, close: bool = False) -> None:
                """The answer in one write, headers and body (`send_response` buffers the
                headers, and `end_headers` sends them before the body: two writes, each a
                point where this thread gives up the interpreter and waits to get it back
                from the binder's busy threads, up to a switch interval each)."""
                self.log_request(code)
                head = [f"{self.protocol_version} {code} {self.responses[code][0]}",
                        f"Server: {self.version_string()}",
                        f"Date: {self.date_time_string()}",
                        f"Content-Type: {ctype}; charset=utf-8",
                        f"Content-Length: {len(body)}"]
                if close:
                    head.append("Connection: close")
                    self.close_connection = True
                self.wfile.write("\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

