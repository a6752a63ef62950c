"""A seeded random stream of scheduler operations and broker faults, with THE checker after
every step; shared by the fault-injection test (tests/faults) and the soak (bench/soak.py).

Why a plan drawn up front: the seed alone fixes the list of planned steps (`plan`): which
operation, which shape, and fractions that pick "which allocation" or "which ranks" among
those live at run time. Outcomes cannot change the plan, so a seed replays the same stream;
what a step did concretely (ids, ranks) is in the step log printed with any violation.

What a step may be: `alloc` (varied shapes: one slot, several slots, spread over N nodes,
GPUs, memory, several slot kinds), `cancel`, `partial-cancel` (some of an allocation's ranks),
and faults: `kill -9` of rank 0 then a restart with the same statedir (`kill-leader`), the
same with a sched.alloc or sched.cancel in flight at the kill (`kill-leader-inflight`),
rank 0 left down for seconds before its restart (`kill-leader-outage`),
`kill -9` + restart of an interior broker (`kill-interior`) or of a leaf (`kill-leaf`), and
`kill-hold`: a non-leader broker killed and left down for a few steps (allocations and leader
restarts meanwhile) before its restart. After a leader restart the step's allocation is
asked for as soon as rank 0 answers, before its subtrees are back: the window in which a
partial replay would hand cores out twice. Recovery means rank 0 answers and every rank not
held down is up in sched.resource-status and answers broker.ping routed from rank 0 (a
broker the leader has not yet seen die still looks up in R). A caller adds its own kinds of
step (the binder test adds pods and binder restarts) through `extra_ops`, and checks of its
own (every pod bound in time) through `extra_checks`.

The ledger: an allocation is expected once its answer reached us ("acknowledged"), with the
nodes the answer named, minus the ranks a later acknowledged partial cancel freed. A request
whose answer the fault swallowed is "unknown" until the leader answers again; then it must be
all or nothing: the allocation (found by the label naming its step) is absent or present in
the full shape asked; a cancel took effect entirely or not at all. After each step and its
recovery the checker (`fluxnode.testing.invariants.check`) runs with the ledger as the
exhaustive expectation. The run stops at the first violation and reports the seed and the
step log to replay it.
"""

from __future__ import annotations

import errno
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxnode.agent.broker.client import ConnectError, RPCError
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.testing.instance import Instance
from fluxnode.testing.invariants import (
    JOURNAL_FILE,
    Violation,
    check,
    describe,
    gather,
    shares,
)

SEED_ENV = "FLUXNODE_FAULT_SEED"
LABEL = "fault-step"  # allocation label naming the step that asked for it

# (op, weight): what a plain run draws from
DEFAULT_WEIGHTS: dict[str, float] = {
    "alloc": 36,
    "cancel": 18,
    "partial-cancel": 10,
    "kill-leader": 8,
    "kill-leader-inflight": 8,
    "kill-leader-outage": 3,
    "kill-interior": 6,
    "kill-leaf": 6,
    "kill-hold": 4,
}
# kill-leader-inflight kills rank 0 0..INFLIGHT_WINDOW s after sending the request (the leader
# answers within about a ms), so the kill lands before, during or after it handles it (a fault's
# timing, not a wait)
INFLIGHT_WINDOW = 0.002
# kill-leader-outage keeps rank 0 down this long (seconds): past torpid_max of a fast TBON
# and past a client's RPC timeout, as when a leader's pod is rescheduled (a fault's length)
OUTAGE = (2.0, 4.0)
SHAPED = ("alloc", "kill-leader", "kill-leader-inflight", "kill-leader-outage")  # draw a shape

# Every node of a fault instance: 4 cores, memory, and a GPU on even ranks.
NODE_CORES = 4
NODE_MEMORY_MIB = 4096


def node_resources(size: int, prefix: str = "node") -> dict[str, dict]:
    """Resource overrides for an instance the schedule drives (`Instance(resources=...)`)."""
    return {f"{prefix}{r}": {"cores": NODE_CORES, "gpus": 1 if r % 2 == 0 else 0,
                             "memory_mib": NODE_MEMORY_MIB} for r in range(size)}


@dataclass(frozen=True, slots=True)
class Shape:
    """What an alloc step asks for: slot kinds and, optionally, a node count."""

    kinds: tuple[SlotKind, ...]
    nnodes: int | None = None

    def jobspec(self) -> dict:
        return build_jobspec(list(self.kinds), nnodes=self.nnodes)

    @property
    def cores(self) -> int:
        return sum(k.cores * k.count for k in self.kinds)

    @property
    def gpus(self) -> int:
        return sum(k.gpus * k.count for k in self.kinds)

    @property
    def memory_mib(self) -> int:
        return sum(k.memory_mib * k.count for k in self.kinds)

    def __str__(self) -> str:
        parts = []
        for k in self.kinds:
            what = f"{k.cores}c" + (f"+{k.gpus}g" if k.gpus else "") + (
                f"+{k.memory_mib}M" if k.memory_mib else "")
            parts.append(f"{k.count}x{what}")
        return "+".join(parts) + (f" on {self.nnodes} nodes" if self.nnodes else "")


def random_shape(rng: random.Random) -> Shape:
    kind = rng.choice(("one", "slots", "nodes", "gpu", "memory", "kinds"))
    if kind == "one":
        return Shape((SlotKind(rng.randint(1, NODE_CORES)),))
    if kind == "slots":
        return Shape((SlotKind(rng.randint(1, 2), count=rng.randint(2, 4)),))
    if kind == "nodes":
        n = rng.randint(2, 3)
        return Shape((SlotKind(1, count=n * rng.randint(1, 2)),), nnodes=n)
    if kind == "gpu":
        return Shape((SlotKind(1, gpus=1, count=rng.randint(1, 2)),))
    if kind == "memory":
        return Shape((SlotKind(1, memory_mib=rng.choice((256, 1000, 2048))),))
    return Shape((SlotKind(2), SlotKind(1, gpus=1)))


@dataclass(frozen=True, slots=True)
class Planned:
    """One planned step: the op and the random draws it will use (fractions pick among
    what is live when it runs)."""

    index: int
    op: str
    pick: float  # which allocation / which broker
    part: float  # which ranks (partial cancel), which in-flight request, how long to hold
    shape: Shape | None = None
    delay: float = 0.0  # kill-leader-inflight: seconds between the request and the kill
    outage: float = 0.0  # kill-leader-outage: seconds rank 0 stays down


def plan(seed: int, steps: int, weights: Mapping[str, float] | None = None) -> list[Planned]:
    """The seed's steps, independent of outcomes."""
    weights = dict(weights or DEFAULT_WEIGHTS)
    rng = random.Random(seed)
    ops, w = list(weights), list(weights.values())
    out = []
    for i in range(steps):
        op = rng.choices(ops, w)[0]
        pick, part, delay = rng.random(), rng.random(), rng.random() * INFLIGHT_WINDOW
        outage = rng.uniform(*OUTAGE)
        shape = random_shape(rng) if op in SHAPED else None
        out.append(Planned(i, op, pick, part, shape, delay, outage))
    return out


def choose_seed(default: int | None = None, env: str = SEED_ENV) -> int:
    """The seed from $`env` (an integer, or `random` for a fresh one), else `default`, else
    a fresh one. Tests pass a fixed default, so a run replays the schedule CI ran unless
    asked for another; the soak asks for a fresh one each round. tests/support/seeds.py
    reads its own variable through here."""
    text = (os.environ.get(env) or "").strip()
    if text and text != "random":
        try:
            return int(text, 0)
        except ValueError:
            raise ValueError(f"${env}: not an integer seed or 'random': {text!r}") from None
    if default is not None and text != "random":
        return default
    return random.SystemRandom().randrange(2**32)


@dataclass
class Report:
    seed: int
    steps: list[str] = field(default_factory=list)  # what each step did, for replay
    violations: list[Violation] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)
    allocations: int = 0  # acknowledged ALLOCATED answers
    refused: int = 0  # EBUSY / ENODEV answers
    cancels: int = 0
    partial_cancels: int = 0
    unknown: int = 0  # requests whose answer a fault swallowed
    checks: int = 0
    answer_times: list[float] = field(default_factory=list)  # restart -> leader answers
    full_times: list[float] = field(default_factory=list)  # restart -> R full again
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay_text(self) -> str:
        lines = [f"seed {self.seed} ({SEED_ENV}={self.seed} replays it); steps:"]
        lines += [f"  {s}" for s in self.steps]
        lines += [f"VIOLATION {v}" for v in self.violations]
        return "\n".join(lines)

    def summary(self) -> str:
        def stats(xs: list[float]) -> str:
            if not xs:
                return "-"
            return (f"n={len(xs)} median {statistics.median(xs):.2f}s max {max(xs):.2f}s")

        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"
        return "\n".join([
            f"seed {self.seed}: {len(self.steps)} steps in {self.elapsed:.0f}s, "
            f"{self.checks} checks",
            f"faults injected: {sum(self.faults.values())} ({faults})",
            f"allocations made: {self.allocations} (refused busy/unsatisfiable: {self.refused});"
            f" cancels: {self.cancels}; partial cancels: {self.partial_cancels};"
            f" unknown outcomes resolved: {self.unknown}",
            f"recovery, restart -> leader answers: {stats(self.answer_times)}",
            f"recovery, restart -> R full: {stats(self.full_times)}",
            f"violations: {len(self.violations)}",
        ])


class StepFailed(Exception):
    """A step found a violation; the run stops."""


@dataclass
class Unknown:
    """A request a fault cut off: after recovery it must have happened wholly or not at all."""

    op: str  # "alloc" | "cancel" | "partial-cancel"
    step: int
    shape: Shape | None = None
    alloc_id: int | None = None
    ranks: frozenset[int] = frozenset()
    before: list[dict] | None = None  # the allocation's nodes when the request was sent


def kary_parent(rank: int, k: int) -> int | None:
    return None if rank == 0 else (rank - 1) // k


class FaultRunner:
    """Drives `plan` steps against a running Instance (kary topology) and checks each."""

    def __init__(
        self,
        inst: Instance,
        seed: int,
        *,
        fanout: int = 2,
        recovery_timeout: float = 30.0,
        rpc_timeout: float = 10.0,
        core_api: Any = None,
        extra_ops: Mapping[str, Callable[[Planned], str]] | None = None,
        extra_checks: list[Callable[[], list[Violation]]] | None = None,
        exhaustive: bool = True,
        alloc_at_restart: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.inst = inst
        self.seed = seed
        self.fanout = fanout
        self.recovery_timeout = recovery_timeout
        self.rpc_timeout = rpc_timeout
        self.core_api = core_api
        self.extra_ops = dict(extra_ops or {})
        self.extra_checks = list(extra_checks or [])
        self.exhaustive = exhaustive
        self.alloc_at_restart = alloc_at_restart  # False: leave all cores to the caller's binder
        self.log = log or (lambda _line: None)
        self.expected: dict[int, list[dict]] = {}  # acknowledged id -> nodes
        self.held: dict[int, int] = {}  # rank kept down -> step index of its restart
        self.last_recovered = time.monotonic()  # when the last fault's recovery completed
        self.report = Report(seed)
        self.journal_path = inst.statedir(0) / JOURNAL_FILE
        ranks = range(1, inst.size)
        self.interior = [r for r in ranks if any(kary_parent(c, fanout) == r for c in ranks)]
        self.leaves = [r for r in ranks if r not in self.interior]

    # -- running ----------------------------------------------------------------------
    def run(self, steps: list[Planned], *, deadline: float | None = None) -> Report:
        """Run `steps` (stopping early at `deadline`, a time.monotonic() value, or at the
        first violation); the report says what happened."""
        start = time.monotonic()
        try:
            for step in steps:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self.step(step)
            self._release_held(len(steps))
            self.verify("end")
        except StepFailed:
            pass
        self.report.elapsed = time.monotonic() - start
        return self.report

    def step(self, step: Planned) -> None:
        handler = self.extra_ops.get(step.op) or getattr(self, "op_" + step.op.replace("-", "_"))
        self._release_held(step.index)
        try:
            text = handler(step)
        except StepFailed:
            self.note(f"step {step.index}: {step.op} (failed; shape {step.shape}, "
                      f"pick {step.pick:.3f}, part {step.part:.3f})")
            raise
        self.note(f"step {step.index}: {text}")
        self.verify(f"step {step.index}")

    def note(self, text: str) -> None:
        self.report.steps.append(text)
        self.log(text)

    def fail(self, violations: list[Violation]) -> None:
        self.report.violations += violations
        for v in violations:
            self.log(f"VIOLATION {v}")
        raise StepFailed(str(violations[0]))

    def verify(self, where: str) -> None:
        """THE checker, with the ledger as exhaustive expectation."""
        try:
            snap = gather(self.rpc, self.journal_path, core_api=self.core_api)
        except (RPCError, ConnectError, OSError) as exc:
            self.fail([Violation("no-answer", f"{where}: the leader did not answer the "
                                 f"checker: {exc}")])
        self.report.checks += 1
        found = check(snap, self.expected if self.exhaustive else None,
                      exhaustive=self.exhaustive)
        for extra in self.extra_checks:
            found += extra()
        if found:
            self.fail([Violation(v.kind, f"after {where}: {v.detail}") for v in found])

    # -- talking to the leader ----------------------------------------------------------
    def rpc(self, topic: str, payload: dict | None = None, timeout: float | None = None) -> dict:
        return self.inst.rpc(topic, payload or {}, timeout=timeout or self.rpc_timeout)

    def _answer(self, topic: str, payload: dict) -> tuple[dict | None, RPCError | None]:
        try:
            return self.rpc(topic, payload), None
        except RPCError as exc:
            if exc.errnum in (errno.ETIMEDOUT, errno.ECONNRESET):
                self.fail([Violation("no-answer", f"{topic} {payload}: {exc}")])
            return None, exc
        except ConnectError as exc:
            self.fail([Violation("no-answer", f"{topic}: {exc}")])
            raise  # fail() raised already

    def alloc_payload(self, step: Planned) -> dict:
        assert step.shape is not None
        return {"jobspec": step.shape.jobspec(),
                "labels": {LABEL: f"{self.seed}/{step.index}"}}

    def _pick(self, fraction: float, min_ranks: int = 1) -> int | None:
        ids = sorted(i for i, nodes in self.expected.items() if len(nodes) >= min_ranks)
        return ids[int(fraction * len(ids))] if ids else None

    @staticmethod
    def _split(nodes: list[dict], fraction: float) -> frozenset[int]:
        """A non-empty strict subset of the allocation's ranks."""
        ranks = sorted(n["rank"] for n in nodes)
        k = 1 + int(fraction * (len(ranks) - 1))
        return frozenset(ranks[:k]) if k < len(ranks) else frozenset(ranks[:1])

    # -- operations ---------------------------------------------------------------------
    def op_alloc(self, step: Planned) -> str:
        answer, err = self._answer("sched.alloc", self.alloc_payload(step))
        if err is not None:
            if err.errnum not in (errno.EBUSY, errno.ENODEV):
                self.fail([Violation("refused", f"alloc {step.shape}: {err.errnum} {err}")])
            self.report.refused += 1
            return f"alloc {step.shape} -> {errno.errorcode.get(err.errnum)}"
        assert answer is not None
        if answer["status"] != "ALLOCATED":
            self.fail([Violation("refused", f"alloc {step.shape}: status {answer['status']}")])
        self._check_shape(step.shape, answer["nodes"], f"alloc {answer['id']}")
        self.expected[answer["id"]] = answer["nodes"]
        self.report.allocations += 1
        return f"alloc {step.shape} -> {answer['id']} ({describe(shares(answer['nodes']))})"

    def _check_shape(self, shape: Shape | None, nodes: list[dict], what: str) -> None:
        """An allocation holds exactly what was asked (cores, GPUs, nodes; memory at least)."""
        assert shape is not None
        got = shares(nodes)
        cores = sum(len(s.cores) for s in got)
        gpus = sum(len(s.gpus) for s in got)
        memory = sum(s.memory_mib for s in got)
        problems = []
        if cores != shape.cores:
            problems.append(f"{cores} cores, not {shape.cores}")
        if gpus != shape.gpus:
            problems.append(f"{gpus} GPUs, not {shape.gpus}")
        if memory < shape.memory_mib:
            problems.append(f"{memory} MiB < {shape.memory_mib}")
        if shape.nnodes is not None and len(got) != shape.nnodes:
            problems.append(f"{len(got)} nodes, not {shape.nnodes}")
        if problems:
            self.fail([Violation("half", f"{what} asked {shape}, holds {describe(got)}: "
                                 + "; ".join(problems))])

    def op_cancel(self, step: Planned) -> str:
        alloc_id = self._pick(step.pick)
        if alloc_id is None:
            return "cancel: nothing to cancel"
        answer, err = self._answer("sched.cancel", {"id": alloc_id})
        if err is not None:
            self.fail([Violation("lost", f"cancel {alloc_id} (acknowledged): {err}")])
        del self.expected[alloc_id]
        self.report.cancels += 1
        return f"cancel {alloc_id} -> freed {answer['freed']}"

    def op_partial_cancel(self, step: Planned) -> str:
        alloc_id = self._pick(step.pick, min_ranks=2)
        if alloc_id is None:
            return "partial-cancel: no allocation on two ranks"
        ranks = self._split(self.expected[alloc_id], step.part)
        text = ",".join(map(str, sorted(ranks)))
        answer, err = self._answer("sched.cancel", {"id": alloc_id, "ranks": text})
        if err is not None:
            self.fail([Violation("lost", f"partial cancel {alloc_id} ranks {text}: {err}")])
        self.expected[alloc_id] = [n for n in self.expected[alloc_id] if n["rank"] not in ranks]
        self.report.partial_cancels += 1
        return f"partial-cancel {alloc_id} ranks {text} -> remaining {answer['remaining']}"

    # -- faults -------------------------------------------------------------------------
    def expected_up(self) -> set[int]:
        """Ranks that should be up: all but those held down and their subtrees."""
        up = set()
        for r in range(self.inst.size):
            a: int | None = r
            while a is not None and a not in self.held:
                a = kary_parent(a, self.fanout)
            if a is None:
                up.add(r)
        return up

    def wait_recovered(self, since: float, what: str) -> tuple[float, float]:
        """Wait until the leader answers and every rank expected up is up in
        sched.resource-status; (seconds to the first answer, seconds to R full)."""
        want = self.expected_up()
        answered: float | None = None
        deadline = since + self.recovery_timeout
        last = "no answer"
        while True:
            try:
                nodes = self.rpc("sched.resource-status", timeout=2.0)["nodes"]
                if answered is None:
                    answered = time.monotonic() - since
                up = {n["rank"] for n in nodes if n["status"] == "up"}
                unreachable = self.unreachable(want)
                if want <= up and not unreachable:
                    self.last_recovered = time.monotonic()
                    return answered, self.last_recovered - since
                last = (f"ranks {sorted(want - up)} not up in sched.resource-status"
                        if not want <= up else
                        f"ranks {unreachable} do not answer broker.ping through rank 0")
            except (RPCError, ConnectError, OSError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                found = [Violation(
                    "no-recovery",
                    f"{what}: the leader did not recover within {self.recovery_timeout:g}s "
                    f"({last})",
                )]
                try:  # and what the leader hands out meanwhile
                    snap = gather(self.rpc, self.journal_path, core_api=self.core_api)
                    found += check(snap, self.expected if self.exhaustive else None,
                                   exhaustive=self.exhaustive)
                except (RPCError, ConnectError, OSError):
                    pass
                self.fail(found)
            time.sleep(0.05)

    def unreachable(self, ranks: set[int], timeout: float = 1.0) -> list[int]:
        """Those of `ranks` that do not answer broker.ping routed from rank 0 (a broker the
        leader has not yet seen die still counts as up in R, so R alone proves nothing)."""
        with self.inst.client(timeout=timeout) as client:
            tags = {r: client.send("broker.ping", {}, nodeid=r) for r in sorted(ranks)}
            missing = []
            for r, tag in tags.items():
                try:
                    if client.recv(tag, timeout=timeout).errnum:
                        missing.append(r)
                except RPCError:
                    missing.append(r)
        return missing

    def _kill_restart(self, rank: int, kind: str) -> str:
        self.report.faults[kind] += 1
        self.inst.kill(rank)
        restarted = time.monotonic()
        self.inst.restart(rank)
        answer, full = self.wait_recovered(restarted, f"kill -9 rank {rank}")
        if rank == 0:
            self.report.answer_times.append(answer)
        self.report.full_times.append(full)
        return f"kill -9 rank {rank}, restart: answers after {answer:.2f}s, full after {full:.2f}s"

    def op_kill_leader(self, step: Planned) -> str:
        return self._leader_fault(step, "kill-leader", 0.0)

    def _leader_fault(self, step: Planned, kind: str, outage: float) -> str:
        """kill -9 rank 0, restart it after `outage` s, and ask for the step's allocation as
        soon as it answers: a client does not wait for R to be full, and the window between
        the leader answering and its subtrees rejoining is where a replay that is partial
        hands out cores twice."""
        self.report.faults[kind] += 1
        self.inst.kill(0)
        if outage:
            time.sleep(outage)  # the fault's planned length, not a wait for a condition
        restarted = time.monotonic()
        self.inst.restart(0)
        early = self._alloc_when_answering(step, restarted)
        answer, full = self.wait_recovered(restarted, f"kill -9 rank 0 ({kind})")
        self.report.answer_times.append(answer)
        self.report.full_times.append(full)
        down = f", down {outage:.1f}s" if outage else ""
        return (f"kill -9 rank 0{down}, restart: answers after {answer:.2f}s, full after "
                f"{full:.2f}s; at once {early}")

    def _alloc_when_answering(self, step: Planned, since: float) -> str:
        """sched.alloc the step's shape until the restarted leader answers it. An attempt cut
        off after it was sent is looked up by its label before any retry (never two)."""
        if step.shape is None or not self.alloc_at_restart:
            return "nothing asked"
        label = {LABEL: f"{self.seed}/{step.index}"}
        sent = False
        while time.monotonic() - since < self.recovery_timeout:
            try:
                if sent:
                    mine = self.rpc("sched.list", {"labels": label}, timeout=2.0)["allocations"]
                    if mine:
                        return self._adopt_unknown(step.shape, mine)
                sent = False
                with self.inst.client(timeout=2.0) as client:
                    sent = True
                    answer = client.rpc("sched.alloc", self.alloc_payload(step))
            except ConnectError:
                sent = False
            except RPCError as exc:
                if exc.errnum in (errno.EBUSY, errno.ENODEV):
                    self.report.refused += 1
                    return f"alloc {step.shape} -> {errno.errorcode[exc.errnum]}"
                if exc.errnum not in (errno.ECONNRESET, errno.ETIMEDOUT, errno.ENOSYS,
                                      errno.EHOSTUNREACH, errno.EAGAIN):
                    self.fail([Violation("refused", f"alloc {step.shape} after the restart: "
                                         f"{exc.errnum} {exc}")])
            else:
                self._check_shape(step.shape, answer["nodes"], f"alloc {answer['id']}")
                self.expected[answer["id"]] = answer["nodes"]
                self.report.allocations += 1
                return (f"alloc {step.shape} -> {answer['id']} "
                        f"({describe(shares(answer['nodes']))})")
            time.sleep(0.02)
        self.fail([Violation("no-recovery", f"alloc {step.shape}: no answer "
                             f"{self.recovery_timeout:g}s after the restart of rank 0")])
        return ""

    def _adopt_unknown(self, shape: Shape | None, mine: list[dict]) -> str:
        if len(mine) > 1:
            self.fail([Violation("half", f"one alloc request made {len(mine)} allocations: "
                                 + ", ".join(str(a["id"]) for a in mine))])
        [alloc] = mine
        self._check_shape(shape, alloc["nodes"], f"alloc {alloc['id']}")
        self.expected[alloc["id"]] = alloc["nodes"]
        self.report.allocations += 1
        self.report.unknown += 1
        return f"alloc {shape} -> {alloc['id']} (answer lost, made whole)"

    def op_kill_leader_outage(self, step: Planned) -> str:
        """kill -9 rank 0 and leave it down for the planned outage before the restart."""
        return self._leader_fault(step, "kill-leader-outage", step.outage)

    def op_kill_interior(self, step: Planned) -> str:
        ranks = [r for r in self.interior if r not in self.held] or [0]
        return self._kill_restart(ranks[int(step.pick * len(ranks))], "kill-interior")

    def op_kill_leaf(self, step: Planned) -> str:
        ranks = [r for r in self.leaves if r not in self.held] or [0]
        return self._kill_restart(ranks[int(step.pick * len(ranks))], "kill-leaf")

    def op_kill_hold(self, step: Planned) -> str:
        """Kill a non-leader broker and leave it down for 1-3 steps (at most one held)."""
        if self.held:
            return "kill-hold: a broker is already held down"
        ranks = list(range(1, self.inst.size))
        rank = ranks[int(step.pick * len(ranks))]
        self.report.faults["kill-hold"] += 1
        self.inst.kill(rank)
        self.held[rank] = step.index + 1 + int(step.part * 3)
        return f"kill -9 rank {rank}, held down until step {self.held[rank]}"

    def _release_held(self, index: int) -> None:
        for rank, until in sorted(self.held.items()):
            if index >= until:
                del self.held[rank]
                restarted = time.monotonic()
                self.inst.restart(rank)
                _, full = self.wait_recovered(restarted, f"restart of held rank {rank}")
                self.report.full_times.append(full)
                self.note(f"restart held rank {rank}: full after {full:.2f}s")
                self.verify(f"restart of rank {rank}")

    def op_kill_leader_inflight(self, step: Planned) -> str:
        """kill -9 rank 0 with a request in flight; after recovery it happened wholly or not."""
        self.report.faults["kill-leader-inflight"] += 1
        which = ("alloc", "cancel", "partial-cancel")[int(step.part * 3)]
        unknown = Unknown("alloc", step.index, shape=step.shape)
        payload = self.alloc_payload(step)
        topic = "sched.alloc"
        if which != "alloc":
            alloc_id = self._pick(step.pick, min_ranks=2 if which == "partial-cancel" else 1)
            if alloc_id is not None:
                before = self.expected[alloc_id]
                ranks = self._split(before, step.part) if which == "partial-cancel" else (
                    frozenset(n["rank"] for n in before))
                unknown = Unknown(which, step.index, alloc_id=alloc_id, ranks=ranks,
                                  before=before)
                topic, payload = "sched.cancel", {"id": alloc_id}
                if which == "partial-cancel":
                    payload["ranks"] = ",".join(map(str, sorted(ranks)))
        with self.inst.client(timeout=self.rpc_timeout) as client:
            tag = client.send(topic, payload)
            time.sleep(step.delay)
            self.inst.kill(0)
            restarted = time.monotonic()
            try:
                msg = client.recv(tag, timeout=0.2)
            except RPCError:
                msg = None
        self.inst.restart(0)
        answer, full = self.wait_recovered(restarted, "kill -9 rank 0 with a request in flight")
        self.report.answer_times.append(answer)
        self.report.full_times.append(full)
        what = (f"{unknown.op} {unknown.alloc_id if unknown.alloc_id is not None else step.shape}"
                + (f" ranks {sorted(unknown.ranks)}" if unknown.op == "partial-cancel" else ""))
        if msg is not None and not msg.errnum:
            outcome = f"answered before the kill: {self._acknowledged(unknown, msg)}"
        elif msg is not None and msg.errnum in (errno.EBUSY, errno.ENODEV):
            outcome = "refused before the kill"
            self.report.refused += 1
        else:
            outcome = self._resolve(unknown)
        return (f"kill -9 rank 0 with {what} in flight, restart: {outcome}; answers after "
                f"{answer:.2f}s, full after {full:.2f}s")

    def _acknowledged(self, unknown: Unknown, msg: Any) -> str:
        body = msg.decode_payload() or {}
        if unknown.op == "alloc":
            self._check_shape(unknown.shape, body["nodes"], f"alloc {body['id']}")
            self.expected[body["id"]] = body["nodes"]
            self.report.allocations += 1
            return f"allocation {body['id']}"
        assert unknown.alloc_id is not None and unknown.before is not None
        if unknown.op == "cancel":
            del self.expected[unknown.alloc_id]
            self.report.cancels += 1
        else:
            self.expected[unknown.alloc_id] = [
                n for n in unknown.before if n["rank"] not in unknown.ranks]
            self.report.partial_cancels += 1
        return f"{unknown.op} done"

    def _resolve(self, unknown: Unknown) -> str:
        """After recovery: did the cut-off request happen wholly, or not at all?"""
        self.report.unknown += 1
        listed = self.rpc("sched.list", {})["allocations"]
        if unknown.op == "alloc":
            mine = [a for a in listed
                    if (a.get("labels") or {}).get(LABEL) == f"{self.seed}/{unknown.step}"]
            if not mine:
                return "unknown alloc: not made"
            self.report.unknown -= 1  # _adopt_unknown counts it
            return "unknown " + self._adopt_unknown(unknown.shape, mine)
        assert unknown.alloc_id is not None and unknown.before is not None
        now = next((a for a in listed if a["id"] == unknown.alloc_id), None)
        before = shares(unknown.before)
        after = tuple(s for s in before if s.rank not in unknown.ranks)
        if now is None:
            if unknown.op == "cancel":
                del self.expected[unknown.alloc_id]
                self.report.cancels += 1
                return f"unknown cancel of {unknown.alloc_id}: done"
            self.fail([Violation("half", f"partial cancel of {unknown.alloc_id} ranks "
                                 f"{sorted(unknown.ranks)} (answer lost) removed it whole")])
        got = shares(now["nodes"])
        if got == before:
            return f"unknown {unknown.op} of {unknown.alloc_id}: not done"
        if unknown.op == "partial-cancel" and got == after:
            self.expected[unknown.alloc_id] = [
                n for n in unknown.before if n["rank"] not in unknown.ranks]
            self.report.partial_cancels += 1
            return f"unknown partial cancel of {unknown.alloc_id}: done"
        self.fail([Violation("half", f"{unknown.op} of {unknown.alloc_id} (answer lost): it held"
                             f" {describe(before)}, now {describe(got)}")])
        return ""  # fail() raised

