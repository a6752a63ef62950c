"""The binder's connection to the scheduler service on the lead broker.

The leader may restart; the binder must then reconnect and carry on, never
crash. `SchedUnavailable` means "no answer, try again later", distinct from
the service's own refusals (RPCError with EBUSY/ENODEV/EINVAL/ENOENT).

ZeroMQ reconnects to a restarted leader by itself, but a request that was on the
wire when the old one died is lost with it: waiting for its answer would cost the
whole `timeout` (10 s by default) of scheduling. So on tcp:// the client watches
its socket's disconnect events while it waits: a disconnect after the request was
sent ends the wait at once with SchedUnavailable (the loop then reconciles from
`sched.list`, which tells whether the request was carried out).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.agent.broker.message import MessageError

log = logging.getLogger("fluxnode.binder.sched")

TRANSPORT_ERRNOS = (errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENOSYS)
# Topics an older service may lack: ENOSYS for them is the service's answer, not "no leader"
# (the caller has just been answered by the same module on another topic).
OPTIONAL_TOPICS = ("sched.adopt",)


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
        self._monitor = None  # a zmq PAIR socket with the DEALER's disconnect events

    def close(self) -> None:
        if self._monitor is not None:  # before the client: its context waits for it
            self._monitor.close(0)
            self._monitor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def rpc(self, topic: str, payload: dict) -> dict:
        if self._client is None:
            try:
                uri = self.uri() if callable(self.uri) else self.uri
                self._client = Client.connect(uri, timeout=self.timeout, curve_cert=self.curve_cert)
            except (ConnectError, RuntimeError) as exc:
                raise SchedUnavailable(str(exc)) from None
            self._monitor = _disconnect_monitor(self._client)
        try:
            if self._monitor is None:
                return self._client.rpc(topic, payload)
            return self._rpc_watching(topic, payload)
        except RPCError as exc:
            if exc.errnum in TRANSPORT_ERRNOS and not (
                exc.errnum == errno.ENOSYS and topic in OPTIONAL_TOPICS
            ):
                log.warning("%s: %s; reconnecting", topic, exc.errstr)
                self.close()
                raise SchedUnavailable(f"{topic}: {exc.errstr}") from None
            raise

    def _rpc_watching(self, topic: str, payload: dict) -> dict:
        """`Client.rpc`, waiting in slices and giving up when the connection drops."""
        assert self._client is not None and self._monitor is not None
        _disconnected(self._monitor)  # a blip before this request lost nothing of it
        tag = self._client.send(topic, payload)
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                msg = self._client.recv(tag, timeout=max(0.0, min(WAIT_SLICE, remaining)))
                break
            except RPCError as exc:
                if exc.errnum != errno.ETIMEDOUT:
                    raise
                if remaining <= WAIT_SLICE:
                    what = f"no response within {self.timeout:g}s"
                    raise RPCError(errno.ETIMEDOUT, what) from None
            if _disconnected(self._monitor):
                log.warning("%s: the connection to the leader dropped; its answer is lost", topic)
                self.close()
                raise SchedUnavailable(f"{topic}: connection to the leader lost")
        if msg.errnum:
            raise RPCError(msg.errnum, msg.errstr)
        try:
            return msg.decode_payload() or {}
        except MessageError as exc:
            raise RPCError(exc.errnum, exc.errstr) from None


WAIT_SLICE = 0.25  # how often a waiting request checks its connection


def _disconnect_monitor(client: Client):
    """A monitor of the tcp:// client's DEALER for disconnects, or None (local://, or a
    client without a ZeroMQ socket)."""
    sock = getattr(getattr(client, "_t", None), "sock", None)
    if sock is None or not hasattr(sock, "get_monitor_socket"):
        return None
    import zmq

    return sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)


def _disconnected(monitor) -> bool:
    """Whether a disconnect was reported since the last call (drains the events)."""
    import zmq

    seen = False
    while monitor.poll(0):
        monitor.recv_multipart(zmq.NOBLOCK)
        seen = True
    return seen
