"""A tiny admission webhook for tests: an HTTPS server on loopback that answers AdmissionReview
v1 requests with what the test decides.

Written from the admission.k8s.io/v1 API (k8s.io/api/admission/v1/types.go), not from the
emulator: it reads ``request``, answers ``response`` with the request's ``uid``, and encodes a
``patch`` (a JSON Patch list) in base64 with ``patchType: JSONPatch``. Its certificate is for
the Service's name, ``NAME.NAMESPACE.svc``, from a CA of its own (``ca_bundle`` goes in the
webhook configuration), so the emulator's certificate check is real.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fluxnode.testing.kube_tls import make_serving_certs

# decide(request) -> the response's fields: "allowed", and "patch" (a list of operations) or
# "status"; the server adds "uid" and encodes the patch
Decide = Callable[[dict], dict]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that gave up first (the emulator's timeout, a test that closed) is
        no error of the webhook's: it is not printed as one."""
        if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


class WebhookServer:
    """``with WebhookServer(tmp_path, "hook", "fluxnode", decide) as hook:`` then register
    ``hook.service_config(path)`` and route ``kube.service_endpoints[hook.service] =
    hook.address``."""

    def __init__(self, directory: Path, name: str, namespace: str, decide: Decide):
        self.service = (namespace, name)
        self.decide = decide
        self.reviews: list[dict] = []  # every AdmissionReview received
        certs = make_serving_certs(directory, dns_names=(f"{name}.{namespace}.svc",), ips=(),
                                   name="webhook")
        self.ca_bundle = base64.b64encode(certs.ca_pem).decode()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.cert_path, certs.key_path)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.reviews.append(review)
                decided = dict(server.decide(review["request"]))
                if "patch" in decided:
                    decided["patch"] = base64.b64encode(
                        json.dumps(decided["patch"]).encode()).decode()
                    decided["patchType"] = "JSONPatch"
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": {"uid": review["request"]["uid"], **decided}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.address = ("127.0.0.1", self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def service_config(self, path: str = "/mutate") -> dict:
        """The webhook's ``clientConfig``: its Service and this server's CA."""
        namespace, name = self.service
        return {"service": {"namespace": namespace, "name": name, "path": path, "port": 443},
                "caBundle": self.ca_bundle}

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the webhook server did not stop"
