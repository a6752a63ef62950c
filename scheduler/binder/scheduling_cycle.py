"""The scheduling queue and the scheduling cycle: pick pod groups, ask the leader where they go.

Like kube-scheduler's scheduling cycle, one thread (the binder loop) takes the waiting
workloads from the queue in order (priority, then age; see queue.py): the complete
groups and the FluxJob loop's waiting Jobs, merged into one order (workload_queue.py), the
first of either kind that does not fit reserved, a Job asked for through the FluxJob loop
at its place. It decides for each, but the decision is the lead broker's graph scheduler's:
a group is one request of N slots, one per pod, matched all or nothing. Every pod gets at least
one whole core (cpu rounds up), its GPUs and its memory (MiB, rounded up); a
heterogeneous group has one slot kind per distinct shape, matched kind by kind in
one service call, and the answer names each slot, so every pod gets exactly its
shape. Up to ``alloc_batch``
groups go in one ``sched.alloc`` round trip; the service answers in order and
stops after a reservation, so batching never changes an outcome.

Before asking, the cycle narrows the nodes a group may use (cordoned, NotReady,
reserved for another group; each pod's nodeSelector, required node affinity and
tolerations), computed once per change rather than once per group: a burst has
thousands of groups over thousands of nodes. Other schedulers' pods and the gap
between a node's capacity and its allocatable are held in the graph by one pinned
"outside usage" allocation per node, re-pinned whenever they change. A placed
group goes to the binding cycle; one that cannot run says why on its pods
(``WaitingForResources``, ``WaitingForGroup`` or ``Unschedulable``).
"""

from __future__ import annotations

import errno
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace

from fluxnode.agent.broker.client import RPCError
from fluxnode.agent.kube.node_affinity import (
    NodeAffinityError,
    PodPlacement,
    eligible_nodes,
    explain,
    pod_placement,
)
from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.admission import QUEUE_LABEL
from fluxnode.scheduler.binder.binding_cycle import Bind, BindingCycle
from fluxnode.scheduler.binder.cluster_state import Group, GroupAllocation, OutsideUsage, PodInfo
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.job_slots import JobSlots
from fluxnode.scheduler.binder.pod_affinity import (
    HOSTNAME,
    PodAffinityError,
    PodRules,
    has_rules,
    keep_apart,
    pod_rules,
)
from fluxnode.scheduler.binder.pod_requests import PodRequestError, pod_requests
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.sched_client import LeaderForgot
from fluxnode.scheduler.binder.slot_assignment import (
    AssignmentError,
    assign,
    indexes,
    slots_by_shape,
)
from fluxnode.scheduler.binder.walltime import pods_walltime
from fluxnode.scheduler.binder.workload_queue import (
    Entry,
    JobAsk,
    JobSource,
    SameRequest,
    merged,
)
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec

log = logging.getLogger("fluxnode.binder")

MIB = 1024 * 1024
# What a leader from before sched.alloc's batch `cancel` (fluxnode before 2026-11-29) answers
# a batch carrying one: its refusal of any field beside `requests`, the call not done.
BEFORE_BATCH_CANCEL = (errno.EINVAL, "requests: cannot be combined with cancel")
# what the service answers for a group that can never be placed as asked: unsatisfiable,
# or a request it refuses (a bad jobspec, one too large); anything else may pass
REFUSALS = (errno.ENODEV, errno.EINVAL, errno.E2BIG, errno.ENOENT, errno.ERANGE)


@dataclass
class Candidates:
    """The nodes groups may use in this cycle and what is derived from them, computed
    once per change (a reservation excludes nodes), not once per group: a cluster has
    thousands of nodes and a burst thousands of groups."""

    names: list[str]
    ranks: str  # their ranks, an idset: what a request may use
    largest_memory: int  # bytes
    excluded: int  # how many nodes were excluded when this was computed
    tainted: bool = False  # some candidate has a NoSchedule/NoExecute taint
    # distinct pod placement rules -> (eligible names, their ranks, why others were not)
    eligible: dict = field(default_factory=dict)


@dataclass
class Attempt:
    """A group ready to be asked for: the sched.alloc payload and what its answer is for."""

    group: Group
    pods: list[PodInfo]
    shapes: dict[str, SlotKind]  # pod uid -> its slot's shape (count 1)
    usable: list[str]
    payload: dict
    kept_off: bool = False  # pods already on nodes closed some to it (pod_affinity.py)


@dataclass(frozen=True)
class WholeRequest:
    """A workload's whole set, asked before its pods exist (`SchedulingCycle.whole_request`):
    the sched.alloc payload and what explains a refusal."""

    payload: dict
    slot: SlotKind
    count: int
    names: list[str]  # the nodes it may use
    who: str  # ``Job NS/NAME``


def _key(attempt: Attempt | JobAsk) -> GroupKey:
    return attempt.key if isinstance(attempt, JobAsk) else attempt.group.key


def _slot_kinds(shapes: dict[str, SlotKind]) -> list[dict]:
    """One slot kind per distinct shape, with its count, as a request sends them."""
    return [replace(shape, count=n).to_wire()
            for shape, n in sorted(Counter(shapes.values()).items())]


def _answer_slots(attempt: Attempt, answer: dict) -> tuple[list[dict], list[dict]]:
    """The kinds asked and the answer's slots. A group asked one per node (a jobspec of
    `count` nodes with one slot each) has one slot per node: each node's share."""
    if "slots" in attempt.payload:
        return attempt.payload["slots"], answer["slots"]
    return _slot_kinds(attempt.shapes), [{"kind": 0, **n} for n in answer["nodes"]]


def _who(group: Group) -> str:
    """A group as a refusal names it to the workloads after it (workload_queue.behind)."""
    return f"group {group.key.namespace}/{group.key.name}"


class SchedulingCycle:
    def __init__(self, ctx: BinderContext, binding: BindingCycle):
        self.ctx = ctx
        self.binding = binding
        self.retry_outside: set[str] = (
            set()
        )  # nodes whose outside usage the graph could not hold yet
        # the candidates when no node is excluded, for one node generation: a burst runs
        # a cycle per handful of pod events, and each would walk every node again
        self._all_candidates: tuple[int, Candidates | None] = (-1, None)
        self.jobs: JobSource | None = None  # the waiting Jobs (the FluxJob loop's)
        self.same = SameRequest()  # this walk's refusals, by request
        # this walk: nodes reserved for its head, each numbered workload's POSITION, and
        # its entries by key
        self.excluded: set[str] = set()
        self.positions: dict[GroupKey, int] = {}
        self._entries: dict[GroupKey, Entry] = {}
        self._told_before_batch_cancel = False  # logged once (`_request_before_batch_cancel`)
        self._domain_generation = -1  # `_domains`: nodes by topology label, per generation
        self._domain_cache: dict[str, dict[str, list[str]]] = {}

    def run(self) -> None:
        """One cycle: settle cancels and outside usage, then walk the queue if anything
        changed."""
        ctx = self.ctx
        ctx.retry_failed_reports()
        self.binding.resubmit_due()
        self._flush_cancels()
        ctx.drains.sync(ctx.sched, ctx.state.unschedulable_nodes())
        self._pin_outside()
        self.update_gauges()
        if not ctx.state.changed:
            return
        ctx.state.changed = False
        ctx.state.rules_waiting = False  # set again by a group kept off nodes by pods
        ctx.reservations.new_pass()  # last pass's cancelled by this pass's first request
        self.same.clear()
        self._walk(merged(self.jobs.queued() if self.jobs is not None else [],
                          ctx.state.queue.entries()))
        for alloc_id in ctx.reservations.take_replaced():  # the walk asked nothing
            ctx.cancel(alloc_id, None)
        self._report_waiting()

    def _walk(self, entries: list[Entry]) -> None:
        """Ask for the waiting workloads in queue order (workload_queue.py): consecutive
        groups in batches of ``alloc_batch`` (flushed before a Job, so the order holds),
        each Job on its own; the first of either kind that does not fit is reserved."""
        ctx = self.ctx
        usable = ctx.state.usable_nodes()
        self.excluded = excluded = set()
        self.positions = {}
        self._entries = {e.key: e for e in entries}
        candidates: Candidates | None = None
        busy = 0
        todo = deque(entries)
        batch: list[Attempt] = []
        numbered: set[GroupKey] = set()
        while todo or batch:
            entry = todo.popleft() if todo else None
            if batch and (entry is None or len(batch) >= ctx.config.alloc_batch
                          or (entry.job is not None and entry.job.alone)
                          or self._alone(entry.key)):
                if entry is not None:
                    todo.appendleft(entry)
                busy += self._ask_batch(batch, todo)
                batch = []
                continue
            if entry is None:
                break
            if entry.job is not None:
                position = self._number(entry.key, numbered)
                ask = entry.job.prepare(position, ctx.reservations.op_for_blocked())
                if ask is None:
                    continue
                earlier = self.same.earlier(ask.payload)
                if earlier is not None:  # an equal request before it got no allocation
                    ask.finish(earlier)
                    continue
                batch.append(ask)
                if entry.job.alone:
                    busy += self._ask_batch(batch, todo)
                    batch = []
                continue
            group = ctx.state.groups.get(entry.key)
            if group is not None and group.key in ctx.state.job_slots \
                    and self._into_job_slots(group, usable):
                continue  # a running Job's later pods: into its slots
            if group is None or not group.ready:
                continue
            held = ctx.held.get(group.key)
            if held is not None:  # an admitted Job's pods: bound into its allocation, not
                # asked for (and so not kept off the head's nodes)
                attempt = self._prepare_held(group, len(held.get("slots") or ()))
                if isinstance(attempt, Attempt):
                    del ctx.held[group.key]
                    binds: list[Bind] = []
                    if self._finish(attempt, held, excluded, binds) == "scheduled":
                        ctx.state.job_slots[group.key] = job_slots_of(held, attempt, binds)
                    self.binding.submit(binds)
                continue
            if self._gated(group):
                self._number(group.key, numbered)
            if busy >= ctx.config.queue_depth:
                continue  # not asked this cycle (numbered all the same)
            if group.unsatisfiable and group.unsatisfiable_generation == ctx.state.node_generation:
                continue
            if candidates is None or candidates.excluded != len(excluded):
                candidates = self._candidates(usable, excluded)
            attempt = self._prepare(group, candidates)
            if isinstance(attempt, Attempt):
                earlier = self.same.earlier(attempt.payload)
                if earlier is None:
                    batch.append(attempt)
                    if self._alone(group.key):  # asked now: the groups after it see it
                        busy += self._ask_batch(batch, todo)
                        batch = []
                elif self._finish(attempt, earlier, excluded, []) == "busy":
                    busy += 1  # an equal request before it got no allocation: told the same
            elif attempt == "busy":
                busy += 1

    def _alone(self, key: GroupKey | None) -> bool:
        """A group with rules between pods (pod_affinity.py) is asked on its own, the
        batch before it first: where the groups before it went decides where it may go,
        and it decides for those after it (ours placed occupy their nodes at once:
        ClusterState._occupy_placed)."""
        group = self.ctx.state.groups.get(key) if key is not None else None
        return group is not None and any(has_rules(p.raw) for p in group.pending.values())

    def _number(self, key: GroupKey, numbered: set[GroupKey]) -> int:
        """The next POSITION (a workload with a FluxJob record, once per walk)."""
        if key not in numbered:
            numbered.add(key)
            self.positions[key] = len(numbered)
        return self.positions[key]

    def _gated(self, group: Group) -> bool:
        """A group opted in with the queue label: it has a FluxJob record and a POSITION
        (podgroup_records.py)."""
        return any(QUEUE_LABEL in ((p.raw.get("metadata") or {}).get("labels") or {})
                   for p in group.pending.values())

    def _ask_batch(self, batch: list[Attempt | JobAsk], todo: deque) -> int:
        """Ask for `batch` (groups and Jobs, in queue order) in one round trip and act on the
        answers; the workloads the service did not answer (it stops after a reservation) go
        back to the front of `todo`, to be asked again (it changed what they may use, and
        which op they get). Returns how many groups were busy."""
        answers = self._request(batch)
        self._check_not_forgotten(answers)
        binds: list[Bind] = []
        busy = 0
        for attempt, answer in zip(batch, answers, strict=False):
            earlier = self.same.earlier(attempt.payload)
            if earlier is not None and not isinstance(answer, RPCError) \
                    and answer.get("status") == "ALLOCATED":
                # an equal request earlier in this batch was refused: this one may not
                # start before it (the service's state moved between the two)
                self.ctx.cancel(answer["id"], None)
                answer = earlier
            if isinstance(attempt, JobAsk):
                self.same.answered(attempt.payload, answer, attempt.who)
                held = attempt.finish(answer)
                if held is not None and held.get("status") == "RESERVED":
                    self.ctx.reservations.hold(attempt.key, held["id"], held.get("start"))
                    self.excluded.update(n["hostname"] for n in held.get("nodes") or [])
                continue
            self.same.answered(attempt.payload, answer, _who(attempt.group))
            if self._finish(attempt, answer, self.excluded, binds) == "busy":
                busy += 1
        self.binding.submit(binds)
        todo.extendleft(reversed([self._entries[_key(a)] for a in batch[len(answers):]]))
        return busy

    def update_gauges(self) -> None:
        state, metrics = self.ctx.state, self.ctx.metrics
        metrics.pending_groups.set(len(state.queue))
        metrics.pending_pods.set(
            sum(len(state.groups[k].pending) for k in state.with_pending if k in state.groups)
        )

    # -- the graph's view of the cluster ---------------------------------------------

    def _flush_cancels(self) -> None:
        state = self.ctx.state
        while state.to_cancel:
            alloc_id, ranks = state.to_cancel[0]
            self.ctx.cancel(alloc_id, ranks)
            state.to_cancel.pop(0)

    def _pin_outside(self) -> None:
        ctx = self.ctx
        state = ctx.state
        dirty = state.dirty_nodes | self.retry_outside
        state.dirty_nodes = set()
        self.retry_outside = set()
        for name in sorted(dirty):
            usage = state.outside_usage(name)
            old = state.outside.get(name)
            if (
                old is not None
                and old[1] == usage
                and (old[0] is not None or usage == OutsideUsage(0, 0, 0))
            ):
                continue
            if old is not None and old[0] is not None:
                ctx.cancel(old[0], None)
            state.outside.pop(name, None)
            state.node_generation += 1
            if usage is None:
                continue
            if usage == OutsideUsage(0, 0, 0):
                state.outside[name] = (None, usage)
                continue
            kind = {"cores": usage.cores, "gpus": usage.gpus, "memory_mib": usage.memory_mib,
                    "count": 1}
            try:
                answer = ctx.sched.rpc(
                    "sched.alloc",
                    {"slots": [kind], "ranks": str(state.capacity[name].rank),
                     "policy": "first", "op": "allocate",
                     # what already runs there counts on a drained (cordoned) node too
                     "use_drained": True,
                     "labels": {"owner": ctx.owner, "kind": "outside", "node": name}},
                )
                state.outside[name] = (answer["id"], usage)
            except RPCError as exc:
                # Our accounting cannot hold what is already there (e.g. rounding): keep the
                # node out of our placements until it can.
                log.warning(
                    "node %s: cannot hold outside usage %s: %s; node not used until it fits",
                    name,
                    usage,
                    exc.errstr,
                )
                state.outside[name] = (None, usage)
                self.retry_outside.add(name)
            state.changed = True

    # -- which nodes a group may use ------------------------------------------------

    def _candidates(self, usable: list[str], excluded: set[str]) -> Candidates:
        state = self.ctx.state
        if not excluded:
            generation, cached = self._all_candidates
            if cached is None or generation != state.node_generation or cached.names is not usable:
                cached = self._compute_candidates(usable, excluded)
                self._all_candidates = (state.node_generation, cached)
            return cached
        return self._compute_candidates(usable, excluded)

    def _compute_candidates(self, usable: list[str], excluded: set[str]) -> Candidates:
        state = self.ctx.state
        names = [n for n in usable if n not in excluded] if excluded else usable
        most = state.largest_memory(names) if names else 0
        nodes = state.nodes
        tainted = any(nodes[n].traits.taints for n in names if n in nodes)
        return Candidates(names, self._ranks(names), most, len(excluded), tainted)

    def _eligible(
        self, candidates: Candidates, placements: list[PodPlacement]
    ) -> tuple[list[str], str, str]:
        """The candidates every pod of a group may run on (nodeSelector, required node
        affinity, taints), their ranks, and kube-scheduler's summary when there are none.
        Computed once per distinct set of rules per cycle change: the pods of a burst
        mostly share a template."""
        if not candidates.tainted and not any(p.restricts for p in placements):
            return candidates.names, candidates.ranks, ""
        key = frozenset(placements)
        hit = candidates.eligible.get(key)
        if hit is None:
            state = self.ctx.state
            nodes = [state.nodes[n].traits for n in candidates.names if n in state.nodes]
            names, excluded = eligible_nodes(key, nodes)
            hit = candidates.eligible[key] = (
                names,
                self._ranks(names),
                explain(excluded, len(nodes)) if not names else "",
            )
        return hit

    def _ranks(self, names: list[str]) -> str:
        """The ranks of `names` (nodes the graph has: usable nodes are), an idset."""
        capacity = self.ctx.state.capacity
        return idset.encode(sorted(capacity[n].rank for n in names))

    # -- one group --------------------------------------------------------------------

    def _prepare(self, group: Group, candidates: Candidates) -> Attempt | str:
        """What to ask the service for `group`, or the outcome when there is nothing to ask."""
        ctx = self.ctx
        pods = sorted(group.pending.values(), key=lambda p: p.uid)
        if self.binding.backing_off(pods):
            return "backoff"  # a binding failed recently; the resync tick retries it
        try:
            reqs = {p.uid: pod_requests(p.raw) for p in pods}
        except PodRequestError as exc:
            return self._unschedulable(group, pods, str(exc), f"{exc}; fix the pod spec")
        # Every pod gets exactly its own shape: a heterogeneous group is one request with
        # one slot kind per distinct shape, matched kind by kind in one service call.
        shapes = {uid: r.slot() for uid, r in reqs.items()}
        if not candidates.names:
            return self._waiting(
                pods,
                "busy: no usable node (cordoned, NotReady, unknown to the overlay, or full); will "
                "retry",
            )
        try:
            placements = [pod_placement(p.raw) for p in pods]
        except NodeAffinityError as exc:
            return self._unschedulable(group, pods, str(exc), f"{exc}; fix the pod spec")
        names, ranks, why_none = self._eligible(candidates, placements)
        if not names:
            if candidates.excluded:  # reserved for another group now; may fit later
                return self._waiting(pods, f"busy: {why_none}; will retry")
            return self._unschedulable(group, pods, why_none)
        # The graph holds each node's capacity, of which the outside-usage pins keep back
        # what is not allocatable: a pod above every node's allocatable memory would wait
        # forever as "busy", so it is reported unschedulable here in Kubernetes' terms.
        biggest = max(r.memory_bytes for r in reqs.values())
        if biggest > candidates.largest_memory:
            return self._unschedulable(
                group,
                pods,
                f"a pod needs {biggest // MIB} MiB of memory but the largest "
                f"usable node allocates {candidates.largest_memory // MIB} MiB",
            )
        apart = self._apart(group, pods, shapes, names, candidates.excluded)
        if isinstance(apart, str):
            return apart
        spread, kept_off = apart
        if kept_off:
            names = [n for n in names if n not in kept_off]
            ranks = self._ranks(names)
        payload = {
            "slots": _slot_kinds(shapes),
            "ranks": ranks,
            "policy": ctx.config.policy,
            "op": ctx.reservations.op_for_blocked(),
            "with_R": False,  # the answer's nodes and slots say it all
            "labels": {
                "owner": ctx.owner,
                "kind": "group",
                "group": str(group.key),
                "pods": [p.uid for p in pods],
            },
        }
        duration = pods_walltime(p.raw for p in pods)
        if duration is not None:
            payload["duration"] = duration
        if spread:  # one pod per node: the jobspec's node-level form (`flux submit -N`)
            kind = replace(next(iter(shapes.values())), count=len(pods))
            del payload["slots"], payload["ranks"]
            payload.pop("duration", None)
            payload["jobspec"] = build_jobspec([kind], nnodes=len(pods),
                                               constraints={"ranks": [ranks]},
                                               duration=duration or 0)
        return Attempt(group, pods, shapes, names, payload, bool(kept_off))

    def _apart(self, group: Group, pods: list[PodInfo], shapes: dict[str, SlotKind],
               names: list[str], reserved: int) -> tuple[bool, dict[str, str]] | str:
        """Required pod anti-affinity (pod_affinity.py) for a group that may use `names`:
        whether its pods go one per node, and the nodes pods already there close to it
        (node -> kube-scheduler's reason); or the outcome when it cannot be asked.
        `reserved`: how many nodes are held for another group now (they may free up)."""
        state = self.ctx.state
        try:
            rules = [pod_rules(p.raw) for p in pods]
        except PodAffinityError as exc:
            pod = next(p for p in pods if has_rules(p.raw))
            why = f"pod {pod.ref}: {exc}"
            return self._unschedulable(group, pods, why, why if "not evaluated" in why
                                       else f"{why}; fix the pod spec")
        if not state.occupants.terms and not any(r.anti for r in rules):
            return False, {}
        members = [(p.namespace, (p.raw.get("metadata") or {}).get("labels") or {}, r)
                   for p, r in zip(pods, rules, strict=True)]
        profiles: dict[tuple, tuple[str, dict, PodRules]] = {}  # the distinct members
        for ns, labels, r in members:
            profiles.setdefault((ns, tuple(sorted(labels.items())), r), (ns, labels, r))
        kept_off = self._kept_off(profiles.values(), names)
        keys = keep_apart(members)
        if keys - {HOSTNAME}:
            why = (f"pods of group {group.key.namespace}/{group.key.name} keep apart by "
                   f"required pod anti-affinity on {sorted(keys - {HOSTNAME})[0]}, which "
                   f"fluxnode does not evaluate inside a group (only {HOSTNAME}); place them "
                   "as separate pods or use the default scheduler")
            return self._unschedulable(group, pods, why, why)
        spread = HOSTNAME in keys
        if spread and len(set(shapes.values())) > 1:
            why = (f"pods of group {group.key.namespace}/{group.key.name} keep apart by "
                   f"required pod anti-affinity on {HOSTNAME} but request different "
                   "resources; fluxnode places such a group one per node only when its pods "
                   "are alike")
            return self._unschedulable(group, pods, why, why)
        left = len(names) - len(kept_off)
        if spread and len(names) < len(pods) and not reserved:
            return self._unschedulable(group, pods, (
                f"the group's {len(pods)} pods must each run on a node of their own (required "
                f"pod anti-affinity on {HOSTNAME}) but {len(names)} nodes may run them"))
        if left == 0 or (spread and left < len(pods)):
            if not kept_off:  # only the nodes reserved for another group are missing
                return self._waiting(pods, f"busy: its {len(pods)} pods need a node each "
                                     f"and {left} may run them now; will retry")
            state.rules_waiting = True
            counts = Counter(kept_off.values())
            why = explain(counts, len(names))
            if spread:
                why += f"; its {len(pods)} pods need a node each"
            return self._waiting(pods, f"busy: {why}; will retry when pods leave")
        return spread, kept_off

    def _kept_off(self, profiles, names: list[str]) -> dict[str, str]:
        """The nodes of `names` that pods already there close to any of `profiles` (a
        group's distinct (namespace, labels, rules)): every node in the topology domain
        of a pod one's term matches, or of a pod whose term matches one."""
        state = self.ctx.state
        nodes = state.nodes
        out: dict[str, str] = {}
        for ns, labels, rules in profiles:
            for key, where, reason in state.occupants.against(ns, labels, rules):
                domains = self._domains(key)
                for node in where:
                    value = nodes[node].traits.labels.get(key) if node in nodes else None
                    for name in domains.get(value, ()) if value is not None else ():
                        out.setdefault(name, reason)
        if not out:
            return out
        asked = set(names)
        return {n: r for n, r in out.items() if n in asked}

    def _domains(self, key: str) -> dict[str, list[str]]:
        """Nodes by their value of label `key` (a topology domain), per node generation."""
        state = self.ctx.state
        if self._domain_generation != state.node_generation:
            self._domain_generation, self._domain_cache = state.node_generation, {}
        hit = self._domain_cache.get(key)
        if hit is None:
            hit = self._domain_cache[key] = {}
            for name, node in state.nodes.items():
                value = node.traits.labels.get(key)
                if value is not None:
                    hit.setdefault(value, []).append(name)
        return hit

    def _prepare_held(self, group: Group, room: int | None = None) -> Attempt | str:
        """An admitted Job's pods, all there, go into the allocation made for the Job before
        they existed (fluxjob_loop.py): nothing is asked, so the nodes they may use are not
        worked out again (the template's rules chose them); only each pod's shape, to put
        index i in slot i. `room`: the allocation's slots, when the Job's parallelism was
        raised after it was admitted and it has more pods than that: the lowest indexes
        take them (as the ledger would), and the others wait for the Job's growth
        (fluxjob_loop.py), which the ledger this makes lets it ask for; without it the
        pods would not fit the allocation, which would be given back and the whole Job
        asked for again."""
        pods = sorted(group.pending.values(), key=lambda p: p.uid)
        if room is not None and len(pods) > room:
            order = indexes(pods)
            pods = sorted(pods, key=lambda p: (order.get(p.uid, len(pods)), p.uid))[:room]
            pods.sort(key=lambda p: p.uid)
        if self.binding.backing_off(pods):
            return "backoff"
        try:
            shapes = {p.uid: pod_requests(p.raw).slot() for p in pods}
        except PodRequestError as exc:
            return self._unschedulable(group, pods, str(exc), f"{exc}; fix the pod spec")
        return Attempt(group, pods, shapes, [], {"slots": _slot_kinds(shapes)})

    def _into_job_slots(self, group: Group, usable: list[str]) -> bool:
        """A running Job's new pods (a replacement, the next index, those its raised
        parallelism adds) take free slots of its allocations on usable nodes (job_slots.py);
        nothing is asked here. A pod with no free slot of its shape waits for one (the pod it
        replaces still holds it, or the Job's growth waits in the queue: fluxjob_loop.py).
        False: the free slots left are on nodes not usable now, so the pods left are asked for
        anew as an ordinary group."""
        if not group.pending:
            return True
        attempt = self._prepare_held(group)
        if not isinstance(attempt, Attempt):
            return True
        state, key = self.ctx.state, group.key
        slots = state.job_slots[key]
        nodes = set(usable)
        taken = slots.take(attempt.shapes, indexes(attempt.pods), nodes.__contains__)
        for uid, n in taken.items():
            state.slotted(key, uid, n)
        self.binding.submit([(p, slots.slots[n].share, slots.alloc_of(n), str(key))
                             for p in attempt.pods if (n := taken.get(p.uid)) is not None])
        left = [p for p in attempt.pods if p.uid not in taken]
        if not left:
            return True
        if any(slots.slots[n].shape == attempt.shapes[p.uid] for n in slots.free()
               for p in left):
            return False
        job = f"{key.namespace}/{key.name.rsplit('.', 1)[0]}"
        if slots.asking:  # its parallelism grew: the FluxJob loop asks for the slots more
            self._waiting(left, f"busy: Job {job} grew by {slots.asking} pods; their slots "
                          "wait in the queue (its FluxJob's POSITION); will bind once they "
                          "are allocated")
        else:
            self._waiting(left, f"busy: every slot of the allocation of Job {job} is in "
                          "use; will bind when one of its pods ends")
        return True

    def _request(self, batch: list[Attempt | JobAsk]) -> list[dict | RPCError]:
        """Ask the service for `batch` in one round trip; one answer per request tried
        (the service stops after the first one reserved). The pass's first request carries
        last pass's reservations as `cancel` (a batch's field, queue.py): the service
        cancels them before matching, in the same call. Refused (an id that is not a
        reservation on this leader: one with a new statedir hands ids out again), the
        binder is out of step with the leader and reconciles, which cancels our
        reservations from sched.list."""
        sched = self.ctx.sched
        replaced = self.ctx.reservations.take_replaced()
        t0 = time.perf_counter()
        try:
            if len(batch) == 1 and not replaced:
                try:
                    return [sched.rpc("sched.alloc", batch[0].payload)]
                except RPCError as exc:
                    return [exc]
            payload: dict = {"requests": [a.payload for a in batch]}
            if replaced:
                payload["cancel"] = replaced
            try:
                answers = sched.rpc("sched.alloc", payload)["answers"]
            except RPCError as exc:
                if not replaced:
                    raise
                if (exc.errnum, exc.errstr) != BEFORE_BATCH_CANCEL:
                    raise LeaderForgot(f"sched.alloc refused to cancel last pass's "
                                       f"reservations {replaced}: {exc.errstr}") from None
                answers = self._request_before_batch_cancel(payload)
            return [RPCError(a["errnum"], a.get("errstr")) if "errnum" in a else a for a in answers]
        finally:
            self.ctx.metrics.attempt_duration.observe(time.perf_counter() - t0)

    def _request_before_batch_cancel(self, payload: dict) -> list[dict]:
        """A leader from before a batch's `cancel` refused it (a rolling upgrade that rolled
        the binder first): its answer is what that version said of any unknown field, and
        it did nothing. Cancel last pass's reservations one by one, then ask for the batch
        alone, as binders did then (the head is without its reservation in between, as it
        was then). Each pass tries the one-step form first, so the binder uses it as soon
        as the new leader serves."""
        if not self._told_before_batch_cancel:
            self._told_before_batch_cancel = True
            log.warning("the leader's scheduler predates sched.alloc's batch `cancel` (an "
                        "older fluxnode); cancelling last pass's reservations one by one")
        for alloc_id in payload.pop("cancel"):
            self.ctx.cancel(alloc_id, None)
        return self.ctx.sched.rpc("sched.alloc", payload)["answers"]

    def _check_not_forgotten(self, answers: list[dict | RPCError]) -> None:
        """The last guard before binding: an answer naming a core or GPU one of our running
        (or being bound) pods uses means the leader does not hold them, i.e. it restarted
        without its journal and the resync tick has not noticed yet. Cancel the whole batch
        (nothing of it is placed yet) and have the loop re-sync the leader first."""
        used: dict[int, tuple[set[int], set[int]]] = {}  # rank -> ids in use, once per rank
        for answer in answers:
            if isinstance(answer, RPCError) or answer.get("status") != "ALLOCATED":
                continue  # a reservation names what running pods use now, by design
            for n in answer.get("nodes") or []:
                rank = int(n["rank"])
                if rank not in used:
                    used[rank] = self.ctx.state.in_use(rank)
                    self.binding.in_flight_on(rank, *used[rank])
                cores, gpus = used[rank]
                clash = (cores & set(idset.decode(n.get("cores") or ""))) or (
                    gpus & set(idset.decode(n.get("gpus") or ""))
                )
                if clash:
                    for a in answers:
                        if not isinstance(a, RPCError) and a.get("status") == "ALLOCATED":
                            self.ctx.cancel(a["id"], None)
                    raise LeaderForgot(
                        f"sched.alloc gave allocation {answer['id']} ids {sorted(clash)} on rank "
                        f"{rank} that our running pods use"
                    )

    def _finish(
        self, attempt: Attempt, answer: dict | RPCError, excluded: set[str], binds: list[Bind]
    ) -> str:
        """Act on the service's answer for one group; placed pods go to `binds`."""
        ctx = self.ctx
        group, pods, shapes = attempt.group, attempt.pods, attempt.shapes
        if isinstance(answer, RPCError):
            if answer.errnum == errno.EBUSY:
                return self._waiting(pods, f"{answer.errstr}; will retry when resources free up")
            if answer.errnum not in REFUSALS:  # the service failed (EIO), not the request
                return self._waiting(pods, f"{answer.errstr}; will retry", "error")
            if attempt.kept_off:  # the nodes pods keep it off may free up
                ctx.state.rules_waiting = True
                return self._waiting(pods, f"busy: {answer.errstr} (nodes closed to it by "
                                     "required pod anti-affinity left out); will retry when "
                                     "pods leave")
            return self._unschedulable(
                group, pods, self._explain(shapes, attempt.usable) or answer.errstr
            )
        ctx.sched_ok = True
        if answer["status"] == "RESERVED":
            ctx.reservations.hold(group.key, answer["id"], answer.get("start"))
            excluded.update(n["hostname"] for n in answer["nodes"])
            return self._waiting(
                pods,
                "busy: resources reserved for this group; will bind when they free up",
                "reserved",
            )
        try:
            slots = assign(shapes, slots_by_shape(*_answer_slots(attempt, answer)),
                           indexes(pods))
        except AssignmentError as exc:
            ctx.cancel(answer["id"], None)
            return self._waiting(pods, f"busy: {exc}; will retry", "error")
        ctx.state.placed(
            GroupAllocation(answer["id"], group.key, {uid: s.rank for uid, s in slots.items()})
        )
        ctx.metrics.attempts.labels("scheduled").inc()
        binds.extend((pod, slots[pod.uid], answer["id"], str(group.key)) for pod in pods)
        return "scheduled"

    # -- a workload's whole set, before its pods exist ----------------------------------

    def whole_request(self, key: GroupKey, template: dict, slot: SlotKind, count: int, *,
                      op: str = "allocate", duration: int | None = None,
                      who: str = "") -> WholeRequest | str:
        """The request for all `count` slots of a workload (a FluxJob's Job) before any of its
        pods exists, on the nodes its pod template may use, for `duration` seconds (None:
        until cancelled), with `op` (``allocate_orelse_reserve`` for a reservation); `who`
        names it (``Job NS/NAME``) to workloads asking the same after it in this walk
        (workload_queue.SameRequest). Or why it cannot be asked: ``busy: ...`` (may fit
        later) or ``unsatisfiable: ...`` in the words pods are told. The walk asks it, in
        a batch with the workloads around it, and hands the reply to `whole_answer`."""
        ctx = self.ctx
        candidates = self._candidates(ctx.state.usable_nodes(), set())
        if not candidates.names:
            return "busy: no usable node (cordoned, NotReady, unknown to the overlay, or full)"
        try:
            placement = pod_placement(template)
        except NodeAffinityError as exc:
            return f"unsatisfiable: {exc}; fix the pod template"
        try:
            rules = pod_rules(template)
        except PodAffinityError as exc:
            return f"unsatisfiable: the pod template's {exc}"
        if rules.anti:  # its slots are asked before its pods exist, into one ledger
            return ("unsatisfiable: the pod template's spec.affinity.podAntiAffinity."
                    "requiredDuringSchedulingIgnoredDuringExecution is not evaluated by "
                    "fluxnode for a Job queued whole (its FluxJob); use the default "
                    "scheduler")
        names, ranks, why_none = self._eligible(candidates, [placement])
        if not names:
            return f"unsatisfiable: {why_none}; will not fit until the cluster changes"
        payload = {"slots": [replace(slot, count=count).to_wire()], "ranks": ranks,
                   "policy": ctx.config.policy, "op": op, "with_R": False,
                   "labels": {"owner": ctx.owner, "kind": "fluxjob", "group": str(key),
                              "pods": []}}
        if duration is not None:
            payload["duration"] = duration
        return WholeRequest(payload, slot, count, names, who)

    def whole_answer(self, request: WholeRequest, reply: dict | RPCError) -> dict | str:
        """The service's reply to a `whole_request`: the answer (ALLOCATED; RESERVED, its
        ``start`` when known), or why the workload waits, worded as `whole_request` says."""
        if isinstance(reply, RPCError):
            if reply.errnum == errno.EBUSY:  # worded as the pods of a group that waits
                return f"{reply.errstr}; will retry when resources free up"
            if reply.errnum not in REFUSALS:
                return f"{reply.errstr}; will retry"
            why = self._explain({str(i): request.slot for i in range(request.count)},
                                request.names) or reply.errstr
            return (f"unsatisfiable: {why.removeprefix('unsatisfiable: ')}; "
                    "will not fit until the cluster changes")
        self.ctx.sched_ok = True
        return reply

    # -- saying why a group waits -----------------------------------------------------

    def _waiting(self, pods: list[PodInfo], message: str, attempt: str = "busy") -> str:
        """The group cannot run now but may later: say so on its pods, count the attempt."""
        self.ctx.report(pods, "WaitingForResources", message)
        self.ctx.metrics.attempts.labels(attempt).inc()
        return "busy"

    def _unschedulable(
        self, group: Group, pods: list[PodInfo], reason: str, message: str | None = None
    ) -> str:
        """The group can never run as the cluster is: remember why (until the nodes change)
        and say so on its pods."""
        group.unsatisfiable, group.unsatisfiable_generation = reason, self.ctx.state.node_generation
        if message is None:
            message = (
                f"unsatisfiable: {reason.removeprefix('unsatisfiable: ')}; "
                "will not fit until the cluster changes"
            )
        self.ctx.report(pods, "Unschedulable", message)
        self.ctx.metrics.attempts.labels("unschedulable").inc()
        return "unschedulable"

    def _explain(self, shapes: dict[str, SlotKind], usable: list[str]) -> str | None:
        """Why a group can never fit, in numbers a user can act on."""
        capacity = self.ctx.state.capacity
        caps = [capacity[n] for n in usable if n in capacity]
        if not caps:
            return None
        big_c = max(c.cores for c in caps)
        big_g = max(c.gpus for c in caps)
        big_m = max(c.memory_mib for c in caps)
        for s in sorted(shapes.values(), reverse=True):
            if s.cores > big_c:
                return f"a pod needs {s.cores} cores but the largest usable node has {big_c}"
            if s.gpus > big_g:
                return f"a pod needs {s.gpus} GPUs but the largest usable node has {big_g}"
            if s.memory_mib > big_m:
                return (
                    f"a pod needs {s.memory_mib} MiB of memory but the largest usable node has "
                    f"{big_m} MiB in the graph"
                )
        total_c = sum(s.cores for s in shapes.values())
        total_g = sum(s.gpus for s in shapes.values())
        have_c = sum(c.cores for c in caps)
        have_g = sum(c.gpus for c in caps)
        if total_c > have_c:
            return (
                f"the group needs {total_c} cores in {len(shapes)} pods but the "
                f"{len(caps)} usable nodes have {have_c} in total"
            )
        if total_g > have_g:
            return (
                f"the group needs {total_g} GPUs but the {len(caps)} usable nodes "
                f"have {have_g} in total"
            )
        return None

    def _report_waiting(self) -> None:
        """Pods of incomplete groups say what they wait for (once, after report_delay:
        a group whose pods are being created right now should not churn pod status)."""
        ctx = self.ctx
        now = time.monotonic()
        for key in list(ctx.state.with_pending):
            group = ctx.state.groups.get(key)
            if group is None:
                continue
            if group.problem:
                ctx.report(list(group.pending.values()), "Unschedulable", group.problem)
                continue
            if group.waiting:  # its PodGroup object does not exist yet (podgroup.py)
                ctx.report(list(group.pending.values()), "WaitingForGroup", group.waiting)
                continue
            if group.excess:  # admitted at once through two webhook replicas
                ctx.report(list(group.pending.values()), "Unschedulable", (
                    f"group {group.key.namespace}/{group.key.name} has "
                    f"{group.size + group.excess} pods but its size is {group.size}: none is "
                    f"placed until {group.excess} of them are deleted"))
                continue
            if (
                group.placed
                or len(group.pending) >= group.size
                or now - group.since < ctx.config.report_delay
            ):
                continue
            message = (
                f"waiting for group {group.key.namespace}/{group.key.name}: "
                f"{group.size} pods required"
            )
            ctx.report(list(group.pending.values()), "WaitingForGroup", message)


def job_slots_of(answer: dict, attempt: Attempt, binds: list[Bind]) -> JobSlots:
    """The ledger of a Job's allocation (job_slots.py) once its first pods are placed in it
    (`binds`: each pod and its slot)."""
    slots = JobSlots.of_allocation(answer["id"], attempt.group.key, attempt.payload["slots"],
                                   answer["slots"])
    index = indexes(attempt.pods)
    for pod, share, _alloc, _group in binds:
        slots.hold(pod.uid, share, index.get(pod.uid))
    return slots
