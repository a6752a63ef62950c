"""The broker daemon: one event loop joining the overlay, the local connector and services.

Like flux-core's broker.c this file only wires the parts together and runs them;
each concept has its own module:

* boot.py            -- who this broker is: rank, size, tree, attributes (`attr.get`)
* overlay.py         -- the TBON sockets, peers and subtree health
* connector.py       -- the local Unix socket for clients on this node
* services.py        -- the service registry and the one way a handler is called
* routing.py         -- requests down/up the tree, responses back along their route
* events.py          -- events sequenced by the leader and flooded down the tree
* quorum.py          -- the online set and the quorum (`broker.status`)
* shutdown.py        -- signals, leaving the overlay, `broker.shutdown`
* config_reload.py   -- `config.reload`
* fanout.py          -- target ranks of a request and their split by child subtree
* exec_service.py    -- `rexec.*`: processes on a set of ranks, fanned out down the tree
                        (built by a worker with the first `rexec.*` request it serves)
* resource_service.py-- node resources and R on the leader (`resource.*`)
* modules.py         -- broker modules loaded on the leader and their `BrokerHandle`
* content_store.py   -- blobs by hash: the leader's store, the others' caches (`content.*`)
* archive_service.py -- named archives of files, extracted down the tree (`archive.*`)
                        (both built by a worker with the first request it serves for them)
* logging_setup.py   -- where log lines go (`broker_log`: the line and its sinks)

The parts share one `InstanceState` (changed in place by config.reload) and reach
each other only through what they are given here.
"""

from __future__ import annotations

import _socket  # not `socket`: see connector.py
import errno
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fluxnode.agent.broker import attributes
from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.boot import BrokerError, InstanceState, boot
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.config_reload import ConfigReload
from fluxnode.agent.broker.connector import ConnectorLimits, LocalConnector
from fluxnode.agent.broker.events import EventBus
from fluxnode.agent.broker.fd_limit import raise_fd_limit
from fluxnode.agent.broker.logging_setup import setup_logging
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.agent.broker.modules import BrokerHandle, ModuleLoader, ModuleLoadError
from fluxnode.agent.broker.overlay import Overlay, TbonParams
from fluxnode.agent.broker.overlay_guard import GuardLimits
from fluxnode.agent.broker.quorum import Quorum
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.resource_service import ResourceService, ResourceServiceContext
from fluxnode.agent.broker.routing import Router
from fluxnode.agent.broker.services import ServiceRegistry
from fluxnode.agent.broker.shutdown import Shutdown
from fluxnode.broker_conf import certificate
from fluxnode.broker_conf import config as config_mod
from fluxnode.broker_conf.certificate import Certificate
from fluxnode.broker_conf.config import BrokerConfig
from fluxnode.broker_conf.rv1 import NodeResources
from fluxnode.broker_conf.topology import Topology

if TYPE_CHECKING:
    from fluxnode.agent.broker.archive_service import ArchiveService
    from fluxnode.agent.broker.content_store import ContentStore
    from fluxnode.agent.broker.exec_service import ExecService

# What a worker's exec service, and its content store with the archive service, register:
# the worker holds these topics until the first is asked for (ServiceRegistry.register_lazy)
EXEC_TOPICS = ("rexec.exec", "rexec.fanout", "rexec.credit", "rexec.write", "rexec.kill",
               "rexec.stats")
STORAGE_TOPICS = ("content.load", "content.stats-get", "archive.extract")


@dataclass(frozen=True)
class Shared:
    """What the fork launcher (`fluxnode start`) found once for all its brokers, so each
    forked broker does not find it again: the instance certificate (loaded from
    bootstrap.curve_cert) and this machine's resources (discovery.discover(), used when no
    override applies). In a forked child, reading and parsing them cost about 1 and 2 ms
    of CPU (mostly page faults), 3 s at 1,024 brokers (issue 32)."""

    cert: Certificate | None = None
    machine: NodeResources | None = None


class Broker:
    """One broker: builds its parts from the config and runs them on one event loop."""

    def __init__(
        self,
        config: BrokerConfig,
        hostname: str,
        attrs: dict[str, str],
        log: BrokerLog,
        topology: Topology | None = None,
        tbon_fd: int | None = None,
        shared: Shared | None = None,
    ) -> None:
        self.log = log
        self.shared = shared or Shared()
        self.state = state = boot(config, hostname, attrs, topology)
        self.reactor = Reactor(log)
        self.services = ServiceRegistry(log)
        self.connector = LocalConnector(
            self.reactor,
            state.attrs["local-uri"],
            log,
            self._from_local,
            allow_root=bool(getattr(config.access, "allow_root_owner", False)),
            limits=ConnectorLimits(**attributes.sizes(state.attrs, "connector.")),
        )
        # before any socket: a bad certificate fails cleanly
        self.cert = self.shared.cert or _load_certificate(state)
        self.ctx = zmq.Context(io_threads=1)
        self.ctx.set(zmq.BLOCKY, 0)
        self.overlay = self._make_overlay(tbon_fd)
        self.router = Router(state, self.services, self.overlay, self.connector, log)
        self.events = EventBus(state, self.overlay, self.connector, self.router.request, log)
        self.quorum = Quorum(state, self.overlay, log)
        self.shutdown = Shutdown(self.reactor, self.overlay, log)
        self.resources = ResourceService(
            ResourceServiceContext(
                state=state,
                services=self.services,
                request=self.router.request,
                forget=self.router.forget,
                down_ranks=self.quorum.down_ranks,
                call_later=self.reactor.call_later,
                log=log,
            )
        )
        self.config_reload = ConfigReload(state, self.overlay, self.resources, self.quorum,
                                          on_applied=self._overlay_changed, log=log)
        self.modules = ModuleLoader(log)
        self.exec: ExecService | None = None  # see _start_exec
        self._joined = False  # this broker has joined its parent at least once
        self.content: ContentStore | None = None  # see _start_storage
        self.archives: ArchiveService | None = None

    def _make_overlay(self, tbon_fd: int | None) -> Overlay:
        state = self.state
        parent = state.topology.parent(state.rank)
        children = state.topology.children(state.rank)
        bind = (children or state.rank == 0) and not state.singleton
        assert (
            self.cert.secret_key is not None
        )  # certificate.load(require_secret=True) and generate() give one
        return Overlay(
            self.reactor,
            self.ctx,
            self.log,
            rank=state.rank,
            hostnames=state.hostnames,
            parent=parent,
            children=children,
            bind_uri=state.attrs["tbon.endpoint"] if bind else None,
            parent_uri=state.config.connect_uri(parent) if parent is not None else None,
            public_key=self.cert.public_key,
            secret_key=self.cert.secret_key,
            params=TbonParams.from_config(state.config.tbon),
            bind_fd=tbon_fd,
            subtrees={c: state.topology.subtree(c) for c in children},
            guard_limits=GuardLimits(**attributes.sizes(state.attrs, "tbon.")),
            deliver=self._from_overlay,
            on_change=self._overlay_changed,
            on_parent_join=self._joined_parent,
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        state = self.state
        try:
            state.statedir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            if "statedir" in state.given:
                raise BrokerError(f"statedir {state.statedir}: {exc.strerror}") from None
            self.log.warning(
                "broker: statedir %s: %s (modules cannot keep state)", state.statedir, exc.strerror
            )
        self._register_services()
        # before any socket: a bad override fails cleanly
        self.resources.discover_local(self.shared.machine)
        try:
            if state.rank == 0:
                # Before any socket too: a leader whose module fails (a damaged journal) exits
                # before a child joins it or a client sees it answer.
                self.modules.load(state.attrs.get("broker.modules"), self._module_handle)
            try:
                self.connector.start()
            except OSError as exc:
                raise BrokerError(f"local connector {state.attrs['local-uri']}: {exc}") from None
            try:
                self.overlay.start()
            except zmq.ZMQError as exc:
                raise BrokerError(
                    f"overlay: cannot bind/connect {state.attrs['tbon.endpoint']}: {exc}"
                ) from None
        except BaseException:
            self._close()
            raise
        if state.rank == 0:
            self._overlay_changed()
        self.shutdown.install_signals()

    def run(self) -> int:
        """Serve until shutdown; returns the exit code."""
        try:
            self.reactor.run()
        finally:
            self._close()
        return 0

    def _close(self) -> None:
        self.modules.close()
        if self.exec is not None:
            self.exec.close()
        if self.archives is not None:
            self.archives.close()
        if self.content is not None:
            self.content.close()
        self.connector.close()
        self.overlay.close()
        self.ctx.term()

    def _module_handle(self, name: str) -> BrokerHandle:
        return BrokerHandle(
            name, self.state, self.services, self.events, self.resources, self.quorum, self.reactor
        )

    # -- services --------------------------------------------------------------------------
    def _register_services(self) -> None:
        register = self.services.register
        register("broker.ping", self._ping)
        register("broker.status", self.quorum.status)
        register("overlay.health", lambda m: self.overlay.health())
        register("attr.get", self.state.attr_get)
        register("overlay.topology", self._topology)
        register("config.reload", self.config_reload)
        self.events.register(self.services)
        if self.state.rank == 0:
            self.shutdown.register(self.services)
        self.resources.register()
        if self.state.rank == 0:
            self._start_exec()
        else:
            self.services.register_lazy(EXEC_TOPICS, self._start_exec)
        if self.state.rank == 0:
            try:
                self._start_storage()
            except OSError as exc:
                raise BrokerError(str(exc)) from None
        else:
            self.services.register_lazy(STORAGE_TOPICS, self._start_storage)

    def _start_exec(self) -> None:
        """The exec service: the leader's at start, a worker's with the first `rexec.*`
        request it serves (its module is imported then; most workers are never asked)."""
        from fluxnode.agent.broker.exec_service import ExecService

        self.exec = ExecService(self.state, self.router, self.overlay, self.connector,
                                self.reactor, self.log)
        self.exec.register(self.services)
        if self._joined:
            self.exec.parent_rejoined()  # its first join: it was before the service existed

    def _start_storage(self) -> None:
        """The content store and the archive service: the leader's at start (they open its
        databases), a worker's with the first `content.*` or `archive.*` request it serves."""
        from fluxnode.agent.broker.archive_service import ArchiveService, ArchiveServiceContext
        from fluxnode.agent.broker.content_store import ContentStore

        content = ContentStore(self.state, self.services, self.router.request,
                               self.router.respond, self.router.forget,
                               self.reactor.call_later, self.log)
        archives = ArchiveService(ArchiveServiceContext(
            state=self.state, services=self.services, content=content,
            request=self.router.request, respond=self.router.respond, forget=self.router.forget,
            child_connected=lambda r: r in self.overlay.connected_children(),
            call_later=self.reactor.call_later, log=self.log))
        content.open()
        self.content = content
        archives.open()
        self.archives = archives
        content.register()
        archives.register()

    def _ping(self, msg: Message) -> dict:
        payload = dict(msg.payload or {})
        payload["route"] = "!".join([*msg.route, str(self.state.rank)])
        return payload

    def _topology(self, msg: Message) -> dict:
        state = self.state
        rank = (msg.payload or {}).get("rank", state.rank)
        if not isinstance(rank, int) or not 0 <= rank < state.size:
            raise ServiceError(errno.EINVAL, f"overlay.topology: no such rank {rank!r}")
        return {
            "size": state.size,
            "hostnames": state.hostnames,
            "tree": state.topology.json_subtree(rank),
        }

    # -- input from clients and the overlay -----------------------------------------------
    def _from_local(self, msg: Message, client_id: str) -> None:
        self.router.from_local(msg, client_id)

    def _from_overlay(self, msg: Message, hop: str) -> None:
        if msg.type == "request":
            self.router.route_request(msg)
        elif msg.type == "response":
            self.router.respond(msg)
        elif msg.type == "event":
            self.events.from_parent(msg)
        elif msg.type == "control" and msg.topic == "shutdown":
            self.shutdown.begin()

    def _joined_parent(self) -> None:
        """Joined the parent (again): tell the leader what this node has; work the parent
        asked for before it restarted has nobody waiting for it any more."""
        self.resources.report()
        self._joined = True
        if self.exec is not None:
            self.exec.parent_rejoined()

    def _overlay_changed(self) -> None:
        if self.exec is not None:
            self.exec.overlay_changed()
        self.shutdown.check()
        if self.state.rank == 0 and self.quorum.online_changed():
            self.resources.changed()
            self.resources.online_changed()


def _load_certificate(state: InstanceState) -> Certificate:
    """The instance CURVE certificate; a lone broker binds nothing, so it may go without."""
    cert_path = state.config.bootstrap.curve_cert
    if cert_path is None:
        if not state.singleton:
            raise BrokerError(
                f"{state.config.path}: bootstrap.curve_cert is required for a multi-broker instance"
            )
        return certificate.generate()  # the key is never used
    try:
        return certificate.load(Path(cert_path), require_secret=True)
    except Exception as exc:
        raise BrokerError(f"cannot load CURVE certificate: {exc}") from None


def load_config(config_path: str) -> BrokerConfig:
    """Load broker.toml (BrokerConfig resolves its host list once)."""
    return config_mod.load(config_path)


def main(
    config_path: str,
    attrs: dict[str, str],
    hostname: str | None = None,
    *,
    config: BrokerConfig | None = None,
    topology: Topology | None = None,
    tbon_fd: int | None = None,
    shared: Shared | None = None,
) -> int:
    """Run one broker until shutdown; returns the exit code. Errors are one line on stderr.

    `config`/`topology` may be passed already loaded (the fork launcher shares them), and
    `tbon_fd` a listening socket to use for the TBON endpoint instead of binding one, and
    `shared` what the launcher found once for all its brokers.
    """
    hostname = hostname or _socket.gethostname()
    raise_fd_limit()  # every entry point (fluxnode broker, the fork launcher) comes through here
    try:
        if config is None:
            config = load_config(config_path)
        rank = config.rank_of(hostname) if config.has_host(hostname) else (
            0 if not config.hosts else -1)
        log = setup_logging(rank, hostname, attrs)
        broker = Broker(config, hostname, attrs, log, topology=topology, tbon_fd=tbon_fd,
                        shared=shared)
        broker.start()
    except ModuleLoadError as exc:
        # Logging is set up: one line, on stderr and in the broker log.
        log.critical("fluxnode-broker: %s", exc)
        return 1
    except (BrokerError, attributes.AttrError, ValueError, OSError) as exc:
        print(f"fluxnode-broker: {exc}", file=sys.stderr)
        return 1
    return broker.run()
