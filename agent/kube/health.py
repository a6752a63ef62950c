"""The HTTP endpoint for kubelet probes and Prometheus, shared by the node agent and the binder.

``/healthz`` (liveness, also ``/livez``) and ``/readyz`` (readiness) each call a probe that
says whether things are fine and, in a few words, why; ``/metrics`` is the Prometheus text
exposition of the caller's registry. A failing probe answers 503, which is what the kubelet
and load balancers treat as "not now". The standard library's threading server is enough:
probes are a few requests a minute.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("fluxnode.health")

Probe = Callable[[], tuple[bool, str]]
"""Returns (healthy, detail); the detail may be empty."""


def problem_probe(check: Callable[[], str | None]) -> Probe:
    """Adapt a check that returns None when fine, else what is wrong."""

    def probe() -> tuple[bool, str]:
        problem = check()
        return problem is None, problem or ""

    return probe


class HealthServer:
    def __init__(
        self, host: str, port: int, live: Probe, ready: Probe, registry: CollectorRegistry
    ):
        probes = {"/healthz": live, "/livez": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
                elif path in probes:
                    ok, detail = probes[path]()
                    text = ("ok" if ok else "not ok") + (f": {detail}" if detail else "")
                    body, ctype, code = (
                        (text + "\n").encode(),
                        "text/plain; charset=utf-8",
                        200 if ok else 503,
                    )
                else:
                    body, ctype, code = (
                        b"not found: try /healthz, /readyz or /metrics\n",
                        "text/plain; charset=utf-8",
                        404,
                    )
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
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        log.info("health endpoint on port %d (/healthz /readyz /metrics)", self.port)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
