"""The agent's HTTP endpoint for kubelet probes and Prometheus.

``/healthz`` (liveness): the agent's control loop is turning. ``/readyz``
(readiness): this node's broker runs and answers ``broker.ping`` on its local socket,
or this node deliberately runs no broker (filtered out, NotReady), so such pods do not
stall the DaemonSet's rolling update.
``/metrics``: Prometheus text format from the agent's own registry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("fluxnode.agent.health")

LIVENESS_STALE = 60.0


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rank = Gauge("fluxnode_agent_rank", "This node's broker rank (-1: not in the overlay)", registry=self.registry)
        self.size = Gauge("fluxnode_agent_overlay_size", "Number of ranks in the rank map", registry=self.registry)
        self.broker_up = Gauge("fluxnode_agent_broker_up", "1 if this node's broker process runs", registry=self.registry)
        self.broker_starts = Counter("fluxnode_agent_broker_starts", "Broker processes started", registry=self.registry)
        self.broker_crashes = Counter("fluxnode_agent_broker_crashes", "Broker processes that exited unexpectedly",
                                      registry=self.registry)
        self.renders = Counter("fluxnode_agent_config_renders", "broker.toml files written", registry=self.registry)
        self.node_events = Counter("fluxnode_agent_node_events", "Node changes seen by the informer", registry=self.registry)
        self.rank.set(-1)


class HealthServer:
    def __init__(self, port: int, address: str, ready: Callable[[], tuple[bool, str]], metrics: AgentMetrics):
        self.heartbeat = time.monotonic()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path == "/healthz":
                    age = time.monotonic() - outer.heartbeat
                    ok, text = age < LIVENESS_STALE, f"control loop last ran {age:.1f}s ago"
                    self._reply(200 if ok else 503, ("ok: " if ok else "stalled: ") + text + "\n")
                elif self.path == "/readyz":
                    ok, text = ready()
                    self._reply(200 if ok else 503, ("ok: " if ok else "not ready: ") + text + "\n")
                elif self.path == "/metrics":
                    self._reply(200, generate_latest(metrics.registry).decode(), CONTENT_TYPE_LATEST)
                else:
                    self._reply(404, "not found: try /healthz, /readyz or /metrics\n")

            def _reply(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
                body = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        log.info("health endpoint on port %d (/healthz /readyz /metrics)", self.port)
        return self

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
