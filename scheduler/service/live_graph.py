"""The one adapter between the scheduler service and the graph scheduler library.

The service speaks in allocation ids and per-node summaries
(``{"rank", "hostname", "cores": "0-3", "gpus": "", "memory_mib": n}``); the
library speaks in graphs, jobspecs, traversers and match results. Keeping the
translation here means the service never depends on the library's internals,
and R <-> per-node summaries are computed in one place.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import parse_R
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policies.policy import NAMED, Policy
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser, TraverserError
from fluxnode.scheduler.traversers.dfu import Unsatisfiable as LibUnsatisfiable

# Pods have no known end, but the planner needs finite spans to find the earliest
# start of a reservation; every allocation runs [0, HORIZON) on a clock that never
# advances, so a reservation lands at HORIZON (once today's allocations end).
HORIZON = 2**31

POLICIES = tuple(NAMED)

# A node's memory becomes at most this many equal vertices (see service_R).
MEMORY_GRANULES = 128


class InvalidRequest(ValueError):
    """The jobspec (or a replayed record) is malformed; the message says where."""


class Busy(Exception):
    """The request fits the machine but not right now."""


class Unsatisfiable(Exception):
    """The request can never fit the machine as it is; the message says why."""


@dataclass
class Placement:
    status: str  # "ALLOCATED" | "RESERVED"
    at: int
    nodes: list[dict]
    jobspec: dict
    kinds: list[dict] | None = None  # several slot kinds: [{"label", "count", "slot", "nodes"}] per kind


SLOT_LEAVES = ("core", "gpu", "memory")


def slot_totals(slot: dict) -> dict[str, int]:
    """What one slot holds, by resource type (nested counts multiplied out)."""
    out: dict[str, int] = {}

    def walk(items: list, times: int) -> None:
        for item in items or []:
            n = times * int(item.get("count") or 1)
            out[item["type"]] = out.get(item["type"], 0) + n
            walk(item.get("with") or [], n)

    walk(slot.get("with") or [], 1)
    return out


def slot_shape(slot: dict) -> dict[str, int]:
    """What one slot of a kind holds, in the words of the per-node summaries: a caller
    (the binder after a restart) tells the kinds apart by it without the jobspec."""
    totals = slot_totals(slot)
    return {"cores": totals.get("core", 0), "gpus": totals.get("gpu", 0), "memory_mib": totals.get("memory", 0)}


def describe(totals: dict[str, int]) -> str:
    """'3 cores, 1 gpu, 512 MiB of memory' for error messages."""
    words = []
    for type_, n in totals.items():
        if type_ == "memory":
            words.append(f"{n} MiB of memory")
        else:
            words.append(f"{n} {type_}{'s' if n != 1 else ''}")
    return ", ".join(words) or "nothing"


def slot_unsatisfiable(slot: dict, why: Exception) -> Unsatisfiable:
    """`why` one kind of a multi-kind request can never fit, naming the kind."""
    return Unsatisfiable(f"slot {slot.get('label')} ({describe(slot_totals(slot))} each): {why}")


def split_slot_kinds(spec: dict) -> list[dict] | None:
    """One jobspec per top-level slot kind of `spec`, largest slot first (GPUs, then cores,
    then memory); None when `spec` has a single kind (or is not a list of slots).

    Why: Fluxion's matcher (and the library, faithfully) matches one slot shape per
    jobspec level and refuses sibling slots, while a pod group of different requests is
    one jobspec of several slot kinds (jobspec_builder). Each kind is matched in turn,
    largest first (first-fit decreasing), inside one service call.
    """
    resources = spec.get("resources") or []
    if len(resources) < 2 or any(r.get("type") != "slot" for r in resources):
        return None
    tasks = spec.get("tasks") or []
    kinds = []
    for slot in resources:
        own = [t for t in tasks if t.get("slot") == slot.get("label")]
        kinds.append({**spec, "resources": [slot], "tasks": own or [{"command": ["pod"], "slot": slot.get("label"), "count": {"per_slot": 1}}]})

    def size(kind: dict) -> tuple[int, int, int]:
        t = slot_totals(kind["resources"][0])
        return t.get("gpu", 0), t.get("core", 0), t.get("memory", 0)

    return sorted(kinds, key=size, reverse=True)


def merge_nodes(parts: list[list[dict]]) -> list[dict]:
    """Per-node summaries of several matches, combined per rank (cores/GPUs united, memory added)."""
    per_rank: dict[int, dict] = {}
    for nodes in parts:
        for n in nodes:
            m = per_rank.setdefault(n["rank"], {"hostname": n["hostname"], "cores": set(), "gpus": set(), "memory_mib": 0})
            m["cores"].update(idset.decode(n.get("cores") or ""))
            m["gpus"].update(idset.decode(n.get("gpus") or ""))
            m["memory_mib"] += int(n.get("memory_mib") or 0)
    return [
        {"rank": rank, "hostname": m["hostname"], "cores": idset.encode(m["cores"]), "gpus": idset.encode(m["gpus"]),
         "memory_mib": m["memory_mib"]}
        for rank, m in sorted(per_rank.items())
    ]


def kinds_on(kinds: list[dict], old: list[dict], new: list[dict]) -> list[dict]:
    """The per-kind placement `kinds` (made of the per-node summaries `old`) carried over
    to `new`, the same amounts as re-placed by a replay: per rank, the i-th lowest core
    (GPU) id of `old` becomes the i-th lowest of `new`; ranks not in `new` are dropped.
    A replay pins per-node totals, so it re-picks ids only when something was freed out
    of order; the kinds must follow or two kinds' records would name the same core."""
    maps: dict[int, tuple[dict[int, int], dict[int, int]]] = {}
    new_by_rank = {int(n["rank"]): n for n in new}
    for n in old:
        m = new_by_rank.get(int(n["rank"]))
        if m is None:
            continue
        maps[int(n["rank"])] = tuple(
            dict(zip(idset.decode(n.get(key) or ""), idset.decode(m.get(key) or ""), strict=False))
            for key in ("cores", "gpus")
        )
    out = []
    for kind in kinds:
        nodes = []
        for n in kind.get("nodes") or []:
            rank = int(n["rank"])
            if rank not in maps:
                continue
            cores, gpus = maps[rank]
            nodes.append({**n,
                          "cores": idset.encode(sorted(cores[c] for c in idset.decode(n.get("cores") or "") if c in cores)),
                          "gpus": idset.encode(sorted(gpus[g] for g in idset.decode(n.get("gpus") or "") if g in gpus))})
        out.append({**kind, "nodes": nodes})
    return out


def rank_hostnames(R: dict) -> dict[int, str]:
    """rank -> hostname from an RFC 20 R (nodelist lists hosts in ascending rank order)."""
    execution = R.get("execution") or {}
    ranks: set[int] = set()
    for entry in execution.get("R_lite") or []:
        ranks.update(idset.decode(str(entry["rank"])))
    hosts: list[str] = []
    for text in execution.get("nodelist") or []:
        hosts.extend(hostlist.decode(text))
    ordered = sorted(ranks)
    if len(hosts) != len(ordered):
        return {rank: f"rank{rank}" for rank in ordered}
    return dict(zip(ordered, hosts, strict=True))


def rank_children(R: dict) -> dict[int, dict[str, str]]:
    """rank -> {"core": idset, "gpu": idset} from R_lite."""
    out: dict[int, dict[str, str]] = {}
    for entry in (R.get("execution") or {}).get("R_lite") or []:
        for rank in idset.decode(str(entry["rank"])):
            out[rank] = dict(entry.get("children") or {})
    return out


def nodes_to_R(nodes: list[dict], hostnames: dict[int, str] | None = None) -> dict:
    """An RFC 20 R (R_lite + nodelist) for per-node summaries; ranks merged per node."""
    cores: dict[int, set[int]] = {}
    gpus: dict[int, set[int]] = {}
    names: dict[int, str] = dict(hostnames or {})
    for node in nodes:
        rank = int(node["rank"])
        cores.setdefault(rank, set()).update(idset.decode(node.get("cores") or ""))
        gpus.setdefault(rank, set()).update(idset.decode(node.get("gpus") or ""))
        if node.get("hostname"):
            names[rank] = node["hostname"]
    groups: dict[tuple[str, str], list[int]] = {}
    for rank in sorted(cores):
        key = (idset.encode(cores[rank]), idset.encode(gpus[rank]))
        groups.setdefault(key, []).append(rank)
    r_lite = []
    for (core, gpu), ranks in sorted(groups.items(), key=lambda kv: kv[1][0]):
        children = {"core": core}
        if gpu:
            children["gpu"] = gpu
        r_lite.append({"rank": idset.encode(ranks), "children": children})
    ranks = sorted(cores)
    nodelist = [hostlist.encode(names.get(r, f"rank{r}") for r in ranks)] if ranks else []
    return {"version": 1, "execution": {"R_lite": r_lite, "nodelist": nodelist, "starttime": 0, "expiration": 0}}


def memory_granule_mib(memory_mib: int) -> int:
    """Size of one memory vertex of a node with `memory_mib`: the smallest power of two
    (MiB) that splits it into at most MEMORY_GRANULES vertices."""
    granule = 1
    while granule * MEMORY_GRANULES < memory_mib:
        granule *= 2
    return granule


def service_R(R: dict) -> dict:
    """The R the service schedules on: R's nodes, flat, as ``cluster0 -> <hostname> ->
    core<N> / gpu<N> / memory<K>``.

    Why flat while R keeps sockets: Fluxion's matcher (and ours, faithfully) matches a
    ``slot`` at a vertex only when that vertex has *direct* children of every type in
    the slot. With R's ``node -> socket -> core`` and the memory pool under the node, a
    slot of cores + memory never matches, a slot of more cores than one socket has never
    matches, and ``node -> slot`` jobspecs select nothing. A pod's slot is node-local
    and may use any of its node's cores, GPUs and memory, so the service graph puts
    them all directly under the node (sockets are R's business: binding inside a node
    is the kubelet's). R itself is unchanged; only the service's graph is flat.

    Why memory is several vertices: a slot holds its resources exclusively, and an
    exclusive pool vertex is taken whole (Fluxion's semantics), so one pool per node
    would give all of a node's memory to its first pod. Each node's memory (MiB, from
    R's ``scheduling`` memory vertices; none when 0 or absent) is split into equal
    vertices of ``memory_granule_mib`` MiB (a remainder smaller than one granule is
    left out): a request takes whole granules, so it gets at most one granule - 1 MiB
    more than it asked for and never more than the node has.

    Returned as an R whose ``scheduling`` key is that JGF, read by the library's own
    reader (``read_rv1``). When R changes (grows, shrinks) the service builds a new
    graph from the new R and replays its journal into it.
    """
    memory = {n.rank: n.memory_mib for n in parse_R(R)} if R.get("scheduling") else {}
    paused = gc.isenabled()
    gc.disable()  # ~10^5 small dicts for a large machine: the cyclic GC would cost 5x the build
    try:
        graph = _flat_jgf(R, memory)
    finally:
        if paused:
            gc.enable()
    return {"version": 1, "execution": dict(R.get("execution") or {}), "scheduling": graph}


def _flat_jgf(R: dict, memory: dict[int, int]) -> dict:
    hostnames = rank_hostnames(R)
    children = rank_children(R)
    vertices: list[dict] = []
    edges: list[dict] = []

    def add(type_: str, basename: str, name: str, id_: int, rank: int, path: str, size: int = 1, unit: str = "") -> str:
        key = str(len(vertices))
        vertices.append({"id": key, "metadata": {
            "type": type_, "basename": basename, "name": name, "id": id_, "rank": rank,
            "size": size, "unit": unit, "exclusive": False, "paths": {"containment": path},
        }})
        return key

    cluster = add("cluster", "cluster", "cluster0", 0, -1, "/cluster0")
    for rank in sorted(hostnames):
        host = hostnames[rank]
        base, digits = host.rstrip("0123456789"), host[len(host.rstrip("0123456789")):]
        npath = f"/cluster0/{host}"
        node = add("node", base or host, host, int(digits) if digits else rank, rank, npath)
        edges.append({"source": cluster, "target": node})
        for type_ in ("core", "gpu"):
            for i in idset.decode(children.get(rank, {}).get(type_) or ""):
                edges.append({"source": node, "target": add(type_, type_, f"{type_}{i}", i, rank, f"{npath}/{type_}{i}")})
        mib = memory.get(rank, 0)
        granule = memory_granule_mib(mib)
        for k in range(mib // granule):
            key = add("memory", "memory", f"memory{k}", k, rank, f"{npath}/memory{k}", size=granule, unit="MiB")
            edges.append({"source": node, "target": key})
    return {"graph": {"nodes": vertices, "edges": edges}}


class LiveGraph:
    """A resource graph built from R plus a traverser, keyed by service allocation ids."""

    def __init__(self, R: dict):
        self.R = R
        self._hostnames = rank_hostnames(R)
        self._children = rank_children(R)
        self._down: set[int] = set()
        self._capacity: list[dict] | None = None
        self._graph = read_rv1(service_R(R))
        self._traverser = Traverser(self._graph, "first")
        self._policies: dict[str, Policy] = {}
        self._parts: dict[int, list[int]] = {}  # service id -> traverser job ids
        self._next_part = 1

    def ranks(self) -> list[int]:
        return sorted(self._hostnames)

    def hostnames(self) -> dict[int, str]:
        return dict(self._hostnames)

    def same_resources(self, R: dict) -> bool:
        return R == self.R

    def whole_nodes(self, ranks: set[int]) -> list[dict]:
        return [
            {
                "rank": r,
                "hostname": self._hostnames.get(r, f"rank{r}"),
                "cores": self._children.get(r, {}).get("core", ""),
                "gpus": self._children.get(r, {}).get("gpu", ""),
            }
            for r in sorted(ranks)
            if r in self._hostnames
        ]

    def capacity(self) -> list[dict]:
        """Per node: rank, hostname, cores, gpus, memory_mib the graph holds (cached until
        ranks go up or down; callers must not change it)."""
        if self._capacity is not None:
            return self._capacity
        out = []
        for rank in self.ranks():
            memory = sum(v.size for v in self._graph.by_rank.get(rank, []) if v.type == "memory")
            children = self._children.get(rank, {})
            out.append({
                "rank": rank,
                "hostname": self._hostnames[rank],
                "cores": len(idset.decode(children.get("core", ""))),
                "gpus": len(idset.decode(children.get("gpu", ""))),
                "memory_mib": memory,
                "status": "down" if rank in self._down else "up",
            })
        self._capacity = out
        return out

    def set_down(self, down: set[int]) -> None:
        down = set(down) & set(self._hostnames)
        for rank in self.ranks():
            if (rank in down) != (rank in self._down) or rank in down:
                self._traverser.set_status(rank, "down" if rank in down else "up")
        self._down = down
        self._capacity = None

    def _part_id(self) -> int:
        part = self._next_part
        self._next_part += 1
        return part

    def _match(self, jobspec: dict, policy: str, op: str) -> tuple[int, object]:
        if policy not in self._policies:
            self._policies[policy] = Policy.parse(policy)
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
            raise InvalidRequest(f"jobspec: {exc}") from None

    def allocate(self, jobid: int, jobspec: dict | str, policy: str, op: str) -> Placement:
        try:
            spec = Jobspec.parse(jobspec).to_dict()
        except JobspecError as exc:
            raise InvalidRequest(f"jobspec: {exc}") from None
        system = spec.setdefault("attributes", {}).setdefault("system", {})
        if not system.get("duration"):
            system["duration"] = HORIZON
        kinds = split_slot_kinds(spec)
        if kinds is not None:
            return self._allocate_kinds(jobid, spec, kinds, policy, op)
        lib_op = "allocate_with_satisfiability" if op == "allocate" else op
        part, result = self._match(spec, policy, lib_op)
        self._parts[jobid] = [part]
        return Placement(result.status, result.at, self._nodes_of(result), spec)

    def _allocate_kinds(self, jobid: int, spec: dict, kinds: list[dict], policy: str, op: str) -> Placement:
        """All slot kinds or none: each kind matched in turn (largest first); the ones
        already matched are rolled back when one fails. The service holds its lock for the
        whole call, so nothing else is placed in between. One allocation id covers every
        kind (its traverser parts), so cancel, partial cancel and replay see one allocation."""
        parts: list[int] = []
        placed: list[dict] = []
        try:
            for kind in kinds:
                slot = kind["resources"][0]
                try:
                    part, result = self._match(kind, policy, "allocate_with_satisfiability")
                except Unsatisfiable as exc:
                    raise slot_unsatisfiable(slot, exc) from None
                parts.append(part)
                placed.append({"label": slot.get("label"), "count": int(slot.get("count") or 1),
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
        return Placement("ALLOCATED", 0, merge_nodes([k["nodes"] for k in placed]), spec, placed)

    def _rollback(self, parts: list[int]) -> None:
        for part in parts:
            self._traverser.cancel(part)

    def _check_kinds_satisfiable(self, kinds: list[dict], policy: str) -> None:
        """Busy only if it may fit some day: every kind fits the machine on its own and the
        kinds together ask for no more than the machine (up ranks) has. Sound, not complete:
        kinds that each fit but cannot be packed together are reported busy, never wrongly
        unsatisfiable."""
        need: dict[str, int] = {}
        for kind in kinds:
            slot = kind["resources"][0]
            try:
                self._match(kind, policy, "satisfiability")
            except Unsatisfiable as exc:
                raise slot_unsatisfiable(slot, exc) from None
            except Busy:
                pass
            for type_, n in slot_totals(slot).items():
                need[type_] = need.get(type_, 0) + n * int(slot.get("count") or 1)
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

    def _reserve_largest(self, jobid: int, spec: dict, kinds: list[dict], policy: str, busy: Busy) -> Placement:
        """A multi-kind request that cannot run now is booked as N slots of its largest
        shape (the library reserves one slot shape at a time): the booking holds at least
        what every slot needs, so backfill never takes what it waits for. If that shape fits
        right now (the kinds, matched largest first, did not: a packing order artifact), it
        is allocated at that shape, which over-allocates but never overcommits."""
        slots = [k["resources"][0] for k in kinds]
        if any(set(slot_totals(s)) - set(SLOT_LEAVES) for s in slots):
            raise busy  # only flat core/gpu/memory slots can be widened into one shape
        largest = {t: max(slot_totals(s).get(t, 0) for s in slots) for t in SLOT_LEAVES}
        count = sum(int(s.get("count") or 1) for s in slots)
        wide = {**spec, "resources": [{"type": "slot", "count": count, "label": "reserve",
                                       "with": [{"type": t, "count": n} for t, n in largest.items() if n]}],
                "tasks": [{"command": ["pod"], "slot": "reserve", "count": {"per_slot": 1}}]}
        part, result = self._match(wide, policy, "allocate_orelse_reserve")
        self._parts[jobid] = [part]
        return Placement(result.status, result.at, self._nodes_of(result), spec)

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
                "hostname": self._hostnames.get(rank, f"rank{rank}"),
                "cores": idset.encode(n["cores"]),
                "gpus": idset.encode(n["gpus"]),
                "memory_mib": n["memory_mib"],
            }
            for rank, n in sorted(per_rank.items())
        ]

    def restore(self, jobid: int, nodes: list[dict]) -> list[dict]:
        """Hold the recorded amounts on the recorded ranks again (one pinned match per rank).

        Core/GPU ids are taken lowest-free-first, so they match the record when
        allocations are replayed in id order and none was partially freed out of order.
        """
        parts: list[int] = []
        restored: list[dict] = []
        try:
            for node in nodes:
                rank = int(node["rank"])
                if rank not in self._hostnames:
                    raise Unsatisfiable(f"rank {rank} is not in the resources")
                with_: list[dict] = []
                ncores = len(idset.decode(node.get("cores") or ""))
                ngpus = len(idset.decode(node.get("gpus") or ""))
                if ncores:
                    with_.append({"type": "core", "count": ncores})
                if ngpus:
                    with_.append({"type": "gpu", "count": ngpus})
                if node.get("memory_mib"):
                    with_.append({"type": "memory", "count": int(node["memory_mib"])})
                if not with_:
                    continue
                spec = {
                    "version": 1,
                    "resources": [{"type": "slot", "count": 1, "label": "r", "with": with_}],
                    "tasks": [{"command": ["restore"], "slot": "r", "count": {"per_slot": 1}}],
                    "attributes": {"system": {"duration": HORIZON, "constraints": {"ranks": [str(rank)]}}},
                }
                part, result = self._match(spec, "first", "allocate")
                parts.append(part)
                restored.extend(self._nodes_of(result))
        except Exception:
            for part in parts:
                self._traverser.cancel(part)
            raise
        self._parts[jobid] = parts
        return restored

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
