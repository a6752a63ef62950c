"""The tree-based overlay network (TBON): sockets, peers and subtree health.

Each broker binds one ZeroMQ ROUTER (children and non-broker clients connect to
it) and connects one DEALER to its parent, both under CURVE with the single
instance certificate (as Flux does); an in-loop ZAP handler (overlay_auth.py) accepts only peers
presenting the instance public key, and an admission guard (overlay_guard.py) sheds
connections that have not proved themselves before they can take every descriptor.
Children say hello, send keepalives and report their subtree status and online ranks;
the parent marks a silent child `lost` after torpid_max and computes its own subtree
status from its children, with flux-overlay(1)'s meanings:

full      online, no child partial/offline/degraded/lost
partial   online, some child partial or offline, none degraded or lost
degraded  online, some child degraded or lost
lost      gone missing, from the parent's perspective
offline   not yet joined, or cleanly shut down
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import MAX_MESSAGE_SIZE, Message, MessageError
from fluxnode.agent.broker.overlay_auth import InstanceKeyAuthenticator
from fluxnode.agent.broker.overlay_guard import MONITOR_EVENTS, AdmissionGuard, GuardLimits
from fluxnode.agent.broker.reactor import Reactor, Timer
from fluxnode.agent.broker.zframes import recv_frames, recv_parts, send_frames
from fluxnode.agent.broker.zoptions import set_options
from fluxnode.broker_conf.config import TbonConfig

STATES = ("full", "partial", "degraded", "lost", "offline")
HANDSHAKE_TIMEOUT = 5.0  # seconds a TBON peer has to complete the CURVE handshake


@dataclass(frozen=True)
class TbonParams:
    """The overlay's timing and socket settings.

    The [tbon] ones come from `TbonConfig` (`from_config`), which owns their defaults
    (flux-config-tbon(5)); the TCP keepalive ones are the overlay's own and have no key.
    """

    torpid_min: float
    torpid_max: float
    tcp_user_timeout: float
    connect_timeout: float
    hwm: int  # [tbon] child_rcvhwm; 0: no limit
    keepalive_enable: bool = True
    keepalive_count: int = -1
    keepalive_idle: int = -1
    keepalive_interval: int = -1

    @classmethod
    def from_config(cls, tbon: TbonConfig) -> TbonParams:
        return cls(
            torpid_min=tbon.torpid_min,
            torpid_max=tbon.torpid_max,
            tcp_user_timeout=tbon.tcp_user_timeout,
            connect_timeout=tbon.connect_timeout,
            hwm=tbon.child_rcvhwm,
        )

    def tune(self, sock: zmq.Socket) -> None:
        """Apply these settings to a TBON socket (ROUTER or DEALER)."""
        options: list[tuple[int, int | bytes]] = [
            (zmq.LINGER, 0), (zmq.SNDHWM, self.hwm), (zmq.RCVHWM, self.hwm),
            (zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE),
            (zmq.TCP_KEEPALIVE, 1 if self.keepalive_enable else 0)]
        if self.keepalive_count > 0:
            options.append((zmq.TCP_KEEPALIVE_CNT, self.keepalive_count))
        if self.keepalive_idle > 0:
            options.append((zmq.TCP_KEEPALIVE_IDLE, self.keepalive_idle))
        if self.keepalive_interval > 0:
            options.append((zmq.TCP_KEEPALIVE_INTVL, self.keepalive_interval))
        if self.tcp_user_timeout > 0:
            options.append((zmq.TCP_MAXRT, int(self.tcp_user_timeout * 1000)))
        if self.connect_timeout > 0:
            options.append((zmq.CONNECT_TIMEOUT, int(self.connect_timeout * 1000)))
        # A peer that opens a connection and never completes the CURVE handshake holds a
        # descriptor of ours: dropped after HANDSHAKE_TIMEOUT.
        options += [(zmq.HANDSHAKE_IVL, int(HANDSHAKE_TIMEOUT * 1000)),
                    (zmq.RECONNECT_IVL, 50), (zmq.RECONNECT_IVL_MAX, 1000)]
        set_options(sock, options)

    @property
    def torpid_checks(self) -> bool:
        """torpid_max = 0 turns the checks off (flux-config-tbon(5)): a silent child is never
        marked lost (a closed connection still is, by its goodbye or the TCP keepalives)."""
        return self.torpid_max > 0

    @property
    def keepalive_period(self) -> float:
        """How often a child proves it is alive: several times per torpid_max (every torpid_min
        when torpid checks are off)."""
        if not self.torpid_checks:
            return max(0.02, self.torpid_min)
        return max(0.02, min(self.torpid_min, self.torpid_max / 4))


@dataclass
class Child:
    """A child of this broker in the tree, as its parent tracks it."""

    rank: int
    hostname: str
    status: str = "offline"
    connected: bool = False
    since: float = field(default_factory=time.time)
    last_seen: float = 0.0
    online: set[int] = field(default_factory=set)
    error: str | None = None
    subtree: set[int] = field(default_factory=set)  # ranks this child may report online
    # Its rank as a route hop and as the ROUTER identity it connects with, made once: every
    # message to or from it needs one of them (issue 32).
    name: str = field(init=False, repr=False, compare=False)
    identity: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.name = str(self.rank)
        self.identity = self.name.encode()


def subtree_status(child_states: list[str]) -> str:
    if any(s in ("lost", "degraded") for s in child_states):
        return "degraded"
    if any(s in ("partial", "offline") for s in child_states):
        return "partial"
    return "full"


class Overlay:
    """Owns the TBON sockets of one broker; hands non-control messages to `deliver`."""

    def __init__(
        self,
        reactor: Reactor,
        ctx: zmq.Context,
        log: BrokerLog,
        *,
        rank: int,
        hostnames: list[str],
        parent: int | None,
        children: list[int],
        bind_uri: str | None,
        parent_uri: str | None,
        public_key: bytes,
        secret_key: bytes,
        params: TbonParams,
        deliver: Callable[[Message, str], None],
        on_change: Callable[[], None] | None = None,
        on_parent_join: Callable[[], None] | None = None,
        bind_fd: int | None = None,
        subtrees: dict[int, list[int]] | None = None,
        guard_limits: GuardLimits | None = None,
    ) -> None:
        self.reactor = reactor
        self.ctx = ctx
        self.log = log
        self.rank = rank
        self.hostnames = hostnames
        self.parent_rank = parent
        self.parent_hop = str(parent) if parent is not None else None
        self.children = {
            r: Child(r, hostnames[r], subtree=set((subtrees or {}).get(r, ()))) for r in children
        }
        self._by_identity: dict[bytes, Child] = {}
        self._index_children()
        self.bind_uri = bind_uri
        self.bind_fd = bind_fd
        self.parent_uri = parent_uri
        self.public_key = public_key
        self.secret_key = secret_key
        self.params = params
        self.deliver = deliver
        self.on_change = on_change
        self.on_parent_join = on_parent_join
        self.status = subtree_status(["offline"] * len(self.children)) if self.children else "full"
        self.since = time.time()
        self.online: set[int] = {rank}
        self.parent_joined = False
        self.router: zmq.Socket | None = None
        self.dealer: zmq.Socket | None = None
        self.auth = InstanceKeyAuthenticator(reactor, ctx, log, public_key)
        self.guard = AdmissionGuard(log, guard_limits)
        self._report_timer: Timer | None = None
        self._keepalive: Timer | None = None
        self.shutting_down = False
        self._resets: dict[bytes, float] = {}
        self._strangers: set[str] = set()  # ranks that contacted us but are not our children

    # -- sockets -------------------------------------------------------------------------
    def start(self) -> None:
        if self.bind_uri is not None:
            self._open_router(self.bind_uri)
        if self.parent_uri is not None:
            self.dealer = zmq.Socket(self.ctx, zmq.DEALER)
            self.params.tune(self.dealer)
            set_options(self.dealer, [
                (zmq.ROUTING_ID, str(self.rank).encode()),
                (zmq.CURVE_SERVERKEY, self.public_key), (zmq.CURVE_PUBLICKEY, self.public_key),
                (zmq.CURVE_SECRETKEY, self.secret_key)])
            self.dealer.connect(self.parent_uri)
            self.reactor.add(self.dealer, zmq.POLLIN, self._dealer_ready)
            self._send_parent_control("hello", self._report())
        self._keepalive = self.reactor.call_every(self.params.keepalive_period, self._tick)

    def _open_router(self, bind_uri: str) -> None:
        """Bind the ROUTER children and clients connect to, with its ZAP handler and monitor."""
        self.auth.open()
        self.router = zmq.Socket(self.ctx, zmq.ROUTER)
        self.params.tune(self.router)
        options: list[tuple[int, int | bytes]] = [
            (zmq.ROUTER_MANDATORY, 1), (zmq.ROUTER_HANDOVER, 1), (zmq.ZAP_DOMAIN, b"fluxnode"),
            (zmq.CURVE_SERVER, 1), (zmq.CURVE_SECRETKEY, self.secret_key),
            (zmq.CURVE_PUBLICKEY, self.public_key)]
        if self.bind_fd is not None:
            options.append((zmq.USE_FD, self.bind_fd))  # already bound and listening
        set_options(self.router, options)
        try:
            self.router.bind(bind_uri)
        except zmq.ZMQError:
            self.auth.close()
            self.router.close()
            self.router = None
            raise
        self.reactor.add(self.router, zmq.POLLIN, self._router_ready)
        self.auth.watch(self.router, MONITOR_EVENTS, self.guard.on_monitor)

    def close(self) -> None:
        if self._keepalive:
            self._keepalive.cancel()
        self.auth.unwatch(self.router)
        for sock in (self.router, self.dealer):
            if sock is not None:
                self.reactor.remove(sock)
                sock.close()
        self.auth.close()
        self.router = self.dealer = None

    def reconfigure(self, hostnames: list[str], children: list[int], subtrees: dict[int, list[int]],
                    bind_uri: str | None) -> None:
        """Apply a reloaded config in place (``config.reload``): the parent link and any bound
        ROUTER are kept; new children may say hello, removed ones are forgotten.

        A broker that had no children never bound: it binds `bind_uri` now if it gains some
        (a `zmq.ZMQError` from that bind leaves everything as it was).
        """
        if self.router is None and children and bind_uri is not None:
            self._open_router(bind_uri)
            self.bind_uri = bind_uri
        self.hostnames = hostnames
        old = self.children
        self.children = {}
        for r in children:
            child = old.get(r)
            if child is None:
                child = Child(r, hostnames[r])
            elif child.hostname != hostnames[r]:
                # Another host took over this rank: whatever we knew was about the old one.
                self.log.info(
                    "overlay: rank %d is now %s (was %s)", r, hostnames[r], child.hostname
                )
                child = Child(r, hostnames[r])
            self._strangers.discard(str(r))
            child.subtree = set(subtrees.get(r, ()))
            child.online &= child.subtree
            self.children[r] = child
        self._index_children()
        for r in sorted(set(old) - set(children)):
            self.log.info(
                "overlay: %s (rank %d) is no longer a child of rank %d",
                old[r].hostname,
                r,
                self.rank,
            )
        self._recompute()

    def _index_children(self) -> None:
        """The children by the ROUTER identity they connect with (`_from_below`)."""
        self._by_identity = {c.identity: c for c in self.children.values()}

    # -- receiving -------------------------------------------------------------------------
    def _router_ready(self, _revents: int) -> None:
        assert self.router is not None
        for i in range(1000):
            if self.guard.pending:
                # who sends has proved itself: the guard must not shed its connection
                parts = recv_parts(self.router)
                if parts is None:
                    return
                self.guard.proved(parts[0].get(zmq.SRCFD))
                frames = [p.bytes for p in parts]
            else:
                received = recv_frames(self.router, ready=i == 0)  # the reactor found it readable
                if received is None:
                    return
                frames = received
            ident, frames = frames[0], frames[1:]
            self._from_below(ident, frames)

    def _dealer_ready(self, _revents: int) -> None:
        assert self.dealer is not None
        for i in range(1000):
            frames = recv_frames(self.dealer, ready=i == 0)  # the reactor found it readable
            if frames is None:
                return
            self._from_parent(frames)

    def _from_below(self, ident: bytes, frames: list[bytes]) -> None:
        child = self._by_identity.get(ident)
        if child is not None:
            name = child.name
        else:  # a client, a stranger, or a child's rank spelled otherwise ("07")
            name = ident.decode(errors="replace")
            child = self.children.get(int(name)) if name.isdigit() else None
        if not (name.isdigit() or name.startswith("t")):
            self.log.error("overlay: dropping message from peer with invalid identity %r", name)
            return
        try:
            msg = Message.from_frames(frames)
        except MessageError as exc:
            self._malformed(exc, f"peer {name}", lambda m: self._send_ident(ident, m))
            return
        if child is not None:
            child.last_seen = time.monotonic()
        if msg.type == "control":
            self._control_from_child(name, child, msg)
            return
        if name.isdigit() and (child is None or not child.connected):
            # A broker we do not know (we restarted, or it is not our child): make it say hello.
            self._reset(ident)
            if msg.type == "request":
                self._send_ident(
                    ident, msg.error(errno.EAGAIN, "not joined to this parent yet; say hello first")
                )
            return
        if msg.type == "event":
            self.log.error(
                "overlay: %s sent an event upstream (%s); events only flow from the leader",
                name,
                msg.topic,
            )
            return
        if child is None and msg.type != "request":
            self.log.error(
                "overlay: client %s sent a %s (%s); clients may only send requests",
                name,
                msg.type,
                msg.topic,
            )
            return
        if msg.type == "request":
            msg.route.append(name)
        self.deliver(msg, name)

    def _from_parent(self, frames: list[bytes]) -> None:
        try:
            msg = Message.from_frames(frames)
        except MessageError as exc:
            self._malformed(exc, "parent", self._send_parent)
            return
        if msg.type == "control":
            self._control_from_parent(msg)
            return
        if msg.type == "request":
            msg.route.append(self.parent_hop or "")
        self.deliver(msg, self.parent_hop or "")

    def _malformed(self, exc: MessageError, who: str, reply: Callable[[Message], None]) -> None:
        self.log.error("overlay: malformed message from %s: %s", who, exc.errstr)
        p = exc.partial
        if p.get("type") == "request":
            route = p.get("route") if isinstance(p.get("route"), list) else []
            topic = p.get("topic") if isinstance(p.get("topic"), str) else ""
            tag = p.get("matchtag") if isinstance(p.get("matchtag"), int) else 0
            reply(Message("response", topic, -1, tag, None, exc.errnum, exc.errstr,
                          [r for r in route if isinstance(r, str)]))

    # -- control protocol ----------------------------------------------------------------
    def _report(self) -> dict:
        return {"rank": self.rank, "status": self.status, "online": sorted(self.online)}

    def _control_from_child(self, name: str, child: Child | None, msg: Message) -> None:
        if child is None:
            if name.isdigit() and name not in self._strangers:
                # Logged once per rank: until our config.reload it keeps sending keepalives.
                self._strangers.add(name)
                self.log.error(
                    "overlay: rank %s is not a child of rank %d; "
                    "ignoring its %s (and what follows)",
                    name,
                    self.rank,
                    msg.topic,
                )
            return
        try:
            body = msg.decode_payload() or {}
        except MessageError as exc:
            self.log.error("overlay: bad %s from rank %d: %s", msg.topic, child.rank, exc.errstr)
            return
        if msg.topic == "hello":
            was = child.status
            child.connected = True
            child.error = None
            self._child_report(child, body)
            self.log.info("overlay: %s (rank %d) joined%s", child.hostname, child.rank,
                          " (was lost)" if was == "lost" else "")
            self._send_ident(child.identity, Message("control", "welcome", payload={}))
        elif not child.connected:
            if msg.topic != "goodbye":
                self._reset(child.identity)
        elif msg.topic == "status":
            self._child_report(child, body)
        elif msg.topic == "goodbye":
            self._child_down(child, "offline", None)
        elif msg.topic != "keepalive":
            self.log.error("overlay: unknown control %r from rank %d", msg.topic, child.rank)

    def _reset(self, ident: bytes) -> None:
        """Ask a peer to say hello again, at most once per keepalive period (a child whose
        parent was away may deliver a backlog of queued keepalives all at once)."""
        now = time.monotonic()
        if now - self._resets.get(ident, 0.0) >= self.params.keepalive_period:
            self._resets[ident] = now
            self._send_ident(ident, Message("control", "reset", payload={}))

    def _child_report(self, child: Child, body: dict) -> None:
        status = body.get("status")
        online = body.get("online")
        if status not in STATES or not isinstance(online, list):
            self.log.error("overlay: bad status report from rank %d: %r", child.rank, body)
            return
        if status != child.status:
            child.status = status
            child.since = time.time()
        claimed = {r for r in online if isinstance(r, int)}
        child.online = claimed & child.subtree if child.subtree else claimed
        if child.online != claimed:
            self.log.error("overlay: rank %d reported ranks outside its subtree: %s", child.rank,
                           sorted(claimed - child.online))
        self._recompute()

    def _child_down(self, child: Child, state: str, error: str | None) -> None:
        child.connected = False
        child.online = set()
        child.error = error
        if child.status != state:
            child.status = state
            child.since = time.time()
        self._recompute()

    def _control_from_parent(self, msg: Message) -> None:
        if msg.topic == "reset":
            self.parent_joined = False
            self._send_parent_control("hello", self._report())
        elif msg.topic == "welcome":
            first = not self.parent_joined
            self.parent_joined = True
            # Children may have joined between our hello and this welcome: report them now.
            self._send_parent_control("status", self._report())
            if first and self.on_parent_join:
                self.on_parent_join()
        elif msg.topic == "shutdown":
            self.deliver(msg, self.parent_hop or "")
        elif msg.topic != "keepalive":
            self.log.error("overlay: unknown control %r from parent", msg.topic)

    def _tick(self) -> None:
        now = time.monotonic()
        # Three missed keepalives (torpid_max - one period) mean lost, so a dead child is
        # declared lost within torpid_max of its last sign of life.
        limit = max(
            self.params.torpid_max - self.params.keepalive_period, self.params.keepalive_period
        )
        for child in self.children.values():
            if self.params.torpid_checks and child.connected and now - child.last_seen > limit:
                self.log.error(
                    "overlay: %s (rank %d) has been unresponsive for %.3gs; marking it lost",
                    child.hostname,
                    child.rank,
                    now - child.last_seen,
                )
                self._child_down(child, "lost", "lost connection")
        if self.dealer is not None and not self.shutting_down:
            self._send_parent_control("keepalive", None)
        self.guard.flush_log()

    def _recompute(self) -> None:
        status = subtree_status([c.status for c in self.children.values()])
        online = {self.rank}
        for c in self.children.values():
            if c.connected:
                online |= c.online
        changed = status != self.status or online != self.online
        if status != self.status:
            self.status = status
            self.since = time.time()
        self.online = online
        if changed:
            if self.on_change:
                self.on_change()
            if self.dealer is not None and self._report_timer is None:
                # Coalesce a burst of child reports (e.g. at startup) into one upstream report.
                self._report_timer = self.reactor.call_later(0.005, self._flush_report)

    def _flush_report(self) -> None:
        self._report_timer = None
        if self.parent_joined:
            self._send_parent_control("status", self._report())

    # -- sending ---------------------------------------------------------------------------
    def _send_parent_control(self, topic: str, payload: dict | None) -> None:
        self._send_parent(Message("control", topic, payload=payload))

    def _send_parent(self, msg: Message) -> bool:
        if self.dealer is None:
            return False
        try:
            send_frames(self.dealer, msg.to_frames())
            return True
        except zmq.ZMQError as exc:
            self.log.error("overlay: cannot send %s %s to parent: %s", msg.type, msg.topic, exc)
            return False

    def _send_ident(self, ident: bytes, msg: Message) -> bool:
        if self.router is None:
            return False
        try:
            send_frames(self.router, [ident, *msg.to_frames()])
            return True
        except zmq.ZMQError:
            return False

    def send_parent(self, msg: Message) -> bool:
        return self._send_parent(msg)

    def send_child(self, rank: int, msg: Message) -> bool:
        child = self.children.get(rank)
        if child is None or not child.connected:
            return False
        return self._send_ident(child.identity, msg)

    def send_hop(self, hop: str, msg: Message) -> bool:
        """Send toward a route hop: the parent, a child rank, or a TCP client identity."""
        if hop == self.parent_hop:
            return self._send_parent(msg)
        if hop.isdigit():
            return self.send_child(int(hop), msg)
        return self._send_ident(hop.encode(), msg)

    def broadcast_children(self, msg: Message) -> None:
        frames = msg.to_frames()
        for child in self.children.values():
            if child.connected and self.router is not None:
                try:
                    send_frames(self.router, [child.identity, *frames])
                except zmq.ZMQError:
                    pass

    def connected_children(self) -> list[int]:
        return [r for r, c in self.children.items() if c.connected]

    def goodbye(self) -> None:
        self.shutting_down = True
        self._send_parent_control("goodbye", None)

    def health(self) -> dict:
        now = time.time()
        return {
            "rank": self.rank,
            "hostname": self.hostnames[self.rank],
            "status": self.status,
            "duration": now - self.since,
            "children": [
                {
                    "rank": c.rank,
                    "hostname": c.hostname,
                    "status": c.status,
                    "duration": now - c.since,
                    **({"error": c.error} if c.error else {}),
                }
                for c in self.children.values()
            ],
        }

