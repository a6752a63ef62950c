"""The one adapter between the scheduler service and the graph scheduler library.

The service speaks in allocation ids and per-node summaries
(``{"rank", "hostname", "cores": "0-3", "gpus": "", "memory_mib": n}``); the
library speaks in graphs, jobspecs, traversers and match results. Keeping the
translation here means the service never depends on the library's internals,
and R <-> per-node summaries are computed in one place.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass

from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import NodeResources, build_R, parse_R
from fluxnode.scheduler.jobspec.document import DEFAULT_LIMITS
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.flat_graph import add_flat_nodes, flat_graph, renumber_in_rank_order
from fluxnode.scheduler.service.slot_kinds import (
    describe,
    merge_nodes,
    slot_shape,
    slot_totals,
    slot_unsatisfiable,
    split_slot_kinds,
    widest_slot,
)
from fluxnode.scheduler.traversers.dfu import NoMatch, TraverserError
from fluxnode.scheduler.traversers.dfu import Unsatisfiable as LibUnsatisfiable
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser

# Pods have no known end, but the planner needs finite spans to find the earliest
# start of a reservation; every allocation runs [0, HORIZON) on a clock that never
# advances, so a reservation lands at HORIZON (once today's allocations end).
HORIZON = 2**31
PARSE_CACHE = 256  # parsed jobspecs remembered (LiveGraph._parse)
EXCLUDED_AS_DOWN = 256  # at most this many nodes left out by a hostlist: matched as down
OPS_NOW = ("allocate", "allocate_orelse_reserve")  # ops that place now when it fits now



def invalid(exc: Exception) -> InvalidRequest:
    """A refused jobspec, named once (the reader's own message may already say "jobspec:"),
    with the reader's errno (E2BIG past its size limits) when it has one."""
    text = str(exc)
    errnum = getattr(exc, "errnum", None)
    return InvalidRequest(text if text.startswith("jobspec") else f"jobspec: {text}",
                          *([errnum] if isinstance(errnum, int) else []))


@dataclass
class Holding:
    """What `LiveGraph.hold` holds now (per-node summaries) and what it could not yet."""

    held: list[dict]
    pending: list[dict]


@dataclass
class Placement:
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    nodes: list[dict]
    jobspec: dict
    kinds: list[dict] | None = (
        None  # several slot kinds: [{"label", "count", "slot", "nodes"}] per kind
    )


def nodes_to_R(nodes: list[dict], hostnames: dict[int, str] | None = None) -> dict:
    """An RFC 20 R (R_lite + nodelist, no ``scheduling``) for per-node summaries; ranks merged per
    node."""
    cores: dict[int, set[int]] = {}
    gpus: dict[int, set[int]] = {}
    names: dict[int, str] = dict(hostnames or {})
    for node in nodes:
        rank = int(node["rank"])
        cores.setdefault(rank, set()).update(idset.decode(node.get("cores") or ""))
        gpus.setdefault(rank, set()).update(idset.decode(node.get("gpus") or ""))
        if node.get("hostname"):
            names[rank] = node["hostname"]
    return build_R(
        [
            NodeResources(
                rank=r,
                hostname=names.get(r, f"rank{r}"),
                cores=sorted(cores[r]),
                gpus=sorted(gpus[r]),
            )
            for r in cores
        ],
        scheduling=False,
        starttime=0,
        expiration=0,
    )


class LiveGraph:
    """The service graph of R's nodes (see flat_graph) plus a traverser, keyed by service
    allocation ids. R that only grows (brokers join) is added to this graph in place."""

    def __init__(self, R: dict, nodes: list[NodeResources] | None = None):
        """`nodes` is `parse_R(R)` when the caller has it already (it is parsed otherwise)."""
        self.R = R
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
        self._index: dict[int, dict[tuple[str, int], object]] = {}  # rank -> (type, id) -> vertex
        self.limits = DEFAULT_LIMITS  # what a jobspec may cost to read (the service sets it)
        # JSON text (name blanked) -> (limits, parsed, plain): see _parse
        self._parsed: OrderedDict[str, tuple] = OrderedDict()
        self.excluded_as_down = EXCLUDED_AS_DOWN  # see _excluded (tests set 0: exact path)
        self._next_part = 1

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
        self._parsed.clear()  # a hostlist that named every node may not name the new ones
        if add_flat_nodes(self._graph, added) and not self._traverser.jobs:
            # ids as if built at once, so placements do not depend on the join order; with
            # jobs held (replayed from the journal before every rank joined) ids stay
            self._traverser.renumbered(renumber_in_rank_order(self._graph))
        self._traverser.reinit()
        self.R = R
        self._nodes = nodes
        self._capacity = None
        return [node.rank for node in added]

    def whole_nodes(self, ranks: set[int]) -> list[dict]:
        return [
            {
                "rank": r,
                "hostname": self._nodes[r].hostname,
                "cores": idset.encode(self._nodes[r].cores),
                "gpus": idset.encode(self._nodes[r].gpus),
            }
            for r in sorted(ranks)
            if r in self._nodes
        ]

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
        self._unusable = unusable
        self._capacity = None

    def _part_id(self) -> int:
        part = self._next_part
        self._next_part += 1
        return part

    def _match(self, jobspec: Jobspec, policy: str, op: str) -> tuple[int, object]:
        if policy not in self._policies:
            self._policies[policy] = Policy.parse(policy, stable_ties=True)  # fast mode
        self._traverser.policy = self._policies[policy]
        part = self._part_id()
        try:
            return part, self._traverser.match(jobspec, op=op, jobid=part, at=0)
        except LibUnsatisfiable as exc:
            raise Unsatisfiable(exc.reason or "the request can never fit these resources") from None
        except NoMatch as exc:
            if exc.busy:
                raise Busy(exc.reason or "not enough free resources now") from None
            raise Unsatisfiable(exc.reason or "no match") from None
        except (JobspecError, TraverserError, ValueError) as exc:
            raise invalid(exc) from None

    def allocate(self, jobid: int, jobspec: dict | str, policy: str, op: str) -> Placement:
        """Place `jobspec` (parsed once here; the traverser and the slot kinds get the
        parsed `Jobspec`). A jobspec without a duration runs until cancelled (HORIZON)."""
        spec, plain, excluded = self._parse(jobspec)
        kinds = split_slot_kinds(spec)
        if kinds is not None:
            return self._allocate_kinds(jobid, spec, kinds, policy, op, plain)
        lib_op = "allocate_with_satisfiability" if op == "allocate" else op
        if excluded and op in OPS_NOW:
            try:  # placed now, if it fits now (what both ops do first)
                part, result = self._match_excluding(
                    spec, excluded, policy, "allocate_with_satisfiability"
                )
            except (Busy, Unsatisfiable):
                # not placed now: with the constraint, the op says busy, unsatisfiable (and
                # why) or reserves
                part, result = self._match(spec, policy, lib_op)
        else:
            part, result = self._match(spec, policy, lib_op)
        self._parts[jobid] = [part]
        return Placement(result.status, result.at, self._nodes_of(result), plain)

    def _match_excluding(
        self, spec: Jobspec, excluded: frozenset[int], policy: str, op: str
    ) -> tuple[int, object]:
        """Match `spec` without its hostlist constraint, the few nodes it leaves out
        marked down for this match only (set back before returning, whatever happens).
        Any constraint turns the exhaustive policies' indexed match off (lonode on 5,000
        nodes: ~340 ms a match, 0.15 ms without), and the binder's hostlist leaves out
        the few nodes that are cordoned, NotReady or reserved for a blocked group. The
        placement is on the nodes the constraint names; a request that does not fit now
        is matched again with the constraint and its own op, so busy and unsatisfiable, and
        their messages, are the constraint's (and a reservation is made with it)."""
        toggled = [rank for rank in excluded if rank not in self._unusable]
        for rank in toggled:
            self._traverser.set_status(rank, "down")
        try:
            return self._match(dataclasses.replace(spec, constraints=None), policy, op)
        finally:
            for rank in toggled:
                self._traverser.set_status(rank, "up")

    def _parse(self, jobspec: dict | str) -> tuple[Jobspec, dict, frozenset[int] | None]:
        """The parsed jobspec (a duration of 0 made HORIZON), its plain mapping, and the
        ranks its hostlist constraint leaves out when they are few (see `_excluded`).

        Remembered for the last PARSE_CACHE jobspecs, keyed by their JSON text without
        the job's name: a binder sends thousands of jobspecs a second that differ only
        in their name (the group's), each with the same hostlist constraint over
        thousands of nodes, and parsing it is most of an allocation's cost. The name is
        put back on a hit; the result equals `Jobspec.parse` of the jobspec as sent
        (tested). Only jobspecs that parsed are remembered: a bad one is parsed, and
        refused, every time."""
        name, key = None, None
        if isinstance(jobspec, str):
            key = "text:" + jobspec
        else:
            attributes = jobspec.get("attributes")
            system = attributes.get("system") if isinstance(attributes, dict) else None
            job = system.get("job") if isinstance(system, dict) else None
            if isinstance(job, dict) and len(job) == 1 and isinstance(job.get("name"), str):
                name = job["name"]
                jobspec = {
                    **jobspec,
                    "attributes": {**attributes, "system": {**system, "job": {"name": ""}}},
                }
            try:
                # exact for what comes off the wire (JSON: string keys, no tuples)
                key = "json:" + json.dumps(jobspec, allow_nan=False)
            except (TypeError, ValueError):
                key = None  # not JSON: parsed (and refused) as it is
        hit = self._parsed.get(key) if key is not None else None
        if hit is not None and hit[0] is self.limits:
            self._parsed.move_to_end(key)
            spec, plain, excluded = hit[1], hit[2], hit[3]
        else:
            try:
                spec = Jobspec.parse(jobspec, limits=self.limits)
            except JobspecError as exc:
                raise invalid(exc) from None
            if not spec.duration:
                system = {**(spec.attributes.get("system") or {}), "duration": HORIZON}
                spec = dataclasses.replace(
                    spec, duration=HORIZON, attributes={**spec.attributes, "system": system}
                )
            plain = spec.to_dict()
            excluded = self._excluded(spec.constraints)
            if excluded is not None and not excluded:  # names every node: filters nothing
                spec, excluded = dataclasses.replace(spec, constraints=None), None
            if key is not None:
                self._parsed[key] = (self.limits, spec, plain, excluded)
                if len(self._parsed) > PARSE_CACHE:
                    self._parsed.popitem(last=False)
        if name is None:
            return spec, plain, excluded
        # the name back in (new mappings along its path: the cached ones are shared)
        system = {**spec.attributes["system"], "job": {"name": name}}
        spec = dataclasses.replace(spec, attributes={**spec.attributes, "system": system})
        plain_system = {**plain["attributes"]["system"], "job": {"name": name}}
        plain = {**plain, "attributes": {**plain["attributes"], "system": plain_system}}
        return spec, plain, excluded

    def _excluded(self, constraint) -> frozenset[int] | None:
        """For a plain hostlist constraint, the ranks of this graph it leaves out, when
        they are at most EXCLUDED_AS_DOWN (empty: it names every node, and the match goes
        without it); None otherwise (no constraint, another kind, or one that leaves out
        many nodes: matched with the constraint). The binder's jobspecs carry the hostlist
        of the usable nodes: all of them, or all but a few, most of the time. Remembered
        with the parse; the graph forgets every parse when it grows (a new node is not in
        an old hostlist). The matched jobspec (journal, sched.info) keeps its constraint."""
        if constraint is None or constraint.op != "hostlist" or not constraint.members:
            return None
        members = constraint.members
        out: list[int] = []
        for rank, node in self._nodes.items():
            if not any(node.hostname in m for m in members):
                out.append(rank)
                if len(out) > self.excluded_as_down:
                    return None
        return frozenset(out)

    def _allocate_kinds(
        self, jobid: int, spec: Jobspec, kinds: list[Jobspec], policy: str, op: str,
        plain: dict | None = None,
    ) -> Placement:
        """All slot kinds or none: each kind matched in turn (largest first); the ones
        already matched are rolled back when one fails. The service holds its lock for the
        whole call, so nothing else is placed in between. One allocation id covers every
        kind (its traverser parts), so cancel, partial cancel and replay see one allocation."""
        parts: list[int] = []
        placed: list[dict] = []
        try:
            for kind in kinds:
                slot = kind.resources[0]
                try:
                    part, result = self._match(kind, policy, "allocate_with_satisfiability")
                except Unsatisfiable as exc:
                    raise slot_unsatisfiable(slot, exc) from None
                parts.append(part)
                placed.append({"label": slot.label, "count": slot.count.min,
                               "slot": slot_shape(slot), "nodes": self._nodes_of(result)})
        except Busy as exc:
            self._rollback(parts)
            self._check_kinds_satisfiable(kinds, policy)
            if op == "allocate_orelse_reserve":
                return self._reserve_largest(jobid, spec, kinds, policy, exc)
            raise
        except BaseException:
            self._rollback(parts)
            raise
        self._parts[jobid] = parts
        return Placement(
            "ALLOCATED", 0, merge_nodes([k["nodes"] for k in placed]),
            spec.to_dict() if plain is None else plain, placed,
        )

    def _rollback(self, parts: list[int]) -> None:
        for part in parts:
            self._traverser.cancel(part)

    def _check_kinds_satisfiable(self, kinds: list[Jobspec], policy: str) -> None:
        """Busy only if it may fit some day: every kind fits the machine on its own and the
        kinds together ask for no more than the machine (up ranks) has. Sound, not complete:
        kinds that each fit but cannot be packed together are reported busy, never wrongly
        unsatisfiable."""
        need: dict[str, int] = {}
        for kind in kinds:
            slot = kind.resources[0]
            try:
                self._match(kind, policy, "satisfiability")
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
        self, jobid: int, spec: Jobspec, kinds: list[Jobspec], policy: str, busy: Busy
    ) -> Placement:
        """A multi-kind request that cannot run now is booked as N slots of its largest
        shape (the library reserves one slot shape at a time): the booking holds at least
        what every slot needs, so backfill never takes what it waits for. If that shape fits
        right now (the kinds, matched largest first, did not: a packing order artifact), it
        is allocated at that shape, which over-allocates but never overcommits."""
        wide = widest_slot(spec, kinds)
        if wide is None:
            raise busy  # only flat core/gpu/memory slots can be widened into one shape
        part, result = self._match(wide, policy, "allocate_orelse_reserve")
        self._parts[jobid] = [part]
        return Placement(result.status, result.at, self._nodes_of(result), spec.to_dict())

    def _nodes_of(self, result) -> list[dict]:
        per_rank: dict[int, dict] = {}
        for emit in result.selection:
            v = emit.vertex
            if v.rank < 0 or v.type not in ("core", "gpu", "memory"):
                continue
            node = per_rank.setdefault(v.rank, {"cores": set(), "gpus": set(), "memory_mib": 0})
            if v.type == "core":
                node["cores"].add(v.id)
            elif v.type == "gpu":
                node["gpus"].add(v.id)
            else:
                node["memory_mib"] += emit.needs
        return [
            {
                "rank": rank,
                "hostname": self._nodes[rank].hostname if rank in self._nodes else f"rank{rank}",
                "cores": idset.encode(n["cores"]),
                "gpus": idset.encode(n["gpus"]),
                "memory_mib": n["memory_mib"],
            }
            for rank, n in sorted(per_rank.items())
        ]

    def hold(self, jobid: int, nodes: list[dict], *, missing_ok: bool = False) -> Holding:
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
        Unsatisfiable naming one the node does not have), holding nothing new."""
        parts: list[int] = []
        holding = Holding([], [])
        try:
            for node in nodes:
                rank = int(node["rank"])
                if rank not in self._nodes:
                    holding.pending.append(node)
                    continue
                picks, missing = self._picks(rank, node, missing_ok)
                if missing is not None:
                    holding.pending.append(missing)
                if len(picks) <= 2:
                    continue  # nothing exclusive on this rank (only the cluster and node)
                part = self._part_id()
                try:
                    self._traverser.replay(picks, part, 0, HORIZON)
                except TraverserError as exc:
                    raise Busy(f"rank {rank}: {exc}") from None
                parts.append(part)
                holding.held.append(self._summary(rank, picks))
        except BaseException:
            for part in parts:
                self._traverser.cancel(part)
            raise
        self._parts.setdefault(jobid, []).extend(parts)
        return holding

    def _summary(self, rank: int, picks: list[tuple]) -> dict:
        """The per-node summary of what `picks` hold on `rank`."""
        ids: dict[str, list[int]] = {"core": [], "gpu": []}
        memory = 0
        for v, units, _exclusive in picks[2:]:
            if v.type == "memory":
                memory += units
            else:
                ids[v.type].append(v.id)
        return {"rank": rank, "hostname": self._nodes[rank].hostname,
                "cores": idset.encode(sorted(ids["core"])),
                "gpus": idset.encode(sorted(ids["gpu"])), "memory_mib": memory}

    def _picks(self, rank: int, node: dict, missing_ok: bool) -> tuple[list[tuple], dict | None]:
        """`Traverser.replay` picks for one node summary: cluster and node shared, the named
        cores and GPUs and enough free memory granules exclusively; and, with `missing_ok`,
        the part of the summary the node does not have (None when it has all of it)."""
        index = self._index.get(rank)
        if index is None:
            index = self._index[rank] = {}
            for v in self._graph.by_rank.get(rank, []):
                index.setdefault((v.type, -1 if v.type == "node" else v.id), v)
        host = self._nodes[rank].hostname
        picks: list[tuple] = [(self._graph.root, 1, False), (index[("node", -1)], 1, False)]
        absent: dict[str, list[int]] = {}
        for type_, key in (("core", "cores"), ("gpu", "gpus")):
            for i in idset.decode(node.get(key) or ""):
                v = index.get((type_, i))
                if v is None:
                    if not missing_ok:
                        raise Unsatisfiable(f"rank {rank} ({host}) has no {type_} {i}")
                    absent.setdefault(key, []).append(i)
                    continue
                picks.append((v, 1, True))
        memory = int(node.get("memory_mib") or 0)
        if memory > 0:
            granules = sorted((v for (t, _i), v in index.items() if t == "memory"),
                              key=lambda v: v.id)
            want = -(-memory // granules[0].size) if granules else 0
            if want > len(granules):
                if not missing_ok:
                    raise Unsatisfiable(f"rank {rank} ({host}) has no {memory} MiB of memory")
                absent["memory_mib"] = [memory]
                want = len(granules)
            free = [v for v in granules if self._traverser.holdable(v, 0, HORIZON)][:want]
            if len(free) < want:
                raise Busy(f"rank {rank} ({host}): {memory} MiB of memory is not free")
            picks.extend((v, v.size, True) for v in free)
        if not absent:
            return picks, None
        return picks, {"rank": rank, "hostname": host,
                       "cores": idset.encode(absent.get("cores", [])),
                       "gpus": idset.encode(absent.get("gpus", [])),
                       "memory_mib": absent.get("memory_mib", [0])[0]}

    def cancel(self, jobid: int) -> None:
        for part in self._parts.pop(jobid, []):
            try:
                self._traverser.cancel(part)
            except TraverserError:
                pass

    def partial_cancel(self, jobid: int, ranks: list[int], remaining: list[dict]) -> list[dict]:
        """Free `ranks` of an allocation; returns what it holds afterwards (`remaining`)."""
        left = []
        for part in self._parts.get(jobid, []):
            try:
                if not self._traverser.partial_cancel(part, ranks):
                    left.append(part)
            except TraverserError:
                pass
        self._parts[jobid] = left
        return remaining
