"""The service registry: topic -> handler, and the one place a handler is called (flux-core's
service.c).

Every request this broker answers, built in or offered by a module, goes through
`ServiceRegistry.call`, so every handler gets the same contract: it returns a dict
(or None for an empty answer) and reports failure by raising `ServiceError` with
an errno. Anything else it raises becomes an EIO response and a logged traceback,
never a dead broker.

A service a broker may never be asked for can be registered by its topics alone
(`register_lazy`): the registry answers that it has them (a request for one is served
here, not sent up the tree), and the first request for any of them builds the service,
which registers its real handlers for the same topics, then is answered by it. A worker
broker builds its exec service that way (its module and what it imports are 0.4 MiB of
a lone worker's RSS, issue 32).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import Message, MessageError, ServiceError

Handler = Callable[[Message], "dict | Deferred | None"]


class Deferred:
    """What a handler returns when it answers later itself (``router.respond``, with
    ``msg.response(...)`` or ``msg.error(...)``), possibly several times (RFC 6 streaming, e.g.
    ``rexec.exec``): an answer that needs other brokers (a blob fetched from the parent, an
    archive extracted below) must not hold up the event loop. `call` then answers nothing."""


DEFERRED = Deferred()


class ServiceRegistry:
    def __init__(self, log: BrokerLog) -> None:
        self.log = log
        self._handlers: dict[str, Handler] = {}
        self._lazy: dict[str, tuple[tuple[str, ...], Callable[[], None]]] = {}

    def register(self, topic: str, handler: Handler) -> None:
        if not topic or topic in self._handlers or topic in self._lazy:
            raise ValueError(f"service topic {topic!r} is empty or already registered")
        self._handlers[topic] = handler

    def register_lazy(self, topics: tuple[str, ...], build: Callable[[], None]) -> None:
        """Hold `topics` for a service not built yet: the first request for one of them
        calls `build`, which must register handlers for all of them."""
        for topic in topics:
            if not topic or topic in self._handlers or topic in self._lazy:
                raise ValueError(f"service topic {topic!r} is empty or already registered")
        for topic in topics:
            self._lazy[topic] = (topics, build)

    def build(self, topic: str) -> None:
        """Build the lazy service that holds `topic` now (nothing if none does)."""
        held = self._lazy.get(topic)
        if held is None:
            return
        topics, build = held
        for t in topics:
            del self._lazy[t]
        build()

    def __contains__(self, topic: str) -> bool:
        return topic in self._handlers or topic in self._lazy

    def get(self, topic: str) -> Handler | None:
        return self._handlers.get(topic)

    def call(self, msg: Message) -> Message | None:
        """The response (or error response) of the handler registered for `msg.topic`; None
        when the handler returned `DEFERRED`."""
        handler = self._handlers.get(msg.topic)
        if handler is None and msg.topic in self._lazy:
            try:
                self.build(msg.topic)
            except Exception as exc:
                self.log.exception("broker: service %s could not start", msg.topic)
                return msg.error(errno.EIO, f"{msg.topic}: service could not start: {exc}")
            handler = self._handlers.get(msg.topic)
        if handler is None:
            return msg.error(errno.ENOSYS, f"unknown service method {msg.topic!r}")
        try:
            msg.decode_payload()
            result = handler(msg)
        except MessageError as exc:
            self.log.error("broker: %s: %s", msg.topic, exc.errstr)
            return msg.error(exc.errnum, exc.errstr)
        except ServiceError as exc:
            return msg.error(exc.errnum, exc.errstr)
        except Exception as exc:
            self.log.exception("broker: service %s failed", msg.topic)
            return msg.error(errno.EIO, f"{msg.topic}: internal error: {exc}")
        if result is DEFERRED:
            return None
        if result is not None and not isinstance(result, dict):
            self.log.error(
                "broker: service %s returned %s, not a dict", msg.topic, type(result).__name__
            )
            return msg.error(errno.EIO, f"{msg.topic}: service returned a non-object")
        return msg.response(result or {})
