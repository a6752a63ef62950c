"""Node resources: each broker discovers its own and reports them to the leader,
which assembles R (RFC 20) and answers `resource.list` / `resource.R`.

Registration is a plain request to rank 0, re-sent on every (re)join, so a
broker that restarts or whose parent restarts is always known again. Whether
a node is up comes from the overlay's online set, not from registration.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluxnode.agent.broker import discovery
from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.agent.broker.reactor import Timer
from fluxnode.agent.broker.services import ServiceRegistry
from fluxnode.broker_conf import idset

NOTIFY_DELAY = 0.01


@dataclass(frozen=True)
class ResourceServiceContext:
    """What the resource service needs of the broker that runs it, and nothing more."""

    state: InstanceState  # rank, hostname, config; size and hostnames follow config.reload
    # to offer resource.* and to ask a module's sched.resource-status in-process
    services: ServiceRegistry
    request: Callable[
        [Message], None
    ]  # send a request from this broker (its response is only logged)
    down_ranks: Callable[[], list[int]]
    call_later: Callable[[float, Callable[[], None]], Timer]
    log: logging.Logger


def _node_to_dict(node: Any) -> dict:
    return dataclasses.asdict(node)


def _node_from_dict(data: dict) -> Any:
    from fluxnode.broker_conf.rv1 import NodeResources

    names = {f.name for f in dataclasses.fields(NodeResources)}
    unknown = set(data) - names
    if unknown:
        raise ServiceError(
            errno.EPROTO, f"resource.register: unknown node field(s) {sorted(unknown)}"
        )
    try:
        return NodeResources(**data)
    except (TypeError, ValueError) as exc:
        raise ServiceError(
            errno.EPROTO, f"resource.register: bad node description: {exc}"
        ) from None


def allocated_by_rank(status: dict) -> dict[int, tuple[set[int], set[int]]]:
    """Read allocated cores/GPUs per rank from a `sched.resource-status` response.

    Accepts flux's shape (`allocated` is an R with execution.R_lite) or a plain
    mapping ``{"<rank>": {"cores": "0-3", "gpus": "0"}}``.
    """
    alloc = status.get("allocated") or {}
    out: dict[int, tuple[set[int], set[int]]] = {}
    if isinstance(alloc, dict) and "execution" in alloc:
        for entry in alloc["execution"].get("R_lite", []):
            children = entry.get("children", {})
            cores = set(idset.decode(children.get("core", ""))) if children.get("core") else set()
            gpus = set(idset.decode(children.get("gpu", ""))) if children.get("gpu") else set()
            for rank in idset.decode(entry["rank"]):
                c, g = out.setdefault(rank, (set(), set()))
                c |= cores
                g |= gpus
    elif isinstance(alloc, dict):
        for rank, v in alloc.items():
            cores = set(idset.decode(v.get("cores", ""))) if v.get("cores") else set()
            gpus = set(idset.decode(v.get("gpus", ""))) if v.get("gpus") else set()
            out[int(rank)] = (cores, gpus)
    return out


class ResourceService:
    def __init__(self, context: ResourceServiceContext) -> None:
        self.context = context
        self.local: Any = None
        self.nodes: dict[int, Any] = {}
        self.watchers: list = []
        self._R: dict | None = None
        self._notify_timer = None
        self._last_notified: tuple | None = None
        self._exclude: set[int] | None = None

    def discover_local(self) -> None:
        state = self.context.state
        override = state.attrs.get("resource.override") or getattr(
            state.config.resource, "override", None
        )
        self.local = discovery.discover(rank=state.rank, hostname=state.hostname, override=override)
        if state.rank == 0:
            self._store(self.local)

    def register(self) -> None:
        if self.context.state.rank == 0:
            services = self.context.services
            services.register("resource.register", self._register)
            services.register("resource.list", self._list)
            services.register("resource.R", lambda m: {"R": self.R(), "down": self._down_idset()})

    def report(self) -> None:
        """Tell the leader what this node has (after every join to the parent)."""
        if self.local is not None and self.context.state.rank != 0:
            self.context.request(
                Message.request("resource.register", {"node": _node_to_dict(self.local)}, nodeid=0)
            )

    def _register(self, msg: Message) -> dict:
        node = (msg.payload or {}).get("node")
        if not isinstance(node, dict):
            raise ServiceError(errno.EPROTO, "resource.register needs a 'node' object")
        self._store(_node_from_dict(node))
        return {}

    def reconfigure(self) -> None:
        """After ``config.reload``: forget ranks that are gone, excluded now, or held by another
        host."""
        state = self.context.state
        self._exclude = None
        gone = [r for r, node in self.nodes.items()
                if r >= state.size or r in self._excluded() or node.hostname != state.hostnames[r]]
        for r in gone:
            del self.nodes[r]
        self._R = None
        self.changed()

    def _excluded(self) -> set[int]:
        """[resource] exclude: ranks that run a broker but offer nothing to schedule (as Flux)."""
        if self._exclude is None:
            try:
                self._exclude = set(self.context.state.config.excluded_ranks())
            except (AttributeError, ValueError) as exc:
                self.context.log.error("resource.exclude: %s", exc)
                self._exclude = set()
        return self._exclude

    def _store(self, node: Any) -> None:
        if not 0 <= node.rank < self.context.state.size:
            raise ServiceError(errno.EINVAL, f"resource.register: rank {node.rank} is out of range")
        if node.rank in self._excluded():
            return
        if self.nodes.get(node.rank) != node:
            self.nodes[node.rank] = node
            self._R = None
            self.changed()

    def R(self) -> dict:
        from fluxnode.broker_conf.rv1 import build_R

        if self._R is None:
            self._R = build_R([self.nodes[r] for r in sorted(self.nodes)])
        return self._R

    def _down_idset(self) -> str:
        return idset.encode(self.context.down_ranks())

    def changed(self) -> None:
        """Coalesce joins/leaves into one notification of the module watchers."""
        if self._notify_timer is None and self.watchers:
            self._notify_timer = self.context.call_later(NOTIFY_DELAY, self._notify)

    def _notify(self) -> None:
        self._notify_timer = None
        down = self.context.down_ranks()
        key = (tuple(sorted(self.nodes)), id(self._R) if self._R is not None else None, tuple(down))
        if key == self._last_notified:
            return
        R = self.R()
        self._last_notified = (tuple(sorted(self.nodes)), id(R), tuple(down))
        for callback in list(self.watchers):
            try:
                callback(R, down)
            except Exception:
                self.context.log.exception("resource watcher %r failed", callback)

    def _list(self, msg: Message) -> dict:
        context = self.context
        state = context.state
        allocated: dict[int, tuple[set[int], set[int]]] = {}
        handler = context.services.get("sched.resource-status")
        if handler is not None:
            try:
                status = handler(Message.request("sched.resource-status", {}, nodeid=0)) or {}
                allocated = allocated_by_rank(status)
            except Exception as exc:
                context.log.error("resource.list: sched.resource-status failed: %s", exc)
        down = set(context.down_ranks())
        out: dict[str, list[dict]] = {"free": [], "allocated": [], "down": []}

        def entry(rank: int, cores: set[int] | list[int], gpus: set[int] | list[int]) -> dict:
            return {
                "rank": rank,
                "hostname": state.hostnames[rank],
                "ncores": len(cores),
                "ngpus": len(gpus),
                "cores": idset.encode(sorted(cores)),
                "gpus": idset.encode(sorted(gpus)),
            }

        for rank in range(state.size):
            if rank in self._excluded():
                continue
            node = self.nodes.get(rank)
            cores = set(node.cores) if node else set()
            gpus = set(node.gpus) if node else set()
            if rank in down or node is None:
                out["down"].append(entry(rank, cores, gpus))
                continue
            acores, agpus = allocated.get(rank, (set(), set()))
            acores &= cores
            agpus &= gpus
            if acores or agpus:
                out["allocated"].append(entry(rank, acores, agpus))
            if cores - acores or gpus - agpus or not (acores or agpus):
                out["free"].append(entry(rank, cores - acores, gpus - agpus))
        return out
