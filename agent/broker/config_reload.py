"""``config.reload``: apply a changed broker.toml to a running broker (``flux config reload``).

Re-reads the broker's config path and applies size, hosts and children in place.
What a running broker cannot change without a restart (its rank, its bound endpoint,
its parent, [tbon]/[access] settings, the certificate) is refused with EOPNOTSUPP and
an error naming it, so the node agent falls back to restarting this one broker; an
invalid config is refused with EINVAL. Either way the broker keeps serving on the
config it has: the plan is checked completely before anything changes, and a failure
while rebinding for new children puts the old state back.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Callable

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.boot import BrokerError, InstanceState, parse_quorum
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.agent.broker.overlay import Overlay
from fluxnode.agent.broker.quorum import Quorum
from fluxnode.agent.broker.resource_service import ResourceService
from fluxnode.broker_conf import config as config_mod
from fluxnode.broker_conf.config import BrokerConfig
from fluxnode.broker_conf.topology import Topology, TopologyError


class ConfigReload:
    def __init__(
        self,
        state: InstanceState,
        overlay: Overlay,
        resources: ResourceService,
        quorum: Quorum,
        on_applied: Callable[[], None],
        log: BrokerLog,
    ) -> None:
        self.state = state
        self.overlay = overlay
        self.resources = resources
        self.quorum = quorum
        self.on_applied = (
            on_applied  # the instance changed: recheck the online set like an overlay change
        )
        self.log = log

    def __call__(self, msg: Message) -> dict:
        """The ``config.reload`` service."""
        state = self.state
        path = state.config.path
        if path is None:
            raise ServiceError(
                errno.EINVAL, "config.reload: this broker was not started from a config file"
            )
        try:
            new = config_mod.load(path)
        except config_mod.ConfigError as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        topology, quorum = self._plan(new)
        self._apply(new, topology, quorum)
        self.log.info("broker: config.reload: size %d, children %s", state.size,
                      ",".join(map(str, state.topology.children(state.rank))) or "none")
        return {
            "rank": state.rank,
            "size": state.size,
            "children": state.topology.children(state.rank),
        }

    def _plan(self, new: BrokerConfig) -> tuple[Topology, int]:
        """Check that `new` can be applied in place; returns (topology, quorum)."""
        state = self.state
        old = state.config

        def restart(problem: str) -> ServiceError:
            return ServiceError(
                errno.EOPNOTSUPP,
                f"config.reload: {new.path}: {problem}; restart the broker to apply it",
            )

        if not new.hostnames and not state.singleton:
            raise restart("bootstrap.hosts is now empty (a single broker)")
        if new.hostnames and state.singleton:
            raise restart("bootstrap.hosts is now set (this broker was started alone)")
        try:
            rank = new.rank_of(state.hostname)
            spec = state.topo_override or new.tbon.topo
            topology = (
                new.topology() if spec == new.tbon.topo else Topology.from_spec(spec, new.size)
            )
            bind = "" if state.singleton else new.bind_uri(rank)
            parent = topology.parent(rank)
            parent_uri = new.connect_uri(parent) if parent is not None else None
            new.excluded_ranks()
        except (config_mod.ConfigError, TopologyError) as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        if rank != state.rank:
            raise restart(f"rank of {state.hostname} changed from {state.rank} to {rank}")
        if self.overlay.router is not None and bind != state.attrs["tbon.endpoint"]:
            raise restart(
                f"bind endpoint of rank {rank} changed from {state.attrs['tbon.endpoint']} to "
                f"{bind}"
            )
        old_parent = self.overlay.parent_rank
        if parent != old_parent:
            raise restart(f"parent of rank {rank} changed from {old_parent} to {parent}")
        if parent_uri != self.overlay.parent_uri:
            raise restart(
                f"endpoint of parent rank {parent} changed from {self.overlay.parent_uri} to "
                f"{parent_uri}"
            )
        for table in ("tbon", "access"):
            if getattr(new, table) != getattr(old, table) and not (
                table == "tbon" and _tbon_same(old, new)
            ):
                raise restart(f"[{table}] changed")
        if new.bootstrap.curve_cert != old.bootstrap.curve_cert:
            raise restart("bootstrap.curve_cert changed")
        quorum_attr = state.attrs.get("broker.quorum") if "broker.quorum" in state.given else None
        try:
            quorum = parse_quorum(quorum_attr, new.size)
        except BrokerError as exc:
            raise ServiceError(errno.EINVAL, f"config.reload: {exc}") from None
        return topology, quorum

    def _apply(self, new: BrokerConfig, topology: Topology, quorum: int) -> None:
        state = self.state
        hostnames = list(new.hostnames) if new.hostnames else [state.hostname]
        children = topology.children(state.rank)
        bind = state.attrs["tbon.endpoint"] if state.singleton else new.bind_uri(state.rank)
        kept = (
            state.config,
            state.size,
            state.hostnames,
            state.topology,
            state.quorum,
            dict(state.attrs),
        )
        state.config, state.size, state.hostnames, state.topology, state.quorum = (
            new, new.size, hostnames, topology, quorum)
        state.attrs.update(
            {
                "size": str(state.size),
                "tbon.endpoint": bind,
                "broker.quorum": str(quorum),
                "tbon.topo": state.topo_override or new.tbon.topo,
            }
        )
        if state.rank == 0:
            self.resources.reconfigure()
            self.quorum.forget_online()  # log the online set against the new size
        try:
            self.overlay.reconfigure(
                hostnames, children, {c: topology.subtree(c) for c in children}, bind
            )
        except zmq.ZMQError as exc:
            state.config, state.size, state.hostnames, state.topology, state.quorum, attrs = kept
            state.attrs.clear()
            state.attrs.update(attrs)
            raise ServiceError(
                exc.errno or errno.EIO,
                f"config.reload: cannot bind {bind} for the new children: {exc}",
            ) from None
        self.on_applied()


def _tbon_same(old: BrokerConfig, new: BrokerConfig) -> bool:
    """[tbon] equal except topo (whose effect, the tree, is checked on its own)."""
    return dataclasses.replace(new.tbon, topo=old.tbon.topo) == old.tbon
