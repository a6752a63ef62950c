"""Request and response routing over the tree (Flux RFC 3/6; the routing half of flux-core's
broker.c).

A request for this rank (or for NODEID_ANY with a local service) is handled here;
a request for a rank in a child's subtree goes down to that child; anything else
goes up to the parent. Every hop pushes where the request came from onto the
route, and a response pops it to retrace the path: ``c…`` is a local client,
``t…`` a TCP client, a rank number an overlay peer, and `SELF_HOP` a request
this broker sent itself. The broker's own requests carry a matchtag of their own; a
response is handed to the callback given with the request (the leader pulling a node's
resources), or, without one, only logged on error.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.connector import LocalConnector, is_client_hop
from fluxnode.agent.broker.message import NODEID_ANY, NODEID_UPSTREAM, Message
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.agent.broker.services import ServiceRegistry

SELF_HOP = "b"  # route hop of requests the broker itself originates
# Targets whose next hop down is remembered (`Router._routes`); past this many the memory is
# started afresh, so a client addressing every rank of a huge instance cannot grow it.
ROUTE_CACHE_MAX = 4096


class Router:
    def __init__(self, state: InstanceState, services: ServiceRegistry, overlay: Overlay,
                 connector: LocalConnector, log: BrokerLog) -> None:
        self.state = state
        self.services = services
        self.overlay = overlay
        self.connector = connector
        self.log = log
        self._matchtags = itertools.count(1)
        self._pending: dict[int, Callable[[Message], None]] = {}
        self._streams: set[int] = set()  # matchtags whose callback stays for every response
        # The child toward each target rank seen (None: not below this broker), for the
        # topology object it was computed from: topology.child_route walks the tree, about
        # a microsecond per forwarded request, where a dict answers in a tenth (issue 32).
        # config.reload installs a new topology object, which empties it.
        self._routes: dict[int, int | None] = {}
        self._routes_of: object = None

    def from_local(self, msg: Message, client_id: str) -> None:
        """A request from a local client: NODEID_UPSTREAM skips this broker."""
        if msg.nodeid == NODEID_UPSTREAM:
            msg.nodeid = NODEID_ANY
            if self.overlay.parent_rank is not None:
                self._forward_up(msg)
                return
        self.route_request(msg)

    def request(self, msg: Message, on_response: Callable[[Message], None] | None = None,
                *, stream: bool = False) -> int:
        """Send a request originated by this broker; returns its matchtag.

        `on_response` gets the response (or the error response); without it the response is
        only logged on error. With `stream` (RFC 6 streaming, e.g. ``rexec.fanout``) it gets
        every response until the caller calls `forget`. A response may never come (a broker on
        the way died): the caller that waits for one bounds the wait and then calls `forget`.
        """
        msg.route = [SELF_HOP]
        msg.matchtag = next(self._matchtags)
        if on_response is not None:
            self._pending[msg.matchtag] = on_response
            if stream:
                self._streams.add(msg.matchtag)
        self.route_request(msg)
        return msg.matchtag

    def forget(self, matchtag: int) -> None:
        """Stop waiting for the response to request `matchtag` (a late one is dropped)."""
        self._pending.pop(matchtag, None)
        self._streams.discard(matchtag)

    def route_request(self, msg: Message) -> None:
        state = self.state
        nodeid = msg.nodeid
        if nodeid == NODEID_UPSTREAM:
            nodeid = msg.nodeid = NODEID_ANY
        if nodeid == state.rank or (nodeid == NODEID_ANY and msg.topic in self.services):
            response = self.services.call(msg)
            if response is not None:  # None: the handler answers later itself
                self.respond(response)
            return
        if nodeid == NODEID_ANY:
            if self.overlay.parent_rank is not None:
                self._forward_up(msg)
            else:
                self.respond(msg.error(errno.ENOSYS, f"unknown service method {msg.topic!r}"))
            return
        if not 0 <= nodeid < state.size:
            self.respond(
                msg.error(errno.EHOSTUNREACH, f"no such rank {nodeid} (instance size {state.size})")
            )
            return
        topology = state.topology
        if topology is not self._routes_of:
            self._routes.clear()
            self._routes_of = topology
        try:
            child = self._routes[nodeid]
        except KeyError:
            child = topology.child_route(state.rank, nodeid)
            if len(self._routes) >= ROUTE_CACHE_MAX:
                self._routes.clear()
            self._routes[nodeid] = child
        if child is not None:
            if not self.overlay.send_child(child, msg):
                status = self.overlay.children[child].status
                self.respond(
                    msg.error(
                        errno.EHOSTUNREACH,
                        f"rank {nodeid} is unreachable: {state.hostnames[child]} (rank {child}) is "
                        f"{status}",
                    )
                )
            return
        if self.overlay.parent_rank is None:
            self.respond(msg.error(errno.EHOSTUNREACH, f"rank {nodeid} is unreachable"))
            return
        self._forward_up(msg)

    def _forward_up(self, msg: Message) -> None:
        if not self.overlay.send_parent(msg):
            self.respond(msg.error(errno.EHOSTUNREACH, "parent is unreachable"))

    def respond(self, msg: Message) -> None:
        """Send a response back along its route (pop the last hop)."""
        if not msg.route:
            self.log.error("broker: dropping %s response with an empty route", msg.topic)
            return
        hop = msg.route.pop()
        if hop == SELF_HOP:
            if msg.matchtag in self._streams:
                callback = self._pending.get(msg.matchtag)
            else:
                callback = self._pending.pop(msg.matchtag, None)
            if callback is not None:
                callback(msg)
            elif msg.errnum:
                self.log.error("broker: %s failed: %s", msg.topic, msg.errstr)
            return
        if is_client_hop(hop):
            self.connector.send(hop, msg)
            return
        if not self.overlay.send_hop(hop, msg):
            self.log.debug("broker: cannot route %s response to %s", msg.topic, hop)
