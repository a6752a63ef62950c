"""The one adapter between the scheduler service and the graph scheduler library.

The service speaks in allocation ids and per-node summaries
(``{"rank", "hostname", "cores": "0-3", "gpus": "", "memory_mib": n}``); the
library speaks in graphs, jobspecs, traversers and match results. Keeping the
translation here means the service never depends on the library's internals,
and R <-> per-node summaries are computed in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policy import NAMED, Policy
from fluxnode.scheduler.rv1_reader import read_rv1
from fluxnode.scheduler.traverser import NoMatch, Traverser, TraverserError
from fluxnode.scheduler.traverser import Unsatisfiable as LibUnsatisfiable

# Pods have no known end, but the planner needs finite spans to find the earliest
# start of a reservation; every allocation runs [0, HORIZON) on a clock that never
# advances, so a reservation lands at HORIZON (once today's allocations end).
HORIZON = 2**31

POLICIES = tuple(NAMED)


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


class LiveGraph:
    """A resource graph built from R plus a traverser, keyed by service allocation ids."""

    def __init__(self, R: dict):
        self.R = R
        self._hostnames = rank_hostnames(R)
        self._children = rank_children(R)
        self._down: set[int] = set()
        self._graph = read_rv1(R)
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
        """Per node: rank, hostname, cores, gpus, memory_mib the graph holds."""
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
        return out

    def set_down(self, down: set[int]) -> None:
        down = set(down) & set(self._hostnames)
        for rank in self.ranks():
            if (rank in down) != (rank in self._down) or rank in down:
                self._traverser.set_status(rank, "down" if rank in down else "up")
        self._down = down

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
        lib_op = "allocate_with_satisfiability" if op == "allocate" else op
        part, result = self._match(spec, policy, lib_op)
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
