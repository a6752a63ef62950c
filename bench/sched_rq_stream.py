"""Time `resource-query` on a generated GRUG graph and a stream of match commands.

    .venv/bin/python bench/sched_rq_stream.py [--nodes 200] [--jobs 500] [--policy first]
        [--shape mixed|core1|node1x|gang1000] [--cancel-every 3] [--op allocate_orelse_reserve]
        [--cmd 'fluxnode resource-query'] [--keep DIR] [--instructions]

Writes the graph, the jobspec shapes and a command file (``--op`` for each job, the
shapes in turn with ``mixed``, cancelling every ``--cancel-every``-th job, 0 for never),
then runs the command with the same arguments
Fluxion's resource-query takes; run it again with --cmd /path/to/resource-query to
compare with Fluxion side by side (the -t outputs are compared when both ran, their
ELAPSE lines aside).

Both run with -e, so each prints its graph load time and every match's ELAPSE (jobspec
parse, walk and writer, as Fluxion's reapi_cli_t::match_allocate times them): the
figures are the matches' own, apart from process start and graph load.
`fluxnode resource-query` runs exact mode (Fluxion's tie order); the service's fast mode
is timed by sched_throughput.py.

``--instructions`` runs fluxnode's resource-query in process under valgrind's callgrind
instead, counting only the commands (each one run inside ``functools.reduce``, which
callgrind's ``--toggle-collect`` switches on and off), so graph load, process start and
the reading of stdin stay out: a load-independent figure per match (cancels included),
for deciding what a change buys on a shared machine.
"""

from __future__ import annotations

import argparse
import functools
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from sched_common import gang_nodes, jobspec, single_core, whole_node, write_grug

SHAPES = {
    "core1": [
        {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 1}]}
    ],
    "core8gpu1": [
        {
            "type": "slot",
            "count": 1,
            "label": "task",
            "with": [{"type": "core", "count": 8}, {"type": "gpu", "count": 1}],
        }
    ],
    "node2": [
        {
            "type": "node",
            "count": 2,
            "with": [
                {
                    "type": "slot",
                    "count": 1,
                    "label": "task",
                    "with": [
                        {"type": "socket", "count": 2, "with": [{"type": "core", "count": 32}]}
                    ],
                }
            ],
        }
    ],
}


# the issue-14 figures: single cores, whole nodes, one 1,000-node gang
SINGLE = {
    "core1": single_core()["resources"],
    "node1x": whole_node()["resources"],
    "gang1000": gang_nodes(1000)["resources"],
}


ELAPSE = re.compile(r"^INFO: ELAPSE=(\S+)$", re.M)


def _untimed(path: Path) -> str:
    return ELAPSE.sub("INFO: ELAPSE=", path.read_text())


def _children_cpu() -> float:
    """CPU seconds of the finished child processes (steadier than wall time on a shared
    machine)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _child(argv: list[str]) -> None:
    """resource-query in this process, each command inside functools.reduce (see
    --instructions)."""
    from fluxnode.scheduler.resource_query import command, session

    dispatch = session.Session.dispatch

    def counted(self, line: str) -> bool:
        return functools.reduce(lambda _a, _b: dispatch(self, line), (0,), None)

    session.Session.dispatch = counted
    sys.exit(command.run(argv, sys.stdin, sys.stdout, sys.stderr))


def _instructions(argv: list[str], stdin: Path) -> int:
    with open(stdin) as commands:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             "--collect-atstart=no", "--toggle-collect=functools_reduce", sys.executable,
             __file__, "--child", *argv], stdin=commands, capture_output=True, text=True)
    got = re.search(r"Collected : (\d+)", proc.stderr)
    if got is None:
        raise SystemExit(f"no instruction count from valgrind:\n{proc.stderr[-2000:]}")
    return int(got.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return _child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--policy", default="first")
    ap.add_argument("--shape", choices=["mixed", *SINGLE], default="mixed")
    ap.add_argument("--cancel-every", type=int, default=3, help="cancel every Nth job (0: never)")
    ap.add_argument("--op", default="allocate_orelse_reserve",
                    choices=["allocate", "allocate_orelse_reserve"])
    ap.add_argument("--cmd", default=f"{sys.executable} -m fluxnode resource-query")
    ap.add_argument("--keep", type=Path, help="write the inputs/outputs here instead of a temp dir")
    ap.add_argument("--instructions", action="store_true",
                    help="count fluxnode's instructions per match under callgrind instead")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="rq-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    graph = write_grug(work / "graph.graphml", args.nodes)
    shapes = SHAPES if args.shape == "mixed" else {args.shape: SINGLE[args.shape]}
    names = sorted(shapes)
    for name in names:
        (work / f"{name}.yaml").write_text(yaml.safe_dump(jobspec(shapes[name], duration=3600)))
    lines = []
    every = args.cancel_every
    for i in range(args.jobs):
        lines.append(f"match {args.op} {work / names[i % len(names)]}.yaml")
        if every and i % every == every - 1:
            lines.append(f"cancel {i}")
    lines.append("quit")
    (work / "cmds.in").write_text("\n".join(lines) + "\n")
    out = work / f"out.{Path(shlex.split(args.cmd)[0]).name}.R"
    options = ["-L", str(graph), "-S", "CA", "-P", args.policy, "-d", "-e", "-t", str(out)]
    if args.instructions:
        n = _instructions(options, work / "cmds.in")
        print(f"fluxnode resource-query: {args.jobs} matches on {args.nodes} nodes "
              f"({args.policy}, {args.shape}): {n:,} instructions in the commands, "
              f"{n / args.jobs:,.0f} per match (cancels included)")
        if not args.keep:
            shutil.rmtree(work)
        return
    argv = [*shlex.split(args.cmd), *options]
    t0 = time.perf_counter()
    cpu0 = _children_cpu()
    with open(work / "cmds.in") as stdin:
        proc = subprocess.run(argv, stdin=stdin, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    cpu = _children_cpu() - cpu0
    print(f"{' '.join(argv[:2])}: {args.jobs} matches on {args.nodes} nodes ({args.policy}) "
          f"in {elapsed:.2f} s = {elapsed / args.jobs * 1e3:.2f} ms/match, CPU {cpu:.2f} s "
          f"(whole process, graph load included; exit {proc.returncode})")
    load = re.search(r"INFO: Graph Load Time: (\S+)", proc.stdout)
    # a failed match's ELAPSE goes to the -t file, every other to standard output
    took = [float(x) for x in ELAPSE.findall(proc.stdout + out.read_text())]
    if load and took:
        print(f"  graph load {float(load.group(1)):.3f} s; {len(took)} matches: total "
              f"{sum(took):.3f} s, median {statistics.median(took) * 1e3:.3f} ms, "
              f"max {max(took) * 1e3:.1f} ms, {len(took) / sum(took):.0f}/s")
    others = [p for p in work.glob("out.*.R") if p != out]
    for other in others:
        same = _untimed(out) == _untimed(other)
        print(f"  -t output {'identical to' if same else 'DIFFERS from'} {other.name}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
