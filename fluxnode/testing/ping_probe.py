"""Ping latency to a broker while something else is sent to it (issue 11: no request may
hold the leader's loop for long)."""

from __future__ import annotations

import threading
import time

from fluxnode.agent.broker.client import Client


class PingProbe:
    """Pings `uri` (rank 0) back to back from a thread of its own until stopped; the
    latencies (seconds) are in `latencies`. Use as a context manager around the hostile
    request: ``with PingProbe(uri) as probe: ...; probe.worst``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.latencies: list[float] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with Client.connect(self.uri, timeout=30) as c:
                while not self._stop.is_set():
                    t0 = time.perf_counter()
                    c.rpc("broker.ping", {})
                    self.latencies.append(time.perf_counter() - t0)
        except BaseException as exc:  # reported by __exit__'s caller through .errors
            self.errors.append(exc)

    def __enter__(self) -> PingProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def worst(self) -> float:
        return max(self.latencies, default=float("inf"))

    @property
    def p50(self) -> float:
        if not self.latencies:
            return float("inf")
        return sorted(self.latencies)[len(self.latencies) // 2]

    @property
    def p99(self) -> float:
        if not self.latencies:
            return float("inf")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
