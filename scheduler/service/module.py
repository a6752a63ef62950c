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

Topics (payloads in docs/developers/interfaces.md):
  sched.alloc            allocate (or reserve) a jobspec; or a batch of such requests
  sched.adopt            hold exactly the cores/GPUs a running workload already uses
  sched.cancel           cancel an allocation, or part of it by ranks
  sched.info             one allocation
  sched.list             all allocations (optionally filtered by labels)
  sched.resource-status  all / allocated / down R and drained nodes, for `fluxnode resource`
  sched.drain            take nodes out of scheduling (running allocations stay); journaled
  sched.undrain          put drained nodes back
Errors: EINVAL bad request, ENOENT unknown id, EBUSY cannot run now (will fit
later), ENODEV unsatisfiable (can never fit; errstr says why).
"""

from __future__ import annotations

import errno
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from fluxnode.agent.broker.attributes import sizes
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import parse_R
from fluxnode.scheduler.jobspec.document import Limits
from fluxnode.scheduler.policies.policy import POLICIES
from fluxnode.scheduler.service.drain import OPERATOR, DrainError, DrainTable
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.journal import Journal, JournalEntry
from fluxnode.scheduler.service.live_graph import LiveGraph, nodes_to_R

OPS = ("allocate", "allocate_orelse_reserve")
JOURNAL_FILE = "sched-journal.sqlite"
MAX_BATCH = 1024  # requests in one batched sched.alloc
ADOPT_KEYS = {"rank", "hostname", "cores", "gpus", "memory_mib"}
MAX_IDSET_TEXT = 4096  # characters of one adopted node's cores/gpus idset
IDSET_TEXT = re.compile(r"[\[\]0-9,-]+")  # targets that are ranks, not hostnames
MAX_UNIT_ID = 1 << 16  # core/GPU ids adopted on a rank not joined yet are below this


@dataclass
class Allocation:
    id: int
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    jobspec: dict
    policy: str
    nodes: list[dict]
    labels: dict = field(default_factory=dict)
    created: float = 0.0
    kinds: list[dict] | None = None  # several slot kinds: where each landed (kept across restarts)
    # ranks of `nodes` not held in the graph yet (not joined since a restart, or their part
    # could not be held: logged); held when they join, never handed to anyone else meanwhile
    pending: set[int] = field(default_factory=set)
    use_drained: bool = False  # holds what already runs on drained nodes: never "draining"

    def summary(self, with_R: bool = False, hostnames: dict[int, str] | None = None) -> dict:
        out = asdict(self)
        del out["jobspec"]
        if out["kinds"] is None:
            del out["kinds"]
        out["pending"] = idset.encode(sorted(self.pending))
        out["restored"] = not self.pending
        if with_R:
            out["R"] = nodes_to_R(self.nodes)
        return out


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
        self.graph = self._new_graph(broker.resources())
        for entry in self.journal.entries():
            alloc = Allocation(
                entry.id,
                "ALLOCATED",
                0,
                entry.jobspec,
                entry.policy,
                entry.nodes,
                entry.labels,
                entry.created,
                kinds=entry.kinds,
                use_drained=entry.use_drained,
            )
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
                    if joined is None or (n["rank"] in alloc.pending and n["rank"] in joined)]
            for node in todo:
                try:
                    waiting = self.graph.hold(alloc.id, [node], missing_ok=True).pending
                except (Busy, Unsatisfiable) as exc:
                    waiting = [node]
                    self.log.error(
                        "sched: allocation %d cannot hold its part on rank %d again: %s "
                        "(kept pending; retried when the resources change)",
                        alloc.id, node["rank"], exc,
                    )
                if waiting:
                    alloc.pending.add(node["rank"])
                    if node["rank"] in self.graph.hostnames() and waiting != [node]:
                        self.log.error(
                            "sched: allocation %d: rank %d no longer has %s; the rest is held "
                            "and the record kept", alloc.id, node["rank"], node_text(waiting[0]))
                else:
                    alloc.pending.discard(node["rank"])

    def _new_graph(self, R: dict, nodes: list | None = None) -> LiveGraph:
        graph = LiveGraph(R, nodes)
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
        alloc_id = payload.get("id")
        if not isinstance(alloc_id, int) or isinstance(alloc_id, bool):
            raise ServiceError(errno.EINVAL, "id: must be an integer allocation id")
        alloc = self.allocations.get(alloc_id)
        if alloc is None:
            raise ServiceError(errno.ENOENT, f"allocation {alloc_id} not found")
        return alloc

    # -- topics -----------------------------------------------------------------

    def alloc(self, payload: dict) -> dict:
        if "requests" in payload:
            return self._alloc_batch(payload)
        return self._alloc_one(payload)

    def _alloc_batch(self, payload: dict) -> dict:
        """Several independent requests in one round trip, answered in order as if sent one
        by one (a refusal does not stop the others: it changes nothing for them). The
        service stops after the first RESERVED answer: a reservation changes what a caller
        lets later requests use (and which op they get), so it asks again for the rest and
        batching never changes an outcome. It also stops after a request the service
        itself failed on (EIO): the answers before it stand. ``answers`` holds one entry
        per request tried: the usual answer, or ``{"errnum", "errstr"}``."""
        requests = payload["requests"]
        if set(payload) - {"requests"}:
            raise ServiceError(
                errno.EINVAL,
                "requests: cannot be combined with "
                + ", ".join(sorted(set(payload) - {"requests"})),
            )
        if not isinstance(requests, list) or not requests:
            raise ServiceError(
                errno.EINVAL, "requests: must be a non-empty list of sched.alloc payloads"
            )
        if len(requests) > MAX_BATCH:
            raise ServiceError(
                errno.EINVAL, f"requests: at most {MAX_BATCH} per call, not {len(requests)}"
            )
        for i, request in enumerate(requests):
            if not isinstance(request, dict):
                raise ServiceError(errno.EINVAL, f"requests[{i}]: must be an object")
            if "requests" in request:
                raise ServiceError(errno.EINVAL, f"requests[{i}]: batches do not nest")
        answers: list[dict] = []
        for i, request in enumerate(requests):
            try:
                answer = self._alloc_one(request)
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
        return {"answers": answers}

    def _alloc_one(self, payload: dict) -> dict:
        jobspec = payload.get("jobspec")
        if not isinstance(jobspec, dict | str):
            raise ServiceError(errno.EINVAL, "jobspec: required (an RFC 14 jobspec object)")
        policy = payload.get("policy") or "first"
        if policy not in POLICIES:
            raise ServiceError(
                errno.EINVAL, f"policy: unknown {policy!r} (one of {', '.join(POLICIES)})"
            )
        op = payload.get("op") or "allocate"
        if op not in OPS:
            raise ServiceError(errno.EINVAL, f"op: unknown {op!r} (one of {', '.join(OPS)})")
        labels = _or_empty(payload.get("labels"))
        if not isinstance(labels, dict):
            raise ServiceError(errno.EINVAL, "labels: must be an object")
        use_drained = payload.get("use_drained", False)
        if not isinstance(use_drained, bool):
            raise ServiceError(errno.EINVAL, "use_drained: must be true or false")
        # the binder reads "nodes" only: R of every answer was an eighth of its CPU here
        with_R = payload.get("with_R", True)  # noqa: N806 (R is RFC 20's name)
        if not isinstance(with_R, bool):
            raise ServiceError(errno.EINVAL, "with_R: must be true or false")
        alloc_id = self.journal.next_id()
        lifted = use_drained and bool(self._drained_ranks())
        if lifted:  # what already runs on a drained node (the binder's outside usage)
            self.graph.set_down(self.down)
        try:
            placement = self.graph.allocate(alloc_id, jobspec, policy, op)
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
        alloc = Allocation(
            alloc_id,
            placement.status,
            placement.at,
            placement.jobspec,
            policy,
            placement.nodes,
            labels,
            time.time(),
            kinds=placement.kinds,
            use_drained=use_drained,
        )
        if alloc.status == "ALLOCATED":
            try:
                self.journal.record(
                    JournalEntry(
                        alloc.id,
                        alloc.jobspec,
                        policy,
                        {},
                        alloc.nodes,
                        labels,
                        alloc.created,
                        alloc.kinds,
                        use_drained,
                    )
                )
            except Exception:
                self.graph.cancel(alloc.id)
                raise
        self.allocations[alloc.id] = alloc
        answer = {"id": alloc.id, "status": alloc.status, "at": alloc.at}
        if with_R:
            answer["R"] = nodes_to_R(alloc.nodes)
        answer["nodes"] = alloc.nodes
        if placement.kinds is not None:
            answer["kinds"] = placement.kinds  # where each slot kind landed (several kinds only)
        return answer

    def adopt(self, payload: dict) -> dict:
        """Hold exactly the cores and GPUs (and the memory) `nodes` name, for a workload
        that already runs on them: pods bound before the leader lost its journal, found
        again by their owner (the binder), like Fluxion's ``update``. Journaled and
        answered as `sched.alloc`; a rank that has not joined yet is held pending."""
        nodes = self._adopt_nodes(payload.get("nodes"))
        labels = _or_empty(payload.get("labels"))
        if not isinstance(labels, dict):
            raise ServiceError(errno.EINVAL, "labels: must be an object")
        self._check_free(nodes)
        alloc_id = self.journal.next_id()
        try:
            holding = self.graph.hold(alloc_id, nodes)
        except Busy as exc:
            raise ServiceError(errno.EBUSY, f"busy: {exc}") from None
        except Unsatisfiable as exc:
            raise ServiceError(errno.EINVAL, f"nodes: {exc}") from None
        pending = {int(n["rank"]) for n in holding.pending}
        held = sorted(holding.held + holding.pending, key=lambda n: n["rank"])
        alloc = Allocation(alloc_id, "ALLOCATED", 0, {}, "adopt", held, labels, time.time(),
                           pending=pending)
        try:
            self.journal.record(JournalEntry(alloc.id, {}, "adopt", {}, held, labels,
                                             alloc.created, None))
        except Exception:
            self.graph.cancel(alloc.id)
            raise
        self.allocations[alloc.id] = alloc
        return {"id": alloc.id, "status": "ALLOCATED", "at": 0, "R": nodes_to_R(held),
                "nodes": held, "pending": idset.encode(sorted(pending))}

    def _adopt_nodes(self, nodes: Any) -> list[dict]:
        if not isinstance(nodes, list) or not nodes:
            raise ServiceError(errno.EINVAL, "nodes: must be a non-empty list of "
                               '{"rank", "cores", "gpus", "memory_mib"} objects')
        if len(nodes) > max(1, self.broker.size):
            raise ServiceError(errno.EINVAL, f"nodes: {len(nodes)} entries for an instance of "
                               f"{self.broker.size} ranks")
        out: dict[int, dict] = {}
        hostnames = self.graph.hostnames()
        for i, node in enumerate(nodes):
            where = f"nodes[{i}]"
            if not isinstance(node, dict) or set(node) - ADOPT_KEYS:
                raise ServiceError(errno.EINVAL, f"{where}: must be an object with keys "
                                   f"{', '.join(sorted(ADOPT_KEYS))}")
            rank, memory = node.get("rank"), node.get("memory_mib", 0)
            for key, value in (("rank", rank), ("memory_mib", memory)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ServiceError(errno.EINVAL, f"{where}.{key}: must be an integer >= 0")
            if rank >= self.broker.size:
                raise ServiceError(errno.EINVAL, f"{where}.rank: {rank} is outside the instance "
                                   f"(size {self.broker.size})")
            if rank in out:
                raise ServiceError(errno.EINVAL, f"{where}.rank: rank {rank} is listed twice")
            ids = {}
            for key in ("cores", "gpus"):
                text = node.get(key) or ""
                if not isinstance(text, str) or len(text) > MAX_IDSET_TEXT:
                    raise ServiceError(errno.EINVAL, f"{where}.{key}: must be an idset string")
                try:
                    ids[key] = idset.decode(text, limit=MAX_UNIT_ID)
                except idset.IdsetError as exc:
                    raise ServiceError(errno.EINVAL, f"{where}.{key}: {exc}") from None
                if ids[key] and ids[key][-1] >= MAX_UNIT_ID:
                    raise ServiceError(errno.EINVAL, f"{where}.{key}: id {ids[key][-1]} is too "
                                       f"large (at most {MAX_UNIT_ID - 1})")
            if not (ids["cores"] or ids["gpus"] or memory):
                raise ServiceError(errno.EINVAL, f"{where}: holds nothing (no cores, GPUs or "
                                   "memory)")
            out[rank] = {"rank": rank, "hostname": hostnames.get(rank, f"rank{rank}"),
                         "cores": idset.encode(ids["cores"]), "gpus": idset.encode(ids["gpus"]),
                         "memory_mib": memory}
        return [out[r] for r in sorted(out)]

    def _check_free(self, nodes: list[dict]) -> None:
        """EBUSY naming the first core or GPU of `nodes` another allocation holds (also a
        pending one: its rank has not joined yet, but those ids are its)."""
        wanted = {(n["rank"], kind, i) for n in nodes for kind in ("cores", "gpus")
                  for i in idset.decode(n[kind])}
        for other in self.allocations.values():
            if other.status != "ALLOCATED":
                continue
            for n in other.nodes:
                for kind in ("cores", "gpus"):
                    for i in idset.decode(n.get(kind) or ""):
                        if (n["rank"], kind, i) in wanted:
                            raise ServiceError(
                                errno.EBUSY, f"busy: rank {n['rank']} {kind[:-1]} {i} is held by "
                                f"allocation {other.id}")

    def cancel(self, payload: dict) -> dict:
        alloc = self._get(payload)
        ranks_text = payload.get("ranks")
        if ranks_text is None:
            return self._cancel_all(alloc)
        if not isinstance(ranks_text, str | int) or isinstance(ranks_text, bool):
            raise ServiceError(errno.EINVAL, "ranks: must be an idset string")
        held = {n["rank"] for n in alloc.nodes}
        try:
            # more ids than the allocation holds cannot all be its own: refused before
            # anything is expanded (`0-16777215` held the leader 14 s)
            ranks = set(idset.decode(str(ranks_text), limit=len(held)))
        except idset.IdsetError as exc:
            raise ServiceError(
                errno.EINVAL, f"ranks: {exc} (allocation {alloc.id} holds {len(held)} ranks: "
                f"{idset.encode(held)})"
            ) from None
        unknown = ranks - held
        if unknown:
            raise ServiceError(
                errno.EINVAL,
                f"ranks: allocation {alloc.id} holds {idset.encode(held)}, not "
                f"{idset.encode(unknown)}",
            )
        if ranks == held:
            return self._cancel_all(alloc)
        remaining = [n for n in alloc.nodes if n["rank"] not in ranks]
        self.graph.partial_cancel(alloc.id, sorted(ranks), remaining)
        alloc.pending -= ranks
        alloc.nodes = remaining
        if alloc.kinds is not None:
            alloc.kinds = [
                {**k, "nodes": [n for n in k["nodes"] if n["rank"] not in ranks]}
                for k in alloc.kinds
            ]
        if alloc.status == "ALLOCATED":
            self.journal.shrink(alloc.id, {}, alloc.nodes, alloc.kinds)
        return {
            "id": alloc.id,
            "freed": idset.encode(ranks),
            "remaining": idset.encode(n["rank"] for n in alloc.nodes),
        }

    def _cancel_all(self, alloc: Allocation) -> dict:
        self.graph.cancel(alloc.id)
        del self.allocations[alloc.id]
        if alloc.status == "ALLOCATED":
            self.journal.remove(alloc.id)
        return {
            "id": alloc.id,
            "freed": idset.encode(n["rank"] for n in alloc.nodes),
            "remaining": "",
        }

    def info(self, payload: dict) -> dict:
        alloc = self._get(payload)
        out = alloc.summary(with_R=True)
        out["jobspec"] = alloc.jobspec
        return out

    def list(self, payload: dict) -> dict:
        wanted = _or_empty(payload.get("labels"))
        if not isinstance(wanted, dict):
            raise ServiceError(errno.EINVAL, "labels: must be an object")
        out = [
            a.summary()
            for a in sorted(self.allocations.values(), key=lambda a: a.id)
            if all(a.labels.get(k) == v for k, v in wanted.items())
        ]
        return {"allocations": out}

    def resource_status(self, payload: dict) -> dict:
        allocated = [
            n for a in self.allocations.values() if a.status == "ALLOCATED" for n in a.nodes
        ]
        hostnames = self.graph.hostnames()
        unusable = self.down | self._drained_ranks()
        return {
            "all": {"version": 1, "execution": (self.graph.R or {}).get("execution", {})},
            "allocated": nodes_to_R(allocated, hostnames),
            # as Flux's scheduler view: drained nodes are down to the scheduler
            "down": nodes_to_R(self.graph.whole_nodes(unusable), hostnames),
            "nodes": self.graph.capacity(),
            "drain": self._drain_list(),
        }

    def _drain_list(self) -> list[dict]:
        """Each drained node: rank, hostname, reason, timestamp, source, and its state:
        "draining" while allocations remain on it, "drained" once it is empty. A hold made
        with use_drained (what other schedulers run there) is not work that drains: a
        cordoned node running only DaemonSet pods is drained, not draining forever."""
        busy = {r for a in self.allocations.values()
                if a.status == "ALLOCATED" and not a.use_drained
                for r in {n["rank"] for n in a.nodes} | a.pending}
        out = []
        for rank, host in self.graph.hostnames().items():
            d = self.drains.get(host)
            if d is not None:
                out.append({"rank": rank, "hostname": host, "reason": d.reason,
                            "timestamp": d.timestamp, "source": d.source,
                            "state": "draining" if rank in busy else "drained"})
        return out

    def _targets(self, payload: dict) -> list[str]:
        """`targets`: an RFC 22 idset of ranks or an RFC 29 hostlist, as hostnames of nodes
        the graph knows (a drain names machines that have reported their resources)."""
        text = payload.get("targets")
        if not isinstance(text, str | int) or isinstance(text, bool) or text == "":
            raise ServiceError(errno.EINVAL, "targets: required (an idset of ranks or a hostlist)")
        text = str(text)
        if len(text) > MAX_IDSET_TEXT:
            raise ServiceError(errno.EINVAL, f"targets: at most {MAX_IDSET_TEXT} characters")
        hostnames = self.graph.hostnames()
        size = max(1, self.broker.size)
        if IDSET_TEXT.fullmatch(text):
            try:
                ranks = idset.decode(text, limit=size)
            except idset.IdsetError as exc:
                raise ServiceError(errno.EINVAL, f"targets: {exc}") from None
            unknown = [r for r in ranks if r not in hostnames]
            if unknown:
                raise ServiceError(errno.EINVAL, f"targets: rank(s) {idset.encode(unknown)} "
                                   "are not in the instance's resources")
            return [hostnames[r] for r in ranks]
        try:
            hosts = hostlist.decode(text, limit=size)
        except (hostlist.HostlistError, ValueError) as exc:
            raise ServiceError(errno.EINVAL, f"targets: {text!r} is neither an idset nor a "
                               f"hostlist: {exc}") from None
        known = set(hostnames.values())
        unknown = [h for h in hosts if h not in known]
        if unknown:
            raise ServiceError(errno.EINVAL, f"targets: {hostlist.encode(unknown)} not in the "
                               "instance's resources")
        return list(dict.fromkeys(hosts))

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
        source = payload.get("source")
        if source is not None and not isinstance(source, str):
            raise ServiceError(errno.EINVAL, "source: must be a string")
        mode = payload.get("mode")
        if mode not in (None, "force"):
            raise ServiceError(errno.EINVAL, f"mode: unknown {mode!r} (only force)")
        try:
            undrained, kept = self.drains.undrain(hosts, mode == "force", source)
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


def _or_empty(value: Any) -> Any:
    """An optional object: absent or null is empty (a falsy non-object like [] is not)."""
    return {} if value is None else value


def node_text(node: dict) -> str:
    """What a per-node summary names, in words: "cores 6-7, 512 MiB" (for log lines)."""
    parts = [f"{key} {node[key]}" for key in ("cores", "gpus") if node.get(key)]
    if node.get("memory_mib"):
        parts.append(f"{node['memory_mib']} MiB")
    return ", ".join(parts) or "nothing"


def load(broker: Any) -> SchedService:
    """Broker module entry point."""
    return SchedService(broker)
