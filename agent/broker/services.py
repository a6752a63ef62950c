"""The service registry: topic -> handler, and the one place a handler is called (flux-core's
service.c).

Every request this broker answers, built in or offered by a module, goes through
`ServiceRegistry.call`, so every handler gets the same contract: it returns a dict
(or None for an empty answer) and reports failure by raising `ServiceError` with
an errno. Anything else it raises becomes an EIO response and a logged traceback,
never a dead broker.
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

    def register(self, topic: str, handler: Handler) -> None:
        if not topic or topic in self._handlers:
            raise ValueError(f"service topic {topic!r} is empty or already registered")
        self._handlers[topic] = handler

    def __contains__(self, topic: str) -> bool:
        return topic in self._handlers

    def get(self, topic: str) -> Handler | None:
        return self._handlers.get(topic)

    def call(self, msg: Message) -> Message | None:
        """The response (or error response) of the handler registered for `msg.topic`; None
        when the handler returned `DEFERRED`."""
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
