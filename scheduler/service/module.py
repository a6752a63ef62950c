"""The scheduler service: a broker module loaded on the leader (rank 0).

It owns the live resource graph built from the R the overlay discovered and is
the only thing that hands resources out, so the binder, `fluxnode alloc` and
anything else that asks over the overlay all see one consistent picture.
Every allocation is committed to the journal before the answer goes out, and
replayed into a fresh graph on start, so a leader restart loses nothing and
hands nothing out twice. When brokers join, R grows and their nodes are added
to the live graph in place (allocations and reservations kept); any other change
of R builds a new graph and replays the journal into it. Down ranks are marked down in the graph
(never allocated); allocations already there stay until they are cancelled.

Replay is exact and never partial (Fluxion's ``update``, as flux-sched's qmanager
re-creates running jobs from their R after a restart): every journaled allocation
holds again exactly the core and GPU ids it was given. A part on a rank that is not
in the graph yet (after a leader restart brokers rejoin one by one) is kept
*pending*: the rank joins the graph already holding it, before anything else can
be placed there, so nothing is ever handed out twice and no allocation is dropped.

Payloads are checked in request.py; an allocation is the record of allocation.py, kept
in `allocations`, in the journal and in every answer's wire form. The journal keeps each
allocation's span (began, duration) too: replayed, it ends when it ended before the restart,
so a reservation behind it gets the same start.

Topics (payloads in docs/developers/interfaces.md):
  sched.alloc            allocate (or reserve) a jobspec; or a batch of such requests, which
                         may first cancel the reservations it replaces (`cancel`)
  sched.adopt            hold exactly the cores/GPUs a running workload already uses
  sched.cancel           cancel an allocation, or part of it by ranks
  sched.info             one allocation
  sched.list             all allocations (optionally filtered by labels)
  sched.resource-status  all / allocated / down R and drained nodes, for `fluxnode resource`;
                         `nodes` left out when unchanged since the `nodes_since` asked
  sched.drain            take nodes out of scheduling (running allocations stay); journaled
  sched.undrain          put drained nodes back
Errors: EINVAL bad request, ENOENT unknown id, EBUSY cannot run now (will fit
later), ENODEV unsatisfiable (can never fit; errstr says why).
"""

from __future__ import annotations

import errno
import threading
import time
from typing import Any

from fluxnode.agent.broker.attributes import sizes
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import parse_R
from fluxnode.scheduler.jobspec.document import Limits
from fluxnode.scheduler.service import request
from fluxnode.scheduler.service.allocation import Allocation, NodeShare
from fluxnode.scheduler.service.drain import OPERATOR, DrainError, DrainTable
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.journal import Journal
from fluxnode.scheduler.service.live_graph import LiveGraph, nodes_to_R

JOURNAL_FILE = "sched-journal.sqlite"


class SchedService:
    """Answers sched.* on the leader; one lock serializes graph, table and journal."""

    def __init__(self, broker: Any):
        self.broker = broker
        self.log = broker.log
        self._lock = threading.RLock()
        self.journal = Journal(broker.statedir / JOURNAL_FILE)
        self.allocations: dict[int, Allocation] = {}
        self.down: set[int] = set(broker.down_ranks())
        # jobspec.max-bytes|max-depth|max-nodes (SECURITY.md); a bad value fails the load
        self.jobspec_limits = Limits(**sizes(getattr(broker, "attrs", {}) or {}, "jobspec."))
        self.drains = DrainTable(self.journal.drains())
        self.epoch = int(time.time())  # the planner's time 0 for every graph (live_graph.py)
        # what resource_status last sent as `nodes`, and its version (see there): this
        # start (no later start of the service can name the same version) and a count
        self._status_nodes: list[dict] | None = None
        self._nodes_changes = 0
        self._started = f"{time.time_ns():x}"
        self.graph = self._new_graph(broker.resources())
        for alloc in self.journal.entries():
            self.allocations[alloc.id] = alloc
        self._replay()
        self._mark_unusable()
        for topic, handler in (
            ("sched.alloc", self.alloc),
            ("sched.adopt", self.adopt),
            ("sched.cancel", self.cancel),
            ("sched.info", self.info),
            ("sched.list", self.list),
            ("sched.resource-status", self.resource_status),
            ("sched.drain", self.drain),
            ("sched.undrain", self.undrain),
        ):
            broker.register(topic, self._guard(handler))
        broker.on_resources_changed(self.resources_changed)
        self.log.info(
            "sched: %d ranks, %d allocations replayed from %s",
            len(self.graph.ranks()),
            len(self.allocations),
            self.journal.path,
        )

    def close(self) -> None:
        self.journal.close()

    # -- plumbing ---------------------------------------------------------------

    def _guard(self, handler):
        def handle(msg: Message) -> dict:
            payload = msg.payload if msg.payload is not None else msg.decode_payload()
            if payload is None:
                payload = {}
            if not isinstance(payload, dict):
                raise ServiceError(errno.EINVAL, "payload must be a JSON object")
            with self._lock:
                return handler(payload)

        return handle

    def _replay(self, joined: set[int] | None = None) -> None:
        """Hold again exactly what every journaled allocation holds (`joined`: only the
        pending parts on these ranks, which the graph just grew by).

        Called before down ranks are marked and before any request is answered, so an
        allocation on a rank that is down is still held (as the library keeps allocations
        on vertices that go down). Each rank's part is held on its own: one that cannot
        be held (its node came back different) stays pending and is logged, and never
        releases the others. A node that came back without some of the recorded ids has
        the rest held and stays pending (its record is kept as it was)."""
        for alloc in sorted(self.allocations.values(), key=lambda a: a.id):
            if alloc.status != "ALLOCATED" or (joined is not None and not alloc.pending):
                continue
            todo = [n for n in alloc.nodes
                    if joined is None or (n.rank in alloc.pending and n.rank in joined)]
            for node in todo:
                try:
                    waiting = self.graph.hold(
                        alloc.id, [node], missing_ok=True,
                        window=self.graph.window(alloc.began, alloc.duration)).pending
                except (Busy, Unsatisfiable) as exc:
                    waiting = [node]
                    self.log.error(
                        "sched: allocation %d cannot hold its part on rank %d again: %s "
                        "(kept pending; retried when the resources change)",
                        alloc.id, node.rank, exc,
                    )
                if waiting:
                    alloc.pending.add(node.rank)
                    if node.rank in self.graph.hostnames() and waiting != [node]:
                        self.log.error(
                            "sched: allocation %d: rank %d no longer has %s; the rest is held "
                            "and the record kept", alloc.id, node.rank, waiting[0].text())
                else:
                    alloc.pending.discard(node.rank)

    def _new_graph(self, R: dict, nodes: list | None = None) -> LiveGraph:
        graph = LiveGraph(R, nodes, epoch=self.epoch)
        graph.limits = self.jobspec_limits
        return graph

    def _drained_ranks(self) -> set[int]:
        return {r for r, host in self.graph.hostnames().items() if host in self.drains}

    def _mark_unusable(self) -> None:
        """Tell the graph which ranks are down (offline) and which are drained."""
        self.graph.set_down(self.down, self._drained_ranks())

    def _missing_ranks(self) -> list[int]:
        """Ranks R will hold that the graph has not got yet (empty with a broker handle that
        cannot tell)."""
        expected = getattr(self.broker, "expected_ranks", None)
        if expected is None:
            return []
        have = set(self.graph.ranks())
        return [r for r in expected() if r not in have]

    def _get(self, payload: dict) -> Allocation:
        alloc_id = request.alloc_id(payload)
        alloc = self.allocations.get(alloc_id)
        if alloc is None:
            raise ServiceError(errno.ENOENT, f"allocation {alloc_id} not found")
        return alloc

    def _commit(self, alloc: Allocation) -> None:
        """Journal a new allocation (before its answer goes out) and keep it; the graph
        lets go of it when the journal cannot be written."""
        if alloc.status == "ALLOCATED":
            try:
                self.journal.record(alloc)
            except Exception:
                self.graph.cancel(alloc.id)
                raise
        self.allocations[alloc.id] = alloc

    # -- topics -----------------------------------------------------------------

    def alloc(self, payload: dict) -> dict:
        if "requests" in payload:
            return self._alloc_batch(payload)
        if "cancel" in payload:
            raise ServiceError(errno.EINVAL, 'cancel: goes with a batch ({"requests": [...], '
                               '"cancel": [...]})')
        return self._alloc_one(payload)

    def _replaced(self, ids: list[int]) -> list[Allocation]:
        """The reservations a batch's `cancel` names, checked before anything is done. An id
        not found is skipped, as the binder takes sched.cancel's ENOENT: the reservation is
        already gone (a graph rebuilt from a new R drops every reservation). One that names
        an allocation (ALLOCATED) refuses the whole call: a binder that thinks it a
        reservation of its own is not in step with this leader (one with a new statedir
        hands its ids out again), and freeing it would free what runs there."""
        out: dict[int, Allocation] = {}
        for alloc_id in ids:
            alloc = self.allocations.get(alloc_id)
            if alloc is None:
                continue
            if alloc.status != "RESERVED":
                raise ServiceError(errno.EINVAL, f"cancel: allocation {alloc_id} is "
                                   f"{alloc.status}, not a reservation (sched.cancel frees it)")
            out[alloc_id] = alloc
        return list(out.values())

    def _alloc_batch(self, payload: dict) -> dict:
        """Several independent requests in one round trip, answered in order as if sent one
        by one (a refusal does not stop the others: it changes nothing for them). The
        service stops after the first RESERVED answer: a reservation changes what a caller
        lets later requests use (and which op they get), so it asks again for the rest and
        batching never changes an outcome. It also stops after a request the service
        itself failed on (EIO): the answers before it stand. ``answers`` holds one entry
        per request tried: the usual answer, or ``{"errnum", "errstr"}``.

        ``cancel`` names the reservations this batch replaces (the binder's last pass's):
        they are cancelled first, in the same call, so no reader of this service (they are
        answered between calls, under the same lock) sees the queue's head without a
        reservation while the batch makes it again; ``cancelled`` says which were. A bad
        ``cancel`` refuses the whole call before anything is done."""
        requests = request.batch(payload)
        replaced = self._replaced(request.replaced_ids(payload))
        for alloc in replaced:
            self._drop(alloc)
        answers: list[dict] = []
        for i, one in enumerate(requests):
            try:
                answer = self._alloc_one(one)
            except ServiceError as exc:
                answers.append({"errnum": exc.errnum, "errstr": exc.errstr})
                continue
            except Exception as exc:
                # The service failed on this request (e.g. the journal could not be
                # written; the graph was rolled back): the requests before it are
                # allocated and journaled, so their answers must reach the caller, not
                # be lost with one error for the whole batch (that left them held and
                # unknown to anyone). This one fails (EIO) and the batch stops here: the
                # caller asks again for the rest, as after a reservation.
                self.log.exception("sched: sched.alloc batch: requests[%d] failed", i)
                answers.append({"errnum": errno.EIO,
                                "errstr": f"requests[{i}]: internal error: {exc}"})
                break
            answers.append(answer)
            if answer["status"] == "RESERVED":
                break
        if "cancel" in payload:
            return {"answers": answers, "cancelled": [a.id for a in replaced]}
        return {"answers": answers}

    def _alloc_one(self, payload: dict) -> dict:
        ask = request.alloc_request(payload)
        alloc_id = self.journal.next_id()
        lifted = ask.use_drained and bool(self._drained_ranks())
        if lifted:  # what already runs on a drained node (the binder's outside usage)
            self.graph.set_down(self.down)
        try:
            placement = self.graph.allocate(alloc_id, ask)
        except InvalidRequest as exc:
            raise ServiceError(exc.errnum, str(exc)) from None
        except Busy as exc:
            raise ServiceError(errno.EBUSY, f"busy: {exc}") from None
        except Unsatisfiable as exc:
            missing = self._missing_ranks()
            if missing:
                # Judged on part of the machine: it may fit once the rest has reported (right
                # after a leader restart, brokers rejoin one by one).
                raise ServiceError(errno.EBUSY, f"busy: {exc} (ranks {idset.encode(missing)} "
                                   "have not reported their resources yet)") from None
            raise ServiceError(errno.ENODEV, f"unsatisfiable: {exc}") from None
        finally:
            if lifted:
                self._mark_unusable()
        alloc = Allocation(alloc_id, placement.status, placement.at, ask.policy, placement.nodes,
                           ask.labels, time.time(), placement.jobspec, placement.kinds,
                           placement.slots, ask.use_drained, began=placement.began,
                           duration=placement.duration)
        if placement.status == "RESERVED":
            alloc.start = self.graph.start_time(placement.at)
        self._commit(alloc)
        answer = alloc.answer()
        if ask.with_R:  # the binder reads nodes and slots only: R was an eighth of its CPU
            answer["R"] = nodes_to_R(alloc.nodes)
        return answer

    def adopt(self, payload: dict) -> dict:
        """Hold exactly the cores and GPUs (and the memory) `nodes` name, for a workload
        that already runs on them: pods bound before the leader lost its journal, found
        again by their owner (the binder), like Fluxion's ``update``. Journaled and
        answered as `sched.alloc`; a rank that has not joined yet is held pending."""
        nodes = request.adopt_nodes(payload.get("nodes"), self.broker.size,
                                    self.graph.hostnames())
        labels = request.labels(payload)
        self._check_free(nodes)
        alloc_id = self.journal.next_id()
        try:
            holding = self.graph.hold(alloc_id, nodes)
        except Busy as exc:
            raise ServiceError(errno.EBUSY, f"busy: {exc}") from None
        except Unsatisfiable as exc:
            raise ServiceError(errno.EINVAL, f"nodes: {exc}") from None
        held = sorted(holding.held + holding.pending, key=lambda n: n.rank)
        alloc = Allocation(alloc_id, "ALLOCATED", 0, "adopt", held, labels, time.time(),
                           pending={n.rank for n in holding.pending})
        self._commit(alloc)
        answer = alloc.answer()
        answer.update(R=nodes_to_R(held), pending=idset.encode(sorted(alloc.pending)))
        return answer

    def _check_free(self, nodes: list[NodeShare]) -> None:
        """EBUSY naming the first core or GPU of `nodes` another allocation holds (also a
        pending one: its rank has not joined yet, but those ids are its)."""
        wanted = {(n.rank, kind, i) for n in nodes for kind in ("cores", "gpus")
                  for i in getattr(n, kind)}
        for other in self.allocations.values():
            if other.status != "ALLOCATED":
                continue
            for n in other.nodes:
                for kind in ("cores", "gpus"):
                    for i in getattr(n, kind):
                        if (n.rank, kind, i) in wanted:
                            raise ServiceError(
                                errno.EBUSY, f"busy: rank {n.rank} {kind[:-1]} {i} is held by "
                                f"allocation {other.id}")

    def cancel(self, payload: dict) -> dict:
        alloc = self._get(payload)
        ranks = request.cancel_ranks(payload, alloc.id, alloc.ranks)
        if ranks is None or ranks == set(alloc.ranks):
            self._drop(alloc)
            return {"id": alloc.id, "freed": idset.encode(alloc.ranks), "remaining": ""}
        self.graph.partial_cancel(alloc.id, sorted(ranks))
        alloc.without(ranks)
        if alloc.status == "ALLOCATED":
            self.journal.record(alloc)
        return {"id": alloc.id, "freed": idset.encode(ranks),
                "remaining": idset.encode(alloc.ranks)}

    def _drop(self, alloc: Allocation) -> None:
        """Cancel all of `alloc`: out of the graph, the table and the journal."""
        self.graph.cancel(alloc.id)
        del self.allocations[alloc.id]
        if alloc.status == "ALLOCATED":
            self.journal.remove(alloc.id)

    def info(self, payload: dict) -> dict:
        alloc = self._get(payload)
        return {**alloc.summary(), "R": nodes_to_R(alloc.nodes), "jobspec": alloc.jobspec}

    def list(self, payload: dict) -> dict:
        wanted = request.labels(payload)
        out = [
            a.summary()
            for a in sorted(self.allocations.values(), key=lambda a: a.id)
            if all(a.labels.get(k) == v for k, v in wanted.items())
        ]
        return {"allocations": out}

    def resource_status(self, payload: dict) -> dict:
        """All / allocated / down R, each node's capacity, the drains. `nodes_version` names
        the capacity list as it is (this service's start and a count of its changes): asked
        with ``nodes_since`` equal to it, the answer leaves `nodes` out (the binder asks on
        every resync: 5,000 nodes are ~0.5 MB to encode, send and decode for nothing)."""
        allocated = [
            n for a in self.allocations.values() if a.status == "ALLOCATED" for n in a.nodes
        ]
        hostnames = self.graph.hostnames()
        unusable = self.down | self._drained_ranks()
        nodes = self.graph.capacity()
        if nodes is not self._status_nodes:  # the graph's cached list was made anew
            if nodes != self._status_nodes:
                self._nodes_changes += 1
            self._status_nodes = nodes
        version = f"{self._started}.{self._nodes_changes}"
        answer = {
            "all": {"version": 1, "execution": (self.graph.R or {}).get("execution", {})},
            "allocated": nodes_to_R(allocated, hostnames),
            # as Flux's scheduler view: drained nodes are down to the scheduler
            "down": nodes_to_R(self.graph.whole_nodes(unusable), hostnames),
            "nodes": nodes,
            "nodes_version": version,
            "drain": self._drain_list(),
        }
        if payload.get("nodes_since") == version:
            del answer["nodes"]
        return answer

    def _drain_list(self) -> list[dict]:
        """Each drained node: rank, hostname, reason, timestamp, source, and its state:
        "draining" while allocations remain on it, "drained" once it is empty. A hold made
        with use_drained (what other schedulers run there) is not work that drains: a
        cordoned node running only DaemonSet pods is drained, not draining forever."""
        busy = {r for a in self.allocations.values()
                if a.status == "ALLOCATED" and not a.use_drained
                for r in {*a.ranks, *a.pending}}
        out = []
        for rank, host in self.graph.hostnames().items():
            d = self.drains.get(host)
            if d is not None:
                out.append({"rank": rank, "hostname": host, "reason": d.reason,
                            "timestamp": d.timestamp, "source": d.source,
                            "state": "draining" if rank in busy else "drained"})
        return out

    def _targets(self, payload: dict) -> list[str]:
        return request.targets(payload, self.broker.size, self.graph.hostnames())

    def _ranks_of(self, hosts: list[str]) -> str:
        by_host = {h: r for r, h in self.graph.hostnames().items()}
        return idset.encode(sorted(by_host[h] for h in hosts if h in by_host))

    def drain(self, payload: dict) -> dict:
        """Take `targets` out of scheduling (Flux's drain): nothing new is placed there,
        allocations on them stay. Journaled before the answer."""
        hosts = self._targets(payload)
        try:
            written = self.drains.drain(
                hosts,
                _or_empty_text(payload.get("reason")),
                payload.get("mode") or "fail",
                payload.get("source") or OPERATOR,
                time.time(),
            )
        except DrainError as exc:
            raise ServiceError(exc.errnum, str(exc)) from None
        try:
            self.journal.save_drains(written, [])
        except Exception:
            self.drains = DrainTable(self.journal.drains())  # as kept, not as asked
            raise
        self._mark_unusable()
        if written:
            self.log.info("sched: drained %s: %s", hostlist.encode([d.hostname for d in written]),
                          written[0].reason or "(no reason)")
        return {"drained": self._ranks_of(hosts)}

    def undrain(self, payload: dict) -> dict:
        """Put `targets` back into scheduling. With `source`, only drains made by that
        source are lifted (the binder lifts its cordon drains, never an operator's)."""
        hosts = self._targets(payload)
        source, force = request.undrain_options(payload)
        try:
            undrained, kept = self.drains.undrain(hosts, force, source)
        except DrainError as exc:
            raise ServiceError(exc.errnum, str(exc)) from None
        try:
            self.journal.save_drains([], undrained)
        except Exception:
            self.drains = DrainTable(self.journal.drains())
            raise
        self._mark_unusable()
        if undrained:
            self.log.info("sched: undrained %s", hostlist.encode(undrained))
        return {"undrained": self._ranks_of(undrained), "kept": self._ranks_of(kept)}

    # -- overlay events ---------------------------------------------------------

    def resources_changed(self, R: dict, down: list[int]) -> None:
        with self._lock:
            new_down = set(down)
            if self.graph.same_resources(R):
                if new_down != self.down:
                    self.log.info("sched: down ranks now %s", idset.encode(new_down) or "none")
                    self.down = new_down
                    self._mark_unusable()
                return
            nodes = parse_R(R)  # once, for the growth check and, failing it, the new graph
            added = self.graph.grow(R, nodes)
            if added is not None:
                self.log.info(
                    "sched: resources grew; ranks %s added to the graph",
                    idset.encode(added) or "none",
                )
                self.down = new_down
                self._replay(joined=set(added))
                self._mark_unusable()
                return
            self.log.info(
                "sched: resources changed; rebuilding the graph and replaying allocations"
            )
            self.graph = self._new_graph(R, nodes)
            self.down = new_down
            for alloc_id in [a.id for a in self.allocations.values() if a.status == "RESERVED"]:
                del self.allocations[alloc_id]  # reservations are recomputed by their owner
            for alloc in self.allocations.values():
                alloc.pending.clear()
            self._replay()
            self._mark_unusable()


def _or_empty_text(value: Any) -> Any:
    """An optional text: absent or null is "" (anything else is checked by the caller)."""
    return "" if value is None else value


def load(broker: Any) -> SchedService:
    """Broker module entry point."""
    return SchedService(broker)
