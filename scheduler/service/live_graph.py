"""The one adapter between the scheduler service and the graph scheduler library.

The service speaks in allocation ids, typed requests (request.py) and shares
(`NodeShare`, `SlotShare`: allocation.py); the library speaks in graphs, jobspecs,
traversers and match results. Keeping the translation here means the service never
depends on the library's internals, and R <-> shares are computed in one place.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import NodeResources, build_R, parse_R
from fluxnode.scheduler.jobspec.builder import SlotKind
from fluxnode.scheduler.jobspec.constraint import Constraint
from fluxnode.scheduler.jobspec.document import DEFAULT_LIMITS
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.service.allocation import NodeShare, SlotShare, per_node
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.flat_graph import add_flat_nodes, flat_graph, renumber_in_rank_order
from fluxnode.scheduler.service.request import AllocRequest
from fluxnode.scheduler.service.slot_kinds import (
    Kind,
    cut,
    describe,
    flat_kind,
    slot_totals,
    slot_unsatisfiable,
    split_slot_kinds,
    typed_kinds,
    widest_slot,
)
from fluxnode.scheduler.traversers.dfu import NoMatch, TraverserError
from fluxnode.scheduler.traversers.dfu import Unsatisfiable as LibUnsatisfiable
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser

# The planner's clock is whole seconds since the service's epoch (`LiveGraph.now`). A
# request with a duration (a Job's spec.activeDeadlineSeconds, sent by the binder) runs
# [now, now + duration); one without (Fluxion's default: until the graph's end) runs
# [now, now + HORIZON), i.e. until cancelled. The journal keeps each allocation's span (when
# it began, in seconds since the Unix epoch, and its duration), so a replay (`hold`) books
# the same end on the new epoch's clock (`window`), and a reservation behind it gets the
# same start. A reservation behind something without an end lands at or
# past HORIZON: its start is unknown (`LiveGraph.start_time` says None), never a made-up
# time. Durations are below MAX_DURATION (request.py) so a known start stays below HORIZON.
HORIZON = 2**31
RANKS_CACHE = 256  # `ranks` texts remembered (LiveGraph._exclusion)


def invalid(exc: Exception) -> InvalidRequest:
    """A refused jobspec, named once (the reader's own message may already say "jobspec:"),
    with the reader's errno (E2BIG past its size limits) when it has one."""
    text = str(exc)
    errnum = getattr(exc, "errnum", None)
    return InvalidRequest(text if text.startswith("jobspec") else f"jobspec: {text}",
                          *([errnum] if isinstance(errnum, int) else []))


@dataclass
class Holding:
    """What `LiveGraph.hold` holds now and what it could not yet."""

    held: list[NodeShare]
    pending: list[NodeShare]


@dataclass
class Placement:
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    nodes: list[NodeShare]
    jobspec: dict  # the jobspec matched ({} for a request of slot kinds)
    kinds: tuple[SlotKind, ...] | None = None  # a request of slot kinds (as asked)...
    slots: tuple[SlotShare, ...] | None = None  # ...and where each slot landed
    # an allocation's span when it has an end: when it began (seconds since the Unix epoch)
    # and for how long; None, None: until cancelled
    began: int | None = None
    duration: int | None = None


def nodes_to_R(nodes: list[NodeShare], hostnames: dict[int, str] | None = None) -> dict:
    """An RFC 20 R (R_lite + nodelist, no ``scheduling``) of shares (merged per node)."""
    names = dict(hostnames or {})
    return build_R(
        [NodeResources(rank=n.rank, hostname=n.hostname or names.get(n.rank, f"rank{n.rank}"),
                       cores=list(n.cores), gpus=list(n.gpus)) for n in per_node(nodes)],
        scheduling=False,
        starttime=0,
        expiration=0,
    )


class LiveGraph:
    """The service graph of R's nodes (see flat_graph) plus a traverser, keyed by service
    allocation ids. R that only grows (brokers join) is added to this graph in place."""

    def __init__(self, R: dict, nodes: list[NodeResources] | None = None, *,
                 epoch: int | None = None, clock: Callable[[], float] = time.time):
        """`nodes` is `parse_R(R)` when the caller has it already (it is parsed otherwise);
        `epoch` (whole seconds of `clock`, default now) is when the planner's time 0 is: the
        service keeps one for all its graphs so a rebuilt graph keeps the same clock."""
        self.R = R
        self._clock = clock
        self.epoch = int(clock()) if epoch is None else epoch
        self._nodes = {n.rank: n for n in (parse_R(R) if nodes is None else nodes)}
        self._down: set[int] = set()
        self._drained: set[int] = set()
        self._unusable: set[int] = set()  # down or drained: "down" to the traverser
        self._capacity: list[dict] | None = None
        self._graph = flat_graph(self._nodes.values())
        # the exhaustive policies in fast mode (ties to the lowest id, docs/scheduler.md)
        self._traverser = FastTraverser(self._graph, "first")
        self._policies: dict[str, Policy] = {}
        self._parts: dict[int, list[int]] = {}  # service id -> traverser job ids
        self._timed: set[int] = set()  # traverser job ids of requests with a duration (_match)
        self.limits = DEFAULT_LIMITS  # what a jobspec may cost to read (the service sets it)
        # `ranks` text -> its constraint (None: none needed), see _exclusion
        self._exclusions: OrderedDict[str, Constraint | None] = OrderedDict()
        self._next_part = 1
        self._frozen: int | None = None  # the clock read once for a whole `allocate`

    def ranks(self) -> list[int]:
        return sorted(self._nodes)

    def hostnames(self) -> dict[int, str]:
        return {rank: n.hostname for rank, n in sorted(self._nodes.items())}

    def same_resources(self, R: dict) -> bool:
        return R == self.R

    def grow(self, R: dict, nodes: list[NodeResources] | None = None) -> list[int] | None:
        """Take `R` in place when it only adds ranks (every node of today's R unchanged):
        the new nodes are added to this graph and the traverser recomputes its totals, so
        allocations and reservations stay as they are. Returns the ranks added, or None
        (nothing changed) when `R` changes or drops a node: that needs a new graph. `nodes`
        is `parse_R(R)` when the caller has it already."""
        nodes = {n.rank: n for n in (parse_R(R) if nodes is None else nodes)}
        if any(nodes.get(rank) != node for rank, node in self._nodes.items()):
            return None
        added = [node for rank, node in nodes.items() if rank not in self._nodes]
        self._exclusions.clear()  # a new rank is left out by every `ranks` seen so far
        if add_flat_nodes(self._graph, added) and not self._traverser.jobs:
            # ids as if built at once, so placements do not depend on the join order; with
            # jobs held (replayed from the journal before every rank joined) ids stay
            self._traverser.renumbered(renumber_in_rank_order(self._graph))
        self._traverser.reinit()
        self.R = R
        self._nodes = nodes
        self._capacity = None
        return [node.rank for node in added]

    def whole_nodes(self, ranks: set[int]) -> list[NodeShare]:
        return [NodeShare(r, self._nodes[r].hostname, tuple(self._nodes[r].cores),
                          tuple(self._nodes[r].gpus)) for r in sorted(ranks) if r in self._nodes]

    def capacity(self) -> list[dict]:
        """Per node: rank, hostname, cores, gpus, memory_mib the graph holds (cached until
        ranks go up or down; callers must not change it)."""
        if self._capacity is not None:
            return self._capacity
        out = []
        for rank in self.ranks():
            memory = sum(v.size for v in self._graph.by_rank.get(rank, []) if v.type == "memory")
            node = self._nodes[rank]
            out.append({
                "rank": rank,
                "hostname": node.hostname,
                "cores": len(node.cores),
                "gpus": len(node.gpus),
                "memory_mib": memory,
                "status": "down" if rank in self._down else "up",
                "drained": rank in self._drained,
            })
        self._capacity = out
        return out

    def set_down(self, down: set[int], drained: set[int] = frozenset()) -> None:
        """Mark `down` (offline) and `drained` ranks unusable for new matches: both are
        "down" to the traverser (Fluxion's status), so a request that needs them is busy,
        never unsatisfiable; allocations already on them stay."""
        self._drained = set(drained) & set(self._nodes)
        unusable = (set(down) | self._drained) & set(self._nodes)
        for rank in self.ranks():
            if (rank in unusable) != (rank in self._unusable) or rank in unusable:
                self._traverser.set_status(rank, "down" if rank in unusable else "up")
        self._down = set(down) & set(self._nodes)
        if unusable != self._unusable:
            self._exclusions.clear()  # which `ranks` leave out only unusable ranks changed
        self._unusable = unusable
        self._capacity = None

    def now(self) -> int:
        """The planner's time now: whole seconds since `epoch` (within one `allocate`, the
        same for every match it makes, so all its parts begin at the same second)."""
        clock = int(self._clock()) if self._frozen is None else self._frozen
        return max(0, clock - self.epoch)

    def window(self, began: int | None, duration: int | None) -> tuple[int, int]:
        """The planner window (start, duration) of a span that began at `began` (seconds
        since the Unix epoch) and lasts `duration` seconds, on this graph's clock: the same
        end; a start before `epoch` (a leader restart) is 0. Without an end: (0, HORIZON).
        A span whose end has passed keeps one second (it still holds until cancelled)."""
        if began is None or duration is None or duration >= HORIZON:
            return 0, HORIZON
        at = max(0, began - self.epoch)
        return at, max(1, began + duration - self.epoch - at)

    def start_time(self, at: int) -> int | None:
        """When a reservation at planner time `at` starts, in seconds since the Unix epoch,
        or None when it waits for something without an end (see HORIZON)."""
        return None if at >= HORIZON else self.epoch + at

    def _part_id(self) -> int:
        part = self._next_part
        self._next_part += 1
        return part

    def _match(self, jobspec: Jobspec, policy: str, op: str) -> tuple[int, object]:
        if policy not in self._policies:
            self._policies[policy] = Policy.parse(policy, stable_ties=True)  # fast mode
        self._traverser.policy = self._policies[policy]
        part = self._part_id()
        # The clock is read only while time can matter: the request has an end, or something
        # held has one. Without any end every span runs to the planner's end and a match at
        # 0 sees exactly what a match now sees; and the fast traverser's tie order follows
        # its match window, so a clock read for every request made a placement among equals
        # change with the second a request came in (docs/binder.md's allocation example
        # flaked 1 run in 8).
        timed = jobspec.duration != HORIZON
        at = self.now() if timed or self._timed else 0
        try:
            result = self._traverser.match(jobspec, op=op, jobid=part, at=at)
        except LibUnsatisfiable as exc:
            raise Unsatisfiable(exc.reason or "the request can never fit these resources") from None
        except NoMatch as exc:
            if exc.busy:
                raise Busy(exc.reason or "not enough free resources now") from None
            raise Unsatisfiable(exc.reason or "no match") from None
        except (JobspecError, TraverserError, ValueError) as exc:
            raise invalid(exc) from None
        if timed:
            self._timed.add(part)
        return part, result

    def allocate(self, jobid: int, request: AllocRequest) -> Placement:
        """Place `request`: slot kinds (request trees made here, the `ranks` it may use
        applied as below) or a jobspec (parsed here). A request without a duration runs
        until cancelled (HORIZON)."""
        self._frozen = int(self._clock())
        try:
            placement = self._allocate(jobid, request)
        finally:
            self._frozen = None
        if placement.status != "ALLOCATED":
            return placement
        # the span its parts booked, when it has an end (they all begin at the frozen now)
        jobs = [self._traverser.jobs[p] for p in self._parts.get(jobid, ())
                if p in self._traverser.jobs]
        if not jobs or any(j.duration >= HORIZON for j in jobs):
            return placement
        at = min(j.at for j in jobs)
        return dataclasses.replace(placement, began=self.epoch + at,
                                   duration=max(j.at + j.duration for j in jobs) - at)

    def _allocate(self, jobid: int, request: AllocRequest) -> Placement:
        policy, op = request.policy, request.op
        if request.kinds is None:
            return self._allocate_jobspec(jobid, request.jobspec, policy, op)
        kinds = typed_kinds(request.kinds, request.duration or HORIZON,
                            self._exclusion(request.ranks))
        if len(kinds) > 1:
            return self._allocate_kinds(jobid, kinds[0].spec, kinds, policy, op, {},
                                        request.kinds)
        part, result = self._match(kinds[0].spec, policy, _lib_op(op))
        self._parts[jobid] = [part]
        return self._placement(result, {}, request.kinds, kinds)

    def _allocate_jobspec(self, jobid: int, jobspec: dict | str, policy: str,
                          op: str) -> Placement:
        spec = self._parse(jobspec)
        plain = spec.to_dict()
        kinds = split_slot_kinds(spec)
        if kinds is not None:
            asked = _asked(kinds)
            return self._allocate_kinds(jobid, spec, kinds, policy, op, plain, asked)
        part, result = self._match(spec, policy, _lib_op(op))
        self._parts[jobid] = [part]
        slot = spec.resources[0] if len(spec.resources) == 1 else None
        one = flat_kind(slot) if slot is not None and slot.is_slot else None
        if one is None:
            return Placement(result.status, result.at, self._nodes_of(result), plain)
        return self._placement(result, plain, (one,), [Kind(0, one, spec)])

    def _placement(self, result, plain: dict, asked: tuple[SlotKind, ...],
                   kinds: list[Kind]) -> Placement:
        """A one-kind match's placement, with one share per slot when allocated."""
        nodes = self._nodes_of(result)
        if result.status != "ALLOCATED":
            return Placement(result.status, result.at, nodes, plain)
        return Placement("ALLOCATED", 0, nodes, plain, asked, self._slots(kinds[0], nodes))

    def _slots(self, kind: Kind, nodes: list[NodeShare]) -> tuple[SlotShare, ...]:
        return tuple(SlotShare(kind.index, one) for node in nodes
                     for one in cut(node, kind.slot, self._granule(node.rank)))

    def _granule(self, rank: int) -> int:
        return next((v.size for v in self._graph.by_rank.get(rank, []) if v.type == "memory"), 1)

    def _parse(self, jobspec: dict | str) -> Jobspec:
        """The parsed jobspec, a duration of 0 made HORIZON."""
        try:
            spec = Jobspec.parse(jobspec, limits=self.limits)
        except JobspecError as exc:
            raise invalid(exc) from None
        if spec.duration:
            return spec
        system = {**(spec.attributes.get("system") or {}), "duration": HORIZON}
        return dataclasses.replace(spec, duration=HORIZON,
                                   attributes={**spec.attributes, "system": system})

    def _exclusion(self, ranks: str | None) -> Constraint | None:
        """The constraint a request's `ranks` (the idset text of the ranks it may use; None:
        all) puts on this graph, or None when it needs none: when every rank it leaves out
        is already down or drained, which the traverser refuses anyway (a request that
        needs them is busy, as it is without `ranks`). Any constraint turns the exhaustive
        policies' indexed match off, and the binder's requests leave out, most of the time,
        only nodes Kubernetes will not schedule on, which it drains here (binder
        node_drain.py). A rank that joined after the caller looked is left out (the binder
        has not pinned what else runs there yet). Remembered per text, until the graph
        grows or the down and drained ranks change."""
        if ranks is None:
            return None
        if ranks in self._exclusions:
            self._exclusions.move_to_end(ranks)
            return self._exclusions[ranks]
        try:
            allowed = idset.decode_ranges(ranks)
        except idset.IdsetError as exc:
            raise InvalidRequest(f"ranks: {exc}") from None
        starts = [lo for lo, _hi in allowed]
        names, left_out = [], []
        for rank, node in sorted(self._nodes.items()):
            k = bisect.bisect_right(starts, rank) - 1
            if k >= 0 and rank <= allowed[k][1]:
                names.append(node.hostname)
            else:
                left_out.append(rank)
        if all(rank in self._unusable for rank in left_out):
            hit = None
        elif not names:  # none of this graph's nodes: a constraint nothing passes
            hit = Constraint("ranks", (ranks,), tuple(allowed))
        else:  # the nodes by name, as a caller's hostlist constraint would have them
            text = hostlist.encode(names)
            hit = Constraint("hostlist", (text,), (hostlist.Matcher(text),))
        self._exclusions[ranks] = hit
        if len(self._exclusions) > RANKS_CACHE:
            self._exclusions.popitem(last=False)
        return hit

    def _allocate_kinds(
        self, jobid: int, spec: Jobspec, kinds: list[Kind], policy: str, op: str,
        plain: dict, asked: tuple[SlotKind, ...] | None,
    ) -> Placement:
        """All slot kinds or none: each kind matched in turn (largest first); the ones
        already matched are rolled back when one fails. The service holds its lock for the
        whole call, so nothing else is placed in between. One allocation id covers every
        kind (its traverser parts), so cancel, partial cancel and replay see one allocation.
        `asked`: the kinds as the request listed them (None when some slot is not flat:
        then no per-slot shares)."""
        parts: list[int] = []
        placed: list[tuple[Kind, list[NodeShare]]] = []
        try:
            for kind in kinds:
                try:
                    part, result = self._match(kind.spec, policy, "allocate_with_satisfiability")
                except Unsatisfiable as exc:
                    raise slot_unsatisfiable(kind.resource, exc) from None
                parts.append(part)
                placed.append((kind, self._nodes_of(result)))
        except Busy as exc:
            self._rollback(parts)
            self._check_kinds_satisfiable(kinds, policy)
            if op == "allocate_orelse_reserve":
                return self._reserve_largest(jobid, spec, kinds, policy, exc, plain, asked)
            raise
        except BaseException:
            self._rollback(parts)
            raise
        self._parts[jobid] = parts
        nodes = per_node(n for _kind, shares in placed for n in shares)
        if asked is None:
            return Placement("ALLOCATED", 0, nodes, plain)
        slots = [s for kind, shares in sorted(placed, key=lambda p: p[0].index)
                 for s in self._slots(kind, shares)]
        return Placement("ALLOCATED", 0, nodes, plain, asked, tuple(slots))

    def _rollback(self, parts: list[int]) -> None:
        for part in parts:
            self._timed.discard(part)
            self._traverser.cancel(part)

    def _check_kinds_satisfiable(self, kinds: list[Kind], policy: str) -> None:
        """Busy only if it may fit some day: every kind fits the machine on its own and the
        kinds together ask for no more than the machine (up ranks) has. Sound, not complete:
        kinds that each fit but cannot be packed together are reported busy, never wrongly
        unsatisfiable."""
        need: dict[str, int] = {}
        for kind in kinds:
            slot = kind.resource
            try:
                self._match(kind.spec, policy, "satisfiability")
            except Unsatisfiable as exc:
                raise slot_unsatisfiable(slot, exc) from None
            except Busy:
                pass
            for type_, n in slot_totals(slot).items():
                need[type_] = need.get(type_, 0) + n * slot.count.min
        have = {"core": 0, "gpu": 0, "memory": 0}
        for node in self.capacity():
            if node["status"] == "up":
                have["core"] += node["cores"]
                have["gpu"] += node["gpus"]
                have["memory"] += node["memory_mib"]
        for type_, total in have.items():
            if need.get(type_, 0) > total:
                raise Unsatisfiable(f"the slots together need {describe({type_: need[type_]})} "
                                    f"but the machine has {describe({type_: total})}")

    def _reserve_largest(
        self, jobid: int, spec: Jobspec, kinds: list[Kind], policy: str, busy: Busy,
        plain: dict, asked: tuple[SlotKind, ...] | None,
    ) -> Placement:
        """A multi-kind request that cannot run now is booked as N slots of its largest
        shape (the library reserves one slot shape at a time): the booking holds at least
        what every slot needs, so backfill never takes what it waits for. If that shape fits
        right now (the kinds, matched largest first, did not: a packing order artifact), it
        is allocated at that shape, which over-allocates but never overcommits: each slot
        of the request gets its own shape out of one wide slot (largest kinds first)."""
        wide = widest_slot(spec, kinds)
        if wide is None:
            raise busy  # only flat core/gpu/memory slots can be widened into one shape
        part, result = self._match(wide, policy, "allocate_orelse_reserve")
        self._parts[jobid] = [part]
        nodes = self._nodes_of(result)
        if result.status != "ALLOCATED" or asked is None:
            return Placement(result.status, result.at, nodes, plain)
        wide_kind = flat_kind(wide.resources[0])
        room = [one for node in nodes for one in cut(node, wide_kind, self._granule(node.rank))]
        slots = []
        for kind in kinds:
            for _ in range(kind.slot.count):
                w = room.pop(0)
                slots.append(SlotShare(kind.index, dataclasses.replace(
                    w, cores=w.cores[:kind.slot.cores], gpus=w.gpus[:kind.slot.gpus])))
        slots.sort(key=lambda s: s.kind)
        return Placement("ALLOCATED", 0, nodes, plain, asked, tuple(slots))

    def _nodes_of(self, result) -> list[NodeShare]:
        per_rank: dict[int, tuple[list[int], list[int], list[int]]] = {}
        for emit in result.selection:
            v = emit.vertex
            if v.rank < 0 or v.type not in ("core", "gpu", "memory"):
                continue
            cores, gpus, memory = per_rank.setdefault(v.rank, ([], [], [0]))
            if v.type == "core":
                cores.append(v.id)
            elif v.type == "gpu":
                gpus.append(v.id)
            else:
                memory[0] += emit.needs
        return [
            NodeShare(rank, self._nodes[rank].hostname if rank in self._nodes else f"rank{rank}",
                      tuple(sorted(cores)), tuple(sorted(gpus)), memory[0])
            for rank, (cores, gpus, memory) in sorted(per_rank.items())
        ]

    def hold(self, jobid: int, nodes: list[NodeShare], *, missing_ok: bool = False,
             window: tuple[int, int] = (0, HORIZON)) -> Holding:
        """Hold exactly what `nodes` name for `jobid` (on top of what it holds already):
        each node's core and GPU ids, and its memory as whole granules (the lowest free
        ones: granules are interchangeable). Fluxion's ``update`` (`Traverser.replay`),
        one part per rank, so a partial cancel frees ranks one by one.

        Returns what is held (memory as the whole granules taken) and what is not: the
        nodes whose rank is not in the graph (yet), which the caller keeps pending and
        holds when the rank joins, and, with `missing_ok`
        (a journal replay onto a node that came back smaller), a node's ids the node no
        longer has (the rest of that node is held). All or nothing over the ranks that
        are here: raises Busy naming the first core, GPU or memory not free (or
        Unsatisfiable naming one the node does not have), holding nothing new. `window`:
        the planner span held (`window()` of a journaled span; default until cancelled)."""
        parts: list[int] = []
        holding = Holding([], [])
        try:
            for node in nodes:
                rank = node.rank
                if rank not in self._nodes:
                    holding.pending.append(node)
                    continue
                picks, missing = self._picks(rank, node, missing_ok, window)
                if missing is not None:
                    holding.pending.append(missing)
                if len(picks) <= 2:
                    continue  # nothing exclusive on this rank (only the cluster and node)
                part = self._part_id()
                try:
                    self._traverser.replay(picks, part, *window)
                except TraverserError as exc:
                    raise Busy(f"rank {rank}: {exc}") from None
                parts.append(part)
                holding.held.append(self._summary(rank, picks))
        except BaseException:
            for part in parts:
                self._traverser.cancel(part)
            raise
        self._parts.setdefault(jobid, []).extend(parts)
        if window[1] < HORIZON:  # it has an end: matches read the clock from now on
            self._timed.update(parts)
        return holding

    def _summary(self, rank: int, picks: list[tuple]) -> NodeShare:
        """The share `picks` hold on `rank`."""
        ids: dict[str, list[int]] = {"core": [], "gpu": []}
        memory = 0
        for v, units, _exclusive in picks[2:]:
            if v.type == "memory":
                memory += units
            else:
                ids[v.type].append(v.id)
        return NodeShare(rank, self._nodes[rank].hostname, tuple(sorted(ids["core"])),
                         tuple(sorted(ids["gpu"])), memory)

    def _picks(self, rank: int, node: NodeShare, missing_ok: bool,
               window: tuple[int, int]) -> tuple[list[tuple], NodeShare | None]:
        """`Traverser.replay` picks for one share: cluster and node shared, the named
        cores and GPUs and enough free memory granules exclusively; and, with `missing_ok`,
        the part of the share the node does not have (None when it has all of it)."""
        have = self._nodes[rank]
        host = have.hostname
        vertex = next(v for v in self._graph.by_rank[rank] if v.type == "node")
        kids = vertex.children
        picks: list[tuple] = [(self._graph.root, 1, False), (vertex, 1, False)]
        absent: dict[str, list[int]] = {}
        for type_, ids, made, offset in (("core", node.cores, have.cores, 0),
                                         ("gpu", node.gpus, have.gpus, len(have.cores))):
            for i in ids:
                v = _leaf(kids, type_, i, made, offset)
                if v is None:
                    if not missing_ok:
                        raise Unsatisfiable(f"rank {rank} ({host}) has no {type_} {i}")
                    absent.setdefault(type_, []).append(i)
                    continue
                picks.append((v, 1, True))
        memory = node.memory_mib
        if memory > 0:
            granules = sorted((v for v in kids if v.type == "memory"), key=lambda v: v.id)
            want = -(-memory // granules[0].size) if granules else 0
            if want > len(granules):
                if not missing_ok:
                    raise Unsatisfiable(f"rank {rank} ({host}) has no {memory} MiB of memory")
                absent["memory"] = [memory]
                want = len(granules)
            free = [v for v in granules if self._traverser.holdable(v, *window)][:want]
            if len(free) < want:
                raise Busy(f"rank {rank} ({host}): {memory} MiB of memory is not free")
            picks.extend((v, v.size, True) for v in free)
        if not absent:
            return picks, None
        return picks, NodeShare(rank, host, tuple(absent.get("core", ())),
                                tuple(absent.get("gpu", ())), absent.get("memory", [0])[0])

    def cancel(self, jobid: int) -> None:
        for part in self._parts.pop(jobid, []):
            self._timed.discard(part)
            try:
                self._traverser.cancel(part)
            except TraverserError:
                pass

    def partial_cancel(self, jobid: int, ranks: list[int]) -> None:
        """Free `ranks` of an allocation."""
        left = []
        for part in self._parts.get(jobid, []):
            try:
                if not self._traverser.partial_cancel(part, ranks):
                    left.append(part)
            except TraverserError:
                pass
        self._parts[jobid] = left


def _leaf(kids: list, type_: str, i: int, made: list[int], offset: int):
    """The child of type `type_` and id `i` among a node's children `kids` (None: there is
    none). `add_flat_nodes` makes them in the order of the node's ids (`made`: its cores,
    then its GPUs at `offset`, then its memory granules), so the place is found without
    an index; a child that is not there is looked for among them all.

    Why no index: the one kept per rank ((type, id) -> vertex, made on a rank's first
    hold) was 19.4 MiB once a journal replay or `sched.adopt` had held something on each
    of 1,000 nodes of 197 vertices (a tuple and a dict entry a vertex; issue 32)."""
    try:
        v = kids[offset + made.index(i)]
        if v.type == type_ and v.id == i:
            return v
    except (ValueError, IndexError):
        pass
    return next((v for v in kids if v.type == type_ and v.id == i), None)


def _lib_op(op: str) -> str:
    """The library's op for a service op: allocate says why it never fits."""
    return "allocate_with_satisfiability" if op == "allocate" else op


def _asked(kinds: list[Kind]) -> tuple[SlotKind, ...] | None:
    """A split jobspec's kinds in the order it listed them (None if one is not flat)."""
    if any(k.slot is None for k in kinds):
        return None
    return tuple(k.slot for k in sorted(kinds, key=lambda k: k.index))
