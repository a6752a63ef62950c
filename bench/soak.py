"""Soak: the fault-injection schedule and THE checker for as long as asked; 0 violations or exit 1.

    .venv/bin/python bench/soak.py --minutes 30 [--seed N] [--size 8] [--topo kary:2]

Starts an instance (`Instance(size)`, fast TBON: torpid_min 0.2s, torpid_max 1.5s, 4 cores,
4 GiB and on even ranks a GPU per node) and runs the seeded schedule of
fluxnode.testing.fault_schedule: alloc / cancel / partial cancel interleaved with kill -9 +
restart of rank 0 (also with a request in flight), of an interior broker and of a leaf, and
a broker held down for a few steps; the checker (fluxnode.testing.invariants) runs after every
step. The schedule is drawn in rounds of --steps; each round gets the next seed (seed, seed+1,
...) and a fresh instance, so a replay needs only the round's seed (printed). Prints faults
injected by kind, allocations made, cancels, violations and recovery times (restart to the
leader answering, restart to R full); on a violation, the seed and step log to replay it
($FLUXNODE_FAULT_SEED=<seed> with the test, or --seed <seed> --rounds 1 here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter

from fluxnode.testing.fault_schedule import FaultRunner, Report, choose_seed, node_resources, plan
from fluxnode.testing.instance import Instance
from fluxnode.testing.invariants import Violation
from fluxnode.testing.waiting import wait_for

FAST_TBON = {"torpid_min": "0.2s", "torpid_max": "1.5s"}


def run_round(seed: int, args: argparse.Namespace, deadline: float) -> Report:
    report = Report(seed)
    try:
        report = _round(seed, args, deadline)
    except AssertionError as exc:  # Instance's teardown: a broker that did not stop cleanly
        report.violations.append(Violation("unclean-shutdown", str(exc)))
    return report


def _round(seed: int, args: argparse.Namespace, deadline: float) -> Report:
    with Instance(args.size, topo=args.topo, modules=None, resources=node_resources(args.size),
                  tbon=FAST_TBON) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == args.size, 60,
                 what=f"all {args.size} ranks in the scheduler graph")
        fanout = int(args.topo.split(":")[1]) if args.topo.startswith("kary:") else 2
        runner = FaultRunner(inst, seed, fanout=fanout, recovery_timeout=args.recovery_timeout,
                             log=print if args.verbose else None)
        return runner.run(plan(seed, args.steps), deadline=deadline)


def stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return f"n={len(xs)}  median {statistics.median(xs):.2f}s  p99 {p99:.2f}s  max {xs[-1]:.2f}s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to soak (default 30)")
    ap.add_argument("--seed", type=int, help="first round's seed (default: $FLUXNODE_FAULT_SEED "
                    "or random)")
    ap.add_argument("--steps", type=int, default=300, help="steps per round (default 300)")
    ap.add_argument("--rounds", type=int, default=0, help="stop after this many rounds (0: none)")
    ap.add_argument("--size", type=int, default=8, help="brokers (default 8)")
    ap.add_argument("--topo", default="kary:2", help="TBON topology (default kary:2)")
    ap.add_argument("--recovery-timeout", type=float, default=30.0,
                    help="seconds a restart may take before it counts as a violation")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every step")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else choose_seed()
    start = time.monotonic()
    deadline = start + args.minutes * 60
    faults: Counter = Counter()
    total = Report(seed)
    rounds = 0
    print(f"soak: {args.minutes:g} min, {args.size} brokers {args.topo}, first seed {seed}",
          flush=True)
    while time.monotonic() < deadline and (not args.rounds or rounds < args.rounds):
        round_seed = seed + rounds
        report = run_round(round_seed, args, deadline)
        rounds += 1
        faults.update(report.faults)
        for name in ("allocations", "refused", "cancels", "partial_cancels", "unknown", "checks"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
        total.steps += report.steps
        total.answer_times += report.answer_times
        total.full_times += report.full_times
        print(f"round {rounds} (seed {round_seed}): {len(report.steps)} steps, "
              f"{sum(report.faults.values())} faults, {report.allocations} allocations, "
              f"{len(report.violations)} violations  [{time.monotonic() - start:.0f}s]",
              flush=True)
        if not report.ok:
            total.violations += report.violations
            print(report.replay_text(), flush=True)
            break
    elapsed = time.monotonic() - start
    print()
    print(f"soak: {elapsed / 60:.1f} min, {rounds} rounds, {len(total.steps)} steps, "
          f"{total.checks} checks")
    print(f"faults injected: {sum(faults.values())}  "
          + "  ".join(f"{k} {n}" for k, n in sorted(faults.items())))
    print(f"allocations made: {total.allocations}  (refused busy/unsatisfiable: "
          f"{total.refused})")
    print(f"cancels: {total.cancels}  partial cancels: {total.partial_cancels}  "
          f"cut-off requests resolved all-or-nothing: {total.unknown}")
    print(f"recovery, restart of rank 0 -> leader answers:  {stats(total.answer_times)}")
    print(f"recovery, restart of any broker -> R full:      {stats(total.full_times)}")
    print(f"violations: {len(total.violations)}")
    sys.exit(1 if total.violations else 0)


if __name__ == "__main__":
    main()
