"""The broker daemon: one event loop joining the overlay, the local connector and services.

Routing follows Flux RFC 3/6: a request for this rank (or for NODEID_ANY with a
local service) is handled here; a request for a rank in a child's subtree goes
down to that child; anything else goes up to the parent. Every hop pushes where
the request came from onto the route, and responses pop it to retrace the path.
Events are sequenced by the leader and flow down to every broker.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
from fluxnode.agent.broker import attributes as attrs_mod
from fluxnode.agent.broker.connector import LocalConnector
from fluxnode.agent.broker.message import (
    NODEID_ANY,
    NODEID_UPSTREAM,
    Message,
    MessageError,
    ServiceError,
)
from fluxnode.agent.broker.overlay import Overlay, TbonParams
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.resource_service import ResourceService

SELF_HOP = "b"  # route hop of requests the broker itself originates
SHUTDOWN_GRACE = 5.0
DEFAULT_MODULES = "fluxnode.scheduler.service"

Handler = Callable[[Message], "dict | None"]


class BrokerError(Exception):
    """The broker cannot start (bad config, hostname not in hosts, socket problems)."""


class BrokerHandle:
    """What a broker module sees of the broker (see notes/INTERFACES.md)."""

    def __init__(self, broker: Broker, name: str) -> None:
        self._broker = broker
        self.name = name
        self.rank = broker.rank
        self.attrs = broker.attrs
        self.statedir = broker.statedir
        self.log = logging.getLogger(f"fluxnode.module.{name}")

    @property
    def size(self) -> int:
        """The instance size now (``config.reload`` may change it)."""
        return self._broker.size

    def register(self, topic: str, handler: Handler) -> None:
        self._broker.register(topic, handler)

    def publish(self, topic: str, payload: dict | None = None) -> None:
        self._broker.publish(topic, payload)

    def resources(self) -> dict:
        return self._broker.resource_service.R()

    def down_ranks(self) -> list[int]:
        return self._broker.down_ranks()

    def on_resources_changed(self, callback: Callable[[dict, list[int]], None]) -> None:
        self._broker.resource_service.watchers.append(callback)

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run `callback` on the broker's event loop after `delay` seconds."""
        self._broker.reactor.call_later(delay, callback)


class Broker:
    def __init__(self, config: Any, hostname: str, attrs: dict[str, str], log: logging.Logger,
                 topology: Any = None) -> None:
        from fluxnode.broker_conf.topology import Topology

        self.config = config
        self.log = log
        self.hostname = hostname
        hostnames = list(config.hostnames)
        self.singleton = not hostnames  # no [bootstrap] hosts: a lone broker, like flux
        if self.singleton:
            hostnames = [hostname]
        if hostname not in hostnames:
            raise BrokerError(f"hostname {hostname!r} is not in the [bootstrap] hosts of {config.path} "
                              f"({len(hostnames)} hosts); use --hostname to pick one")
        self.rank = config.rank_of(hostname)
        self.size = config.size
        self.hostnames = hostnames
        topo_spec = attrs.get("tbon.topo") or config.tbon.topo
        if topology is not None and topology.size == config.size:
            self.topology = topology
        elif topo_spec == config.tbon.topo:
            self.topology = config.topology()
        else:
            self.topology = Topology.from_spec(topo_spec, self.size)
        self._given = set(attrs)
        self._topo_override = attrs.get("tbon.topo") or None
        rundir = attrs.get("rundir")
        local_uri = attrs.get("local-uri") or (f"local://{rundir}/local" if rundir else attrs_mod.DEFAULT_LOCAL_URI)
        self.statedir = Path(attrs.get("statedir") or rundir or "/var/lib/fluxnode")
        self.quorum = self._parse_quorum(attrs.get("broker.quorum"))
        self.attrs: dict[str, str] = {
            **attrs,
            "rank": str(self.rank),
            "size": str(self.size),
            "hostname": hostname,
            "tbon.topo": topo_spec,
            "tbon.endpoint": "" if self.singleton else config.bind_uri(self.rank),
            "local-uri": local_uri,
            "broker.quorum": str(self.quorum),
            "broker.pid": str(os.getpid()),
            "statedir": str(self.statedir),
        }
        if rundir:
            self.attrs["rundir"] = rundir
        self.reactor = Reactor()
        self.ctx: zmq.Context | None = None
        self.services: dict[str, Handler] = {}
        self.event_handlers: list[Callable[[Message], None]] = []
        self.tcp_subscribers: dict[str, list[str]] = {}
        self.modules: list[tuple[str, Any]] = []
        self.event_seq = 0
        self.shutting_down = False
        self.exit_code = 0
        self.quorum_reached = False
        self._last_online: list[int] = []
        self._shutdown_timer = None
        self.started = time.time()
        self.resource_service = ResourceService(self)
        self.connector = LocalConnector(self.reactor, local_uri, log, self._from_local,
                                        allow_root=bool(getattr(config.access, "allow_root_owner", False)))
        self.overlay: Overlay | None = None
        self.tbon_fd: int | None = None

    def _parse_quorum(self, value: str | None, size: int | None = None) -> int:
        size = self.size if size is None else size
        if value is None or value == "":
            return size
        v = value.strip()
        if v.isdigit():
            n = int(v)
        else:
            from fluxnode.broker_conf import idset

            try:
                n = len(idset.decode(v))
            except ValueError as exc:
                raise BrokerError(f"broker.quorum: {exc}") from None
        if not 1 <= n <= size:
            raise BrokerError(f"broker.quorum: {value!r} must be between 1 and the instance size {size}")
        return n

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        from fluxnode.broker_conf import certificate, fsd

        cert_path = self.config.bootstrap.curve_cert
        if cert_path is None:
            if not self.singleton:
                raise BrokerError(f"{self.config.path}: bootstrap.curve_cert is required for a multi-broker instance")
            cert = certificate.generate()  # a lone broker binds nothing; the key is never used
        else:
            try:
                cert = certificate.load(Path(cert_path))
            except Exception as exc:
                raise BrokerError(f"cannot load CURVE certificate: {exc}") from None
        if not cert.secret_key:
            raise BrokerError(f"{cert_path}: certificate has no secret key")
        tb = self.config.tbon

        def seconds(name: str, default: float) -> float:
            value = getattr(tb, name, None)
            return default if value is None else fsd.parse(value)

        params = TbonParams(
            torpid_min=seconds("torpid_min", 5.0), torpid_max=seconds("torpid_max", 30.0),
            tcp_user_timeout=seconds("tcp_user_timeout", 20.0), connect_timeout=seconds("connect_timeout", 30.0),
        )
        if getattr(tb, "child_rcvhwm", 0):
            params.hwm = int(tb.child_rcvhwm)
        for name in ("keepalive_enable", "keepalive_count", "keepalive_idle", "keepalive_interval"):
            if getattr(tb, name, None) is not None:
                setattr(params, name, getattr(tb, name))
        parent = self.topology.parent(self.rank)
        children = self.topology.children(self.rank)
        self.ctx = zmq.Context(io_threads=1)
        self.ctx.setsockopt(zmq.BLOCKY, 0)
        self.overlay = Overlay(
            self.reactor, self.ctx, self.log, rank=self.rank, hostnames=self.hostnames, parent=parent,
            children=children,
            bind_uri=self.attrs["tbon.endpoint"] if (children or self.rank == 0) and not self.singleton else None,
            parent_uri=self.config.connect_uri(parent) if parent is not None else None,
            public_key=_bytes(cert.public_key), secret_key=_bytes(cert.secret_key), params=params,
            bind_fd=self.tbon_fd, subtrees={c: self.topology.subtree(c) for c in children},
            deliver=self._from_overlay, on_change=self._overlay_changed, on_parent_join=self._joined_parent,
        )
        try:
            self.statedir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            if "statedir" in self._given:
                raise BrokerError(f"statedir {self.statedir}: {exc.strerror}") from None
            self.log.warning("broker: statedir %s: %s (modules cannot keep state)", self.statedir, exc.strerror)
        self._register_builtin()
        self.resource_service.discover_local()  # before any socket: a bad override fails cleanly
        try:
            try:
                self.connector.start()
            except OSError as exc:
                raise BrokerError(f"local connector {self.attrs['local-uri']}: {exc}") from None
            try:
                self.overlay.start()
            except zmq.ZMQError as exc:
                raise BrokerError(f"overlay: cannot bind/connect {self.attrs['tbon.endpoint']}: {exc}") from None
        except BaseException:
            self._close()
            raise
        if self.rank == 0:
            self._load_modules()
            self._overlay_changed()
        self._install_signals()

    def run(self) -> int:
        try:
            self.reactor.run()
        finally:
            self._close()
        return self.exit_code

    def _close(self) -> None:
        for name, obj in reversed(self.modules):
            close = getattr(obj, "close", None)
            if close:
                try:
                    close()
                except Exception:
                    self.log.exception("module %s: close failed", name)
        self.connector.close()
        if self.overlay:
            self.overlay.close()
        if self.ctx:
            self.ctx.term()

    def _install_signals(self) -> None:
        rfd, wfd = socket.socketpair()
        rfd.setblocking(False)
        wfd.setblocking(False)
        self._sigsocks = (rfd, wfd)
        signal.set_wakeup_fd(wfd.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)

        def on_signal(_revents: int) -> None:
            try:
                data = rfd.recv(64)
            except BlockingIOError:
                return
            for b in data:
                if b in (signal.SIGTERM, signal.SIGINT):
                    self.log.info("broker: received signal %d, leaving the overlay", b)
                    self.leave()

        self.reactor.add(rfd, zmq.POLLIN, on_signal)

    def leave(self) -> None:
        """Stop this broker only (e.g. its pod is deleted): goodbye to the parent, children
        keep reconnecting until it is back. `broker.shutdown` on rank 0 stops the instance."""
        self._finish_shutdown()

    def begin_shutdown(self) -> None:
        """Shut down the subtree below first, then say goodbye to the parent (as Flux does)."""
        if self.shutting_down:
            return
        self.shutting_down = True
        assert self.overlay is not None
        self.overlay.broadcast_children(Message("control", "shutdown", payload={}))
        self._shutdown_timer = self.reactor.call_later(SHUTDOWN_GRACE, self._finish_shutdown)
        self._check_shutdown()

    def _check_shutdown(self) -> None:
        if self.shutting_down and self.overlay and not self.overlay.connected_children():
            self._finish_shutdown()

    def _finish_shutdown(self) -> None:
        if self._shutdown_timer:
            self._shutdown_timer.cancel()
        assert self.overlay is not None
        if self.overlay.dealer is not None:
            self.overlay.goodbye()
            self.overlay.dealer.linger = 1000
        self.reactor.stop()

    # -- services --------------------------------------------------------------------------
    def register(self, topic: str, handler: Handler) -> None:
        if not topic or topic in self.services:
            raise ValueError(f"service topic {topic!r} is empty or already registered")
        self.services[topic] = handler

    def _register_builtin(self) -> None:
        self.register("broker.ping", self._ping)
        self.register("broker.status", self._status)
        self.register("overlay.health", lambda m: self.overlay.health() if self.overlay else {})
        self.register("attr.get", self._attr_get)
        self.register("overlay.topology", self._topology)
        self.register("event.subscribe", self._event_subscribe)
        self.register("config.reload", self._config_reload)
        if self.rank == 0:
            self.register("broker.shutdown", self._shutdown_request)
            self.register("event.pub", self._event_pub)
        self.resource_service.register()

    def _ping(self, msg: Message) -> dict:
        payload = dict(msg.payload or {})
        payload["route"] = "!".join([*msg.route, str(self.rank)])
        return payload

    def _status(self, msg: Message) -> dict:
        from fluxnode.broker_conf import idset

        online = sorted(self.overlay.online) if self.overlay else [self.rank]
        return {"rank": self.rank, "size": self.size, "online": idset.encode(online), "count": len(online),
                "quorum": self.quorum, "state": "run" if self.quorum_reached else "quorum"}

    def _topology(self, msg: Message) -> dict:
        rank = (msg.payload or {}).get("rank", self.rank)
        if not isinstance(rank, int) or not 0 <= rank < self.size:
            raise ServiceError(errno.EINVAL, f"overlay.topology: no such rank {rank!r}")
        return {"size": self.size, "hostnames": self.hostnames, "tree": self.topology.json_subtree(rank)}

    def _attr_get(self, msg: Message) -> dict:
        name = (msg.payload or {}).get("name")
        if name is None:
            return {"attrs": self.attrs}
        if name not in self.attrs:
            raise ServiceError(errno.ENOENT, f"unknown attribute {name!r}")
        return {"name": name, "value": self.attrs[name]}

    def _shutdown_request(self, msg: Message) -> dict:
        self.reactor.call_later(0, self.begin_shutdown)
        return {}

    def _event_subscribe(self, msg: Message) -> dict:
        """Subscriptions of TCP clients (local clients subscribe at the connector)."""
        topic = (msg.payload or {}).get("topic")
        if not isinstance(topic, str):
            raise ServiceError(errno.EINVAL, "event.subscribe needs a string 'topic' prefix")
        if len(msg.route) != 1 or not msg.route[0].startswith("t"):
            raise ServiceError(errno.EPROTO, "event.subscribe must be sent to the broker the client is connected to")
        self.tcp_subscribers.setdefault(msg.route[0], []).append(topic)
        return {}

    def _event_pub(self, msg: Message) -> dict:
        p = msg.payload or {}
        topic = p.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ServiceError(errno.EINVAL, "event.pub needs a 'topic' string")
        payload = p.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise ServiceError(errno.EINVAL, "event.pub 'payload' must be an object")
        return {"seq": self.publish(topic, payload)}

    def publish(self, topic: str, payload: dict | None = None) -> int:
        if self.rank != 0:
            self.request(Message.request("event.pub", {"topic": topic, "payload": payload}, nodeid=0))
            return -1
        self.event_seq += 1
        self._deliver_event(Message("event", topic, NODEID_ANY, 0, payload, seq=self.event_seq))
        return self.event_seq

    def _deliver_event(self, msg: Message) -> None:
        assert self.overlay is not None
        self.overlay.broadcast_children(msg)
        self.connector.deliver_event(msg)
        for ident, prefixes in list(self.tcp_subscribers.items()):
            if any(msg.topic.startswith(p) for p in prefixes) and not self.overlay.send_hop(ident, msg):
                del self.tcp_subscribers[ident]  # the client is gone
        for handler in self.event_handlers:
            handler(msg)

    def request(self, msg: Message) -> None:
        """Send a request originated by this broker; its response is only logged on error."""
        msg.route = [SELF_HOP]
        self._route_request(msg)

    # -- config.reload -----------------------------------------------------------------------
    def _config_reload(self, msg: Message) -> dict:
        """Re-read --config-path and apply size, hosts and children in place (``flux config reload``).

        What a running broker cannot change without a restart (its rank, its bound endpoint,
        its parent, [tbon]/[access] settings, the certificate) is refused with an error naming
        it, so the node agent falls back to restarting this one broker; an invalid config is
        refused with EINVAL. Either way the broker keeps serving on the config it has.
        """
        from fluxnode.broker_conf import config as config_mod

        path = self.config.path
        if path is None:
            raise ServiceError(errno.EINVAL, "config.reload: this broker was not started from a config file")
        try:
            new = config_mod.load(path)
        except config_mod.ConfigError as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        plan = self._reload_plan(new)
        self._apply_reload(new, *plan)
        self.log.info("broker: config.reload: size %d, children %s", self.size,
                      ",".join(map(str, self.topology.children(self.rank))) or "none")
        return {"rank": self.rank, "size": self.size, "children": self.topology.children(self.rank)}

    def _reload_plan(self, new: Any) -> tuple[Any, int]:
        """Check that `new` can be applied in place; returns (topology, quorum)."""
        from fluxnode.broker_conf import config as config_mod
        from fluxnode.broker_conf.topology import Topology, TopologyError

        old = self.config

        def restart(problem: str) -> ServiceError:
            return ServiceError(errno.EOPNOTSUPP, f"config.reload: {new.path}: {problem}; restart the broker to apply it")

        if not new.hostnames and not self.singleton:
            raise restart("bootstrap.hosts is now empty (a single broker)")
        if new.hostnames and self.singleton:
            raise restart("bootstrap.hosts is now set (this broker was started alone)")
        try:
            rank = new.rank_of(self.hostname)
            spec = self._topo_override or new.tbon.topo
            topology = new.topology() if spec == new.tbon.topo else Topology.from_spec(spec, new.size)
            bind = "" if self.singleton else new.bind_uri(rank)
            parent = topology.parent(rank)
            parent_uri = new.connect_uri(parent) if parent is not None else None
            new.excluded_ranks()
        except (config_mod.ConfigError, TopologyError) as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        if rank != self.rank:
            raise restart(f"rank of {self.hostname} changed from {self.rank} to {rank}")
        assert self.overlay is not None
        if self.overlay.router is not None and bind != self.attrs["tbon.endpoint"]:
            raise restart(f"bind endpoint of rank {rank} changed from {self.attrs['tbon.endpoint']} to {bind}")
        old_parent = self.overlay.parent_rank
        if parent != old_parent:
            raise restart(f"parent of rank {rank} changed from {old_parent} to {parent}")
        if parent_uri != self.overlay.parent_uri:
            raise restart(f"endpoint of parent rank {parent} changed from {self.overlay.parent_uri} to {parent_uri}")
        for table in ("tbon", "access"):
            if getattr(new, table) != getattr(old, table) and not (table == "tbon" and self._tbon_same(old, new)):
                raise restart(f"[{table}] changed")
        if new.bootstrap.curve_cert != old.bootstrap.curve_cert:
            raise restart("bootstrap.curve_cert changed")
        quorum_attr = self.attrs.get("broker.quorum") if "broker.quorum" in self._given else None
        try:
            quorum = self._parse_quorum(quorum_attr, new.size)
        except BrokerError as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        return topology, quorum

    @staticmethod
    def _tbon_same(old: Any, new: Any) -> bool:
        """[tbon] equal except topo (whose effect, the tree, is checked on its own)."""
        import dataclasses

        return dataclasses.replace(new.tbon, topo=old.tbon.topo) == old.tbon

    def _apply_reload(self, new: Any, topology: Any, quorum: int) -> None:
        assert self.overlay is not None
        hostnames = list(new.hostnames) if new.hostnames else [self.hostname]
        children = topology.children(self.rank)
        bind = self.attrs["tbon.endpoint"] if self.singleton else new.bind_uri(self.rank)
        kept = (self.config, self.size, self.hostnames, self.topology, self.quorum, dict(self.attrs))
        self.config, self.size, self.hostnames, self.topology, self.quorum = new, new.size, hostnames, topology, quorum
        self.attrs.update({"size": str(self.size), "tbon.endpoint": bind, "broker.quorum": str(quorum),
                           "tbon.topo": self._topo_override or new.tbon.topo})
        if self.rank == 0:
            self.resource_service.reconfigure()
            self._last_online = []  # log the online set against the new size
        try:
            self.overlay.reconfigure(hostnames, children, {c: topology.subtree(c) for c in children}, bind)
        except zmq.ZMQError as exc:
            self.config, self.size, self.hostnames, self.topology, self.quorum, attrs = kept
            self.attrs.clear()
            self.attrs.update(attrs)
            raise ServiceError(exc.errno or errno.EIO,
                               f"config.reload: cannot bind {bind} for the new children: {exc}") from None
        self._overlay_changed()

    # -- modules ---------------------------------------------------------------------------
    def _load_modules(self) -> None:
        spec = self.attrs.get("broker.modules")
        explicit = spec is not None
        names = [n.strip() for n in (spec if explicit else DEFAULT_MODULES).split(",") if n.strip()]
        for name in names:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                level = logging.ERROR if explicit else logging.INFO
                self.log.log(level, "broker: module %s not loaded: %s", name, exc)
                continue
            loader = getattr(module, "load", None)
            if loader is None:
                self.log.error("broker: module %s has no load(broker) function", name)
                continue
            try:
                obj = loader(BrokerHandle(self, name.rsplit(".", 1)[-1]))
            except Exception:
                self.log.exception("broker: module %s failed to load", name)
                continue
            self.modules.append((name, obj))
            self.log.info("broker: loaded module %s", name)

    # -- routing ---------------------------------------------------------------------------
    def _from_local(self, msg: Message, client_id: str) -> None:
        if msg.nodeid == NODEID_UPSTREAM:
            msg.nodeid = NODEID_ANY
            if self.overlay and self.overlay.parent_rank is not None:
                self._forward_up(msg)
                return
        self._route_request(msg)

    def _from_overlay(self, msg: Message, hop: str) -> None:
        if msg.type == "request":
            self._route_request(msg)
        elif msg.type == "response":
            self.respond(msg)
        elif msg.type == "event":
            if msg.seq is not None:
                if self.event_seq and msg.seq > self.event_seq + 1:
                    self.log.warning("broker: missed events %d-%d (disconnected from the leader)",
                                     self.event_seq + 1, msg.seq - 1)
                self.event_seq = msg.seq
            self._deliver_event(msg)
        elif msg.type == "control" and msg.topic == "shutdown":
            self.begin_shutdown()

    def _route_request(self, msg: Message) -> None:
        nodeid = msg.nodeid
        if nodeid == NODEID_UPSTREAM:
            nodeid = msg.nodeid = NODEID_ANY
        if nodeid == self.rank or (nodeid == NODEID_ANY and msg.topic in self.services):
            self._handle(msg)
            return
        if nodeid == NODEID_ANY:
            if self.overlay and self.overlay.parent_rank is not None:
                self._forward_up(msg)
            else:
                self.respond(msg.error(errno.ENOSYS, f"unknown service method {msg.topic!r}"))
            return
        if not 0 <= nodeid < self.size:
            self.respond(msg.error(errno.EHOSTUNREACH, f"no such rank {nodeid} (instance size {self.size})"))
            return
        assert self.overlay is not None
        child = self.topology.child_route(self.rank, nodeid)
        if child is not None:
            if not self.overlay.send_child(child, msg):
                state = self.overlay.children[child].status
                self.respond(msg.error(errno.EHOSTUNREACH,
                                       f"rank {nodeid} is unreachable: {self.hostnames[child]} (rank {child}) is {state}"))
            return
        if self.overlay.parent_rank is None:
            self.respond(msg.error(errno.EHOSTUNREACH, f"rank {nodeid} is unreachable"))
            return
        self._forward_up(msg)

    def _forward_up(self, msg: Message) -> None:
        assert self.overlay is not None
        if not self.overlay.send_parent(msg):
            self.respond(msg.error(errno.EHOSTUNREACH, "parent is unreachable"))

    def _handle(self, msg: Message) -> None:
        handler = self.services.get(msg.topic)
        if handler is None:
            self.respond(msg.error(errno.ENOSYS, f"unknown service method {msg.topic!r}"))
            return
        try:
            msg.decode_payload()
            result = handler(msg)
        except MessageError as exc:
            self.log.error("broker: %s: %s", msg.topic, exc.errstr)
            self.respond(msg.error(exc.errnum, exc.errstr))
            return
        except ServiceError as exc:
            self.respond(msg.error(exc.errnum, exc.errstr))
            return
        except Exception as exc:
            self.log.exception("broker: service %s failed", msg.topic)
            self.respond(msg.error(errno.EIO, f"{msg.topic}: internal error: {exc}"))
            return
        if result is not None and not isinstance(result, dict):
            self.log.error("broker: service %s returned %s, not a dict", msg.topic, type(result).__name__)
            self.respond(msg.error(errno.EIO, f"{msg.topic}: service returned a non-object"))
            return
        self.respond(msg.response(result or {}))

    def respond(self, msg: Message) -> None:
        """Send a response back along its route (pop the last hop)."""
        if not msg.route:
            self.log.error("broker: dropping %s response with an empty route", msg.topic)
            return
        hop = msg.route.pop()
        if hop == SELF_HOP:
            if msg.errnum:
                self.log.error("broker: %s failed: %s", msg.topic, msg.errstr)
            return
        if hop.startswith("c"):
            self.connector.send(hop, msg)
            return
        if self.overlay is None or not self.overlay.send_hop(hop, msg):
            self.log.debug("broker: cannot route %s response to %s", msg.topic, hop)

    # -- overlay notifications -------------------------------------------------------------
    def _joined_parent(self) -> None:
        self.resource_service.report()

    def _overlay_changed(self) -> None:
        self._check_shutdown()
        if self.rank != 0 or self.overlay is None:
            return
        from fluxnode.broker_conf import hostlist, idset

        online = sorted(self.overlay.online)
        if online != self._last_online:
            self._last_online = online
            self.log.info("online: %s (ranks %s)", hostlist.encode(self.hostnames[r] for r in online),
                          idset.encode(online))
            if not self.quorum_reached and len(online) >= self.quorum:
                self.quorum_reached = True
                self.log.info("quorum reached")
            self.resource_service.changed()

    def down_ranks(self) -> list[int]:
        online = self.overlay.online if self.overlay else {self.rank}
        return [r for r in range(self.size) if r not in online]


def _bytes(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else key


def setup_logging(rank: int, hostname: str, attrs: dict[str, str]) -> logging.Logger:
    level = attrs_mod.stderr_level(attrs.get("log-stderr-level", "6"))
    root = logging.getLogger("fluxnode")
    root.handlers.clear()
    root.setLevel(logging.DEBUG)
    fmt = logging.Formatter(f"%(asctime)s {hostname} broker[{rank}]: %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(fmt)
    root.addHandler(handler)
    if attrs.get("log-filename"):
        fh = logging.FileHandler(attrs["log-filename"])
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(fmt)
        root.addHandler(fh)
    root.propagate = False
    return logging.getLogger("fluxnode.broker")


def load_config(config_path: str) -> Any:
    """Load broker.toml (BrokerConfig resolves its host list once)."""
    from fluxnode.broker_conf import config as config_mod

    return config_mod.load(config_path)


def main(config_path: str, attrs: dict[str, str], hostname: str | None = None, *, config: Any = None,
         topology: Any = None, tbon_fd: int | None = None) -> int:
    """Run one broker until shutdown; returns the exit code. Errors are one line on stderr.

    `config`/`topology` may be passed already loaded (the fork launcher shares them), and
    `tbon_fd` a listening socket to use for the TBON endpoint instead of binding one.
    """
    hostname = hostname or socket.gethostname()
    try:
        if config is None:
            config = load_config(config_path)
        hosts = config.hostnames
        rank = config.rank_of(hostname) if hostname in hosts else (0 if not hosts else -1)
        log = setup_logging(rank, hostname, attrs)
        broker = Broker(config, hostname, attrs, log, topology=topology)
        broker.tbon_fd = tbon_fd
        broker.start()
    except (BrokerError, attrs_mod.AttrError, ValueError, OSError) as exc:
        print(f"fluxnode-broker: {exc}", file=sys.stderr)
        return 1
    return broker.run()
