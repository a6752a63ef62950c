"""Events: published through the leader, sequenced there, and flooded down the tree (Flux RFC 3).

Any broker may publish; a non-leader sends ``event.pub`` to rank 0, which numbers the
event and delivers it to its children, its local clients and the TCP clients that
subscribed. Every broker passes an event on the same way, so each one reaches all
brokers in order; a gap in the numbers means this broker was cut off from the leader
for a while, and is logged.

Local clients subscribe at the connector; TCP clients (e.g. the binder) with the
``event.subscribe`` service of the broker they are connected to.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.connector import LocalConnector
from fluxnode.agent.broker.message import NODEID_ANY, Message, ServiceError
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.agent.broker.services import ServiceRegistry


class EventBus:
    def __init__(self, state: InstanceState, overlay: Overlay, connector: LocalConnector,
                 request: Callable[[Message], None], log: BrokerLog) -> None:
        self.state = state
        self.overlay = overlay
        self.connector = connector
        self.request = request  # sends `event.pub` to the leader from a non-leader
        self.log = log
        self.seq = 0  # the last event sequence number seen (assigned, on the leader)
        self.tcp_subscribers: dict[str, list[str]] = {}  # TCP client hop -> topic prefixes

    def register(self, services: ServiceRegistry) -> None:
        services.register("event.subscribe", self._subscribe)
        if self.state.rank == 0:
            services.register("event.pub", self._pub)

    def publish(self, topic: str, payload: dict | None = None) -> int:
        """Publish an event; returns its sequence number on the leader, -1 elsewhere."""
        if self.state.rank != 0:
            self.request(
                Message.request("event.pub", {"topic": topic, "payload": payload}, nodeid=0)
            )
            return -1
        self.seq += 1
        self._deliver(Message("event", topic, NODEID_ANY, 0, payload, seq=self.seq))
        return self.seq

    def from_parent(self, msg: Message) -> None:
        """An event from up the tree: note its number, then pass it on."""
        if msg.seq is not None:
            if self.seq and msg.seq > self.seq + 1:
                self.log.warning("broker: missed events %d-%d (disconnected from the leader)",
                                 self.seq + 1, msg.seq - 1)
            self.seq = msg.seq
        self._deliver(msg)

    def _deliver(self, msg: Message) -> None:
        self.overlay.broadcast_children(msg)
        self.connector.deliver_event(msg)
        for ident, prefixes in list(self.tcp_subscribers.items()):
            if any(msg.topic.startswith(p) for p in prefixes) and not self.overlay.send_hop(
                ident, msg
            ):
                del self.tcp_subscribers[ident]  # the client is gone

    def _subscribe(self, msg: Message) -> dict:
        """Subscriptions of TCP clients (local clients subscribe at the connector)."""
        topic = (msg.payload or {}).get("topic")
        if not isinstance(topic, str):
            raise ServiceError(errno.EINVAL, "event.subscribe needs a string 'topic' prefix")
        if len(msg.route) != 1 or not msg.route[0].startswith("t"):
            raise ServiceError(
                errno.EPROTO,
                "event.subscribe must be sent to the broker the client is connected to",
            )
        self.tcp_subscribers.setdefault(msg.route[0], []).append(topic)
        return {}

    def _pub(self, msg: Message) -> dict:
        p = msg.payload or {}
        topic = p.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ServiceError(errno.EINVAL, "event.pub needs a 'topic' string")
        payload = p.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise ServiceError(errno.EINVAL, "event.pub 'payload' must be an object")
        return {"seq": self.publish(topic, payload)}
