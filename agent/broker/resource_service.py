"""Node resources: each broker discovers its own and reports them to the leader,
which assembles R (RFC 20) and answers `resource.list` / `resource.R`.

Whether a node is up comes from the overlay's online set, not from registration;
what it has comes two ways:

* push: a broker sends ``resource.register`` to rank 0 each time it (re)joins its
  parent. That covers a broker that restarts, but not its subtree: when rank 0 or an
  interior broker restarts, the brokers below its children never rejoin anyone, so they
  never push again, and a push sent while the path to rank 0 is broken is lost.
* pull: so the leader also asks. Every broker answers ``resource.get-local`` with its
  node description; the leader asks each online rank it has no registration for, and
  each rank that came back online after leaving the online set (its registration may be
  stale: it may have restarted while its parent was away). At most `PULL_CONCURRENCY`
  requests are in flight; a rank that does not answer is asked again with a doubling
  backoff for as long as it stays online and unknown, so a rank 0 restart in a large
  instance costs one bounded sweep, never a storm. The leader's R thus converges to the
  live set after a restart at any level, without restarting anyone.
"""

from __future__ import annotations

import dataclasses
import errno
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fluxnode.agent.broker import discovery
from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import INFO, WARNING, BrokerLog
from fluxnode.agent.broker.message import Message, MessageError, ServiceError
from fluxnode.agent.broker.reactor import Timer
from fluxnode.agent.broker.services import DEFERRED, ServiceRegistry
from fluxnode.broker_conf import idset

if TYPE_CHECKING:
    from fluxnode.broker_conf.rv1 import NodeResources, NodesR

NOTIFY_DELAY = 0.01
PULL_TOPIC = "resource.get-local"
PULL_CONCURRENCY = 16  # resource.get-local requests the leader has in flight at once
PULL_TIMEOUT = 5.0  # a request without an answer by then is given up and asked again
PULL_BACKOFF_MIN = 0.1  # wait before asking a rank again after a failed ask; doubles ...
PULL_BACKOFF_MAX = 5.0  # ... up to this


@dataclass(frozen=True)
class ResourceServiceContext:
    """What the resource service needs of the broker that runs it, and nothing more."""

    state: InstanceState  # rank, hostname, config; size and hostnames follow config.reload
    # to offer resource.* and to ask a module's sched.resource-status in-process
    services: ServiceRegistry
    # send a request from this broker; the callback, if any, gets its response; returns the
    # matchtag, which `forget` takes to stop waiting
    request: Callable[[Message, Callable[[Message], None] | None], int]
    forget: Callable[[int], None]
    down_ranks: Callable[[], list[int]]
    call_later: Callable[[float, Callable[[], None]], Timer]
    log: BrokerLog


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


@dataclass
class _Ask:
    """The leader's pull of one rank's node description."""

    attempts: int = 0
    not_before: float = 0.0  # monotonic time of the next ask (backoff)
    matchtag: int | None = None  # the ask in flight, if any
    timer: Timer | None = None  # its timeout


class ResourceService:
    def __init__(self, context: ResourceServiceContext) -> None:
        self.context = context
        self.local: Any = None
        self.nodes: dict[int, Any] = {}
        self.watchers: list = []
        self._R: NodesR | None = None
        self._notify_timer = None
        self._last_notified: tuple | None = None
        self._notified_at = 0.0  # monotonic time the watchers were last told (_notify) ...
        self._notify_took = 0.0  # ... and how long telling them took
        self._exclude: set[int] | None = None
        # pull (leader only): who is online, whose registration may be stale, whom we ask
        self._online: set[int] = set()
        self._stale: set[int] = set()
        self._asks: dict[int, _Ask] = {}
        self._in_flight = 0
        self._ask_timer: Timer | None = None
        self._asking = False

    def discover_local(self, machine: NodeResources | None = None) -> None:
        """This node's resources: the override's, else `machine` (what the fork launcher
        discovered once for all its brokers) as this rank, else discovered here."""
        state = self.context.state
        override = state.attrs.get("resource.override") or getattr(
            state.config.resource, "override", None
        )
        if machine is not None and not override:
            self.local = dataclasses.replace(machine, rank=state.rank, hostname=state.hostname)
        else:
            self.local = discovery.discover(rank=state.rank, hostname=state.hostname,
                                            override=override)
        if state.rank == 0:
            self._store(self.local)

    def register(self) -> None:
        self.context.services.register(PULL_TOPIC, self._get_local)
        if self.context.state.rank == 0:
            services = self.context.services
            services.register("resource.register", self._register)
            services.register("resource.list", self._list)
            services.register("resource.R",
                              lambda m: {"R": self.R().to_dict(), "down": self._down_idset()})

    def report(self) -> None:
        """Tell the leader what this node has (after every join to the parent).

        ``respond: false`` asks the leader not to answer a registration it took: nobody
        waits for that answer, and it travelled back down every hop the registration came
        up (at 256 brokers, kary:2, a third of the messages a broker handled from its start
        to quorum; issue 32). A refused one is still answered, with its error, which this
        broker logs. A client that sends `resource.register` without the key is answered."""
        if self.local is not None and self.context.state.rank != 0:
            self.context.request(
                Message.request("resource.register",
                                {"node": _node_to_dict(self.local), "respond": False}, nodeid=0)
            )

    def _get_local(self, msg: Message) -> dict:
        """`resource.get-local`: this node's description (the leader pulls it)."""
        if self.local is None:
            raise ServiceError(errno.EAGAIN, "resource.get-local: resources not discovered yet")
        return {"node": _node_to_dict(self.local)}

    def _register(self, msg: Message) -> dict:
        node = (msg.payload or {}).get("node")
        if not isinstance(node, dict):
            raise ServiceError(errno.EPROTO, "resource.register needs a 'node' object")
        self._store(_node_from_dict(node))
        return DEFERRED if (msg.payload or {}).get("respond") is False else {}

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
        if state.rank == 0:
            self.online_changed()

    def expected_ranks(self) -> list[int]:
        """The ranks whose resources R will hold once every broker has reported: all but
        the excluded ones (those report nothing)."""
        excluded = self._excluded()
        return [r for r in range(self.context.state.size) if r not in excluded]

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
        self._stale.discard(node.rank)
        ask = self._asks.pop(node.rank, None)
        if ask is not None:
            self._drop_ask(ask)
        if self.nodes.get(node.rank) != node:
            self.nodes[node.rank] = node
            self._R = None
            self.changed()

    # -- pull (leader) ---------------------------------------------------------------------
    def online_changed(self) -> None:
        """On the leader, after the online set changed: ask every online rank we know nothing
        of, or whose registration predates its last time offline, for its resources."""
        state = self.context.state
        online = set(range(state.size)) - set(self.context.down_ranks())
        self._stale |= self._online - online
        self._stale &= set(range(state.size))
        self._online = online
        for rank in list(self._asks):
            if rank not in online:
                self._drop_ask(self._asks.pop(rank))
        wanted = {r for r in online if r not in self.nodes or r in self._stale}
        wanted -= self._excluded() | {state.rank} | set(self._asks)
        if wanted:
            self.context.log.info("resource: asking rank(s) %s for their resources",
                                  idset.encode(sorted(wanted)))
            for rank in wanted:
                self._asks[rank] = _Ask()
        self._ask_more()

    def _drop_ask(self, ask: _Ask) -> None:
        if ask.matchtag is not None:
            self.context.forget(ask.matchtag)
            ask.matchtag = None
            self._in_flight -= 1
        if ask.timer is not None:
            ask.timer.cancel()
            ask.timer = None

    def _ask_more(self) -> None:
        """Send asks that are due, up to PULL_CONCURRENCY in flight; wake up for the next.

        An ask to an unreachable rank is answered (with an error) while it is sent, which
        lands here again: that inner call returns at once and this loop goes on."""
        if self._asking:
            return
        self._asking = True
        try:
            now = time.monotonic()
            for rank in sorted(self._asks):
                if self._in_flight >= PULL_CONCURRENCY:
                    break
                ask = self._asks.get(rank)
                if ask is not None and ask.matchtag is None and ask.not_before <= now:
                    self._send_ask(rank, ask)
        finally:
            self._asking = False
        waiting = [a.not_before for a in self._asks.values() if a.matchtag is None]
        if not waiting or self._in_flight >= PULL_CONCURRENCY:
            return  # an answer comes first and calls this again
        due = min(waiting)
        if self._ask_timer is not None:
            if self._ask_timer.when <= due + 0.01:
                return
            self._ask_timer.cancel()
        self._ask_timer = self.context.call_later(max(0.0, due - time.monotonic()), self._wake)

    def _wake(self) -> None:
        self._ask_timer = None
        self._ask_more()

    def _send_ask(self, rank: int, ask: _Ask) -> None:
        self._in_flight += 1
        ask.attempts += 1
        ask.timer = self.context.call_later(PULL_TIMEOUT, lambda: self._timed_out(rank, ask))
        # set before sending: a request to a rank that is unreachable is answered at once
        ask.matchtag = -1
        tag = self.context.request(Message.request(PULL_TOPIC, {}, nodeid=rank),
                                   lambda msg: self._answered(rank, ask, msg))
        if ask.matchtag == -1:
            ask.matchtag = tag

    def _timed_out(self, rank: int, ask: _Ask) -> None:
        ask.timer = None
        if self._asks.get(rank) is ask and ask.matchtag is not None:
            self._failed(rank, ask, f"no answer within {PULL_TIMEOUT:g}s")

    def _answered(self, rank: int, ask: _Ask, msg: Message) -> None:
        if self._asks.get(rank) is not ask or ask.matchtag is None:
            return  # given up on (timed out, or the rank went offline meanwhile)
        if msg.errnum:
            if msg.errnum == errno.ENOSYS:  # a broker that cannot be asked: it pushes
                self.context.log.warning("resource: rank %d does not answer %s: %s", rank,
                                         PULL_TOPIC, msg.errstr)
                self._drop_ask(self._asks.pop(rank))
                self._ask_more()
                return
            self._failed(rank, ask, msg.errstr or f"error {msg.errnum}")
            return
        try:
            node = (msg.decode_payload() or {}).get("node")
            if not isinstance(node, dict):
                raise ServiceError(errno.EPROTO, "no 'node' object")
            node = _node_from_dict(node)
            if node.rank != rank:
                raise ServiceError(errno.EPROTO, f"it describes rank {node.rank}")
            self._store(node)  # drops the ask
        except (ServiceError, MessageError, TypeError) as exc:
            self._failed(rank, ask, f"bad answer: {exc}")
            return
        self._ask_more()

    def _failed(self, rank: int, ask: _Ask, why: str) -> None:
        self._drop_ask(ask)
        delay = min(PULL_BACKOFF_MAX, PULL_BACKOFF_MIN * 2 ** (ask.attempts - 1))
        ask.not_before = time.monotonic() + delay * random.uniform(0.75, 1.0)
        level = INFO if ask.attempts <= 3 else WARNING
        self.context.log.log(level, "resource: asking rank %d for its resources failed "
                             "(attempt %d): %s; asking again in %.1fs", rank, ask.attempts,
                             why, delay)
        self._ask_more()

    def R(self) -> NodesR:
        """R of the registered nodes, kept as those nodes (its JGF is written when read:
        `resource.R` asks for it, the scheduler takes the nodes)."""
        from fluxnode.broker_conf.rv1 import NodesR

        if self._R is None:
            self._R = NodesR(self.nodes.values())
        return self._R

    def _down_idset(self) -> str:
        return idset.encode(self.context.down_ranks())

    def changed(self) -> None:
        """Coalesce joins/leaves into one notification of the module watchers.

        The watchers are told NOTIFY_DELAY after a change, and never sooner after they
        were last told than that telling took: while many brokers join at once (a
        thousand registrations in a few seconds), the scheduler grows its graph by a
        batch of nodes each time, not by one node a time at the cost of a walk of its
        whole graph each (issue 32), and the event loop keeps at least half its time
        for the registrations themselves."""
        if self._notify_timer is None and self.watchers:
            delay = max(NOTIFY_DELAY, self._notified_at + self._notify_took - time.monotonic())
            self._notify_timer = self.context.call_later(delay, self._notify)

    def _notify(self) -> None:
        self._notify_timer = None
        down = self.context.down_ranks()
        key = (tuple(sorted(self.nodes)), id(self._R) if self._R is not None else None, tuple(down))
        if key == self._last_notified:
            return
        began = time.monotonic()
        R = self.R()
        self._last_notified = (tuple(sorted(self.nodes)), id(R), tuple(down))
        for callback in list(self.watchers):
            try:
                callback(R, down)
            except Exception:
                self.context.log.exception("resource watcher %r failed", callback)
        self._notified_at = time.monotonic()
        self._notify_took = self._notified_at - began

    def _list(self, msg: Message) -> dict:
        context = self.context
        state = context.state
        allocated: dict[int, tuple[set[int], set[int]]] = {}
        drain: list[dict] = []
        handler = context.services.get("sched.resource-status")
        if handler is not None:
            try:
                status = handler(Message.request("sched.resource-status", {}, nodeid=0)) or {}
                allocated = allocated_by_rank(status)
                drain = [d for d in status.get("drain") or [] if isinstance(d, dict)]
            except Exception as exc:
                context.log.error("resource.list: sched.resource-status failed: %s", exc)
        down = set(context.down_ranks())
        drained = {d.get("rank") for d in drain}
        out: dict = {"free": [], "allocated": [], "down": []}

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
            # A drained node is down to the scheduler (as in `flux resource list`); while it
            # drains, what is still allocated there stays in `allocated`.
            rest = "down" if rank in drained else "free"
            if cores - acores or gpus - agpus or not (acores or agpus):
                out[rest].append(entry(rank, cores - acores, gpus - agpus))
        out["drain"] = drain  # for `fluxnode resource status` and `drain` (no targets)
        out["offline"] = idset.encode(sorted(r for r in down if r < state.size))
        return out
