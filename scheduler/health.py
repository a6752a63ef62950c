"""Liveness, readiness and metrics over HTTP for the binder's probes and Prometheus.

/healthz fails when the scheduling loop or an informer thread stopped making
progress (the kubelet restarts the container); /readyz fails until the
informers have synced and the leader broker answered. /metrics is the
Prometheus text exposition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], str | None]
"""Returns None when fine, else what is wrong."""


class HealthServer:
    def __init__(self, host: str, port: int, live: Check, ready: Check, registry: CollectorRegistry):
        checks = {"/healthz": live, "/livez": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
                elif path in checks:
                    problem = checks[path]()
                    body = (problem or "ok").encode() + b"\n"
                    ctype, code = "text/plain; charset=utf-8", 500 if problem else 200
                else:
                    body, ctype, code = b"not found\n", "text/plain; charset=utf-8", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
