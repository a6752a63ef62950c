"""Matcher throughput: single-core allocations per policy, churn, and gangs.

    .venv/bin/python bench/sched_throughput.py [--nodes 5000] [--policies low,high,lonode,first]
        [--budget 20] [--mode fast|exact] [--shape core1|node1x] [--gang-runs 5]

--mode fast (the default, as the service): the exhaustive policies' fast mode (same scores,
ties to the lowest vertex id, a root index kept across matches: traversers/dfu_fast.py);
--mode exact: Fluxion's tie order (as `fluxnode resource-query`), every match re-scored.
--shape node1x streams whole-node exclusive matches instead of single cores.

For each policy, on a fresh graph (2 sockets x 32 cores + 4 GPUs per node):
  first  the first match alone (it walks the whole graph; fast mode builds its index)
  fill   single-core (or whole-node) allocations until the graph is full or --budget
         seconds pass
  churn  cancel one job / allocate one core, for --budget/2 seconds
  gangs  one 1,000-slot gang (1 node each) and one 4,000 x 8-core gang, each the first
         match on a freshly built graph in a fresh process (as a broker meets one: it builds
         its graph once, at start), --gang-runs times (median, min, max)
Prints allocations/s plus median and p99 time per match.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fluxnode.scheduler.jobspec.request import from_jobspec
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu import NoMatch
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from sched_common import gang_cores, gang_nodes, single_core, whole_node, write_grug

SHAPES = {"core1": single_core, "node1x": whole_node}


def traverser(path: Path, policy: str, mode: str) -> FastTraverser:
    return FastTraverser(read_grug(path), Policy.parse(policy, stable_ties=mode == "fast"))


def stats(samples: list[float], cpu: float) -> str:
    """Matches per second of wall time and of this process's CPU time (``cpu``: seconds
    of CPU the phase took, matches and bookkeeping; on a shared machine the steadier)."""
    if not samples:
        return "no samples"
    s = sorted(samples)
    p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
    return (
        f"{len(s):6d} matches  {len(s) / sum(s):8.1f}/s  (CPU {len(s) / max(cpu, 1e-9):8.1f}/s)"
        f"  median {statistics.median(s) * 1e3:8.2f} ms  p99 {p99 * 1e3:8.2f} ms"
    )


def run_policy(path: Path, policy: str, budget: float, gang_runs: int, mode: str,
               shape: str) -> None:
    t = traverser(path, policy, mode)
    one = from_jobspec(SHAPES[shape]())
    # the first match walks the whole graph (and, fast, builds the index the next ones
    # keep): timed alone, outside the budget
    t0 = time.perf_counter()
    t.match(one)
    print(f"  {policy:8s} first match {(time.perf_counter() - t0) * 1e3:8.1f} ms")
    fill: list[float] = []
    cpu0 = time.process_time()
    start = time.perf_counter()
    while time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        try:
            t.match(one)
        except NoMatch:
            break
        fill.append(time.perf_counter() - t0)
    print(f"  {policy:8s} fill   {stats(fill, time.process_time() - cpu0)}")
    churn: list[float] = []
    jobs = list(t.jobs)
    cpu0 = time.process_time()
    start = time.perf_counter()
    while jobs and time.perf_counter() - start < budget / 2:
        t.cancel(jobs.pop(0))
        t0 = time.perf_counter()
        res = t.match(one)
        churn.append(time.perf_counter() - t0)
        jobs.append(res.jobid)
    print(f"  {policy:8s} churn  {stats(churn, time.process_time() - cpu0)}")
    del t, jobs
    for label in GANGS:
        took: list[float] = []
        cpu: list[float] = []
        for _ in range(gang_runs):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one-gang",
                    label,
                    "--policies",
                    policy,
                    "--graph",
                    str(path),
                    "--mode",
                    mode,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            ms = out.stdout.split()
            if len(ms) != 2 or not ms[0].replace(".", "", 1).isdigit():
                print(f"  {policy:8s} {label}: {out.stdout.strip()}")
                break
            took.append(float(ms[0]))
            cpu.append(float(ms[1]))
        if took:
            print(f"  {policy:8s} {label}: median {statistics.median(took):.1f} ms, "
                  f"min {min(took):.1f}, max {max(took):.1f} (CPU median "
                  f"{statistics.median(cpu):.1f}, min {min(cpu):.1f}; {len(took)} runs)")


GANGS = {
    "1000x1-node gang": lambda: gang_nodes(1000),
    "4000x8-core gang": lambda: gang_cores(4000, 8),
}


def one_gang(path: Path, policy: str, label: str, mode: str) -> None:
    """Build the graph and time the gang as its first match, in this (fresh) process: how
    a broker meets a gang (it builds its graph once, at start). Prints milliseconds."""
    g = traverser(path, policy, mode)
    req = from_jobspec(GANGS[label]())
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        g.match(req)
    except NoMatch as exc:
        print(f"no match ({exc})")
        return
    print(f"{(time.perf_counter() - t0) * 1e3:.1f} {(time.process_time() - c0) * 1e3:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--policies", default="low,high,lonode,first")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per fill phase")
    ap.add_argument(
        "--gang-runs", type=int, default=5, help="fresh graphs per gang (median, min, max)"
    )
    ap.add_argument("--mode", choices=("fast", "exact"), default="fast")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="core1")
    ap.add_argument("--one-gang", choices=sorted(GANGS), help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_gang:
        one_gang(args.graph, args.policies, args.one_gang, args.mode)
        return
    with tempfile.TemporaryDirectory() as d:
        path = write_grug(Path(d) / "g.graphml", args.nodes)
        print(f"graph: {args.nodes} nodes x (2 sockets x 32 cores + 4 GPUs), {args.mode} mode, "
              f"{args.shape} stream")
        for policy in args.policies.split(","):
            run_policy(path, policy, args.budget, args.gang_runs, args.mode, args.shape)


if __name__ == "__main__":
    main()
