"""The binder's connection to the scheduler service on the lead broker.

The leader may restart; the binder must then reconnect and carry on, never
crash. `SchedUnavailable` means "no answer, try again later", distinct from
the service's own refusals (RPCError with EBUSY/ENODEV/EINVAL/ENOENT).

ZeroMQ reconnects to a restarted leader by itself, but a request that was on the
wire when the old one died is lost with it: waiting for its answer would cost the
whole `timeout` (10 s by default) of scheduling. The broker client notices the drop
while it waits (ECONNRESET), which is SchedUnavailable here (the loop then
reconciles from `sched.list`, which tells whether the request was carried out).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

from fluxnode.agent.broker.client import Client, ConnectError, RPCError

log = logging.getLogger("fluxnode.binder.sched")

# ENOSYS: the leader has no scheduler module loaded (yet), i.e. nobody to ask
TRANSPORT_ERRNOS = (errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENOSYS)


class SchedUnavailable(RuntimeError):
    """The lead broker (or its scheduler module) did not answer."""


class LeaderForgot(SchedUnavailable):
    """The leader answered as if it did not hold what our running pods use (it restarted
    without its journal): re-sync it (reconcile, adopting them) before placing anything."""


class SchedClient:
    """Not thread-safe: used by the binder loop only."""

    def __init__(
        self,
        uri: str | Callable[[], str] | None,
        curve_cert: str | None = None,
        timeout: float = 30.0,
    ):
        self.uri = uri  # or a locator called on every (re)connect (the leader may move)
        self.curve_cert = curve_cert
        self.timeout = timeout
        self._client: Client | None = None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def rpc(self, topic: str, payload: dict) -> dict:
        """One call; a lost connection (the client notices a drop while it waits: the
        leader restarted and the answer is lost) or a leader without its scheduler is
        `SchedUnavailable`, the service's own refusals are RPCError."""
        if self._client is None:
            try:
                uri = self.uri() if callable(self.uri) else self.uri
                self._client = Client.connect(uri, timeout=self.timeout, curve_cert=self.curve_cert)
            except (ConnectError, RuntimeError) as exc:
                raise SchedUnavailable(str(exc)) from None
        try:
            return self._client.rpc(topic, payload)
        except RPCError as exc:
            if exc.errnum in TRANSPORT_ERRNOS:
                log.warning("%s: %s; reconnecting", topic, exc.errstr)
                self.close()
                raise SchedUnavailable(f"{topic}: {exc.errstr}") from None
            raise
