"""Instructions per match, counted by valgrind's callgrind: a figure machine load does not move.

    .venv/bin/python bench/sched_instructions.py [--nodes 500] [--matches 400]
        [--policies high,low,locality,lonode,lonodex,first] [--shape core1|node1x]
    .venv/bin/python bench/sched_instructions.py --shape gang --gang 500 --nodes 1000 \
        --matches 1 --policies first

sched_throughput.py times matches on 5,000 nodes, but on a shared 2-core machine a
second process moves its figures by 20% or more. This bench runs the same fast-mode
stream (a fresh graph, 50 warm-up matches, then ``--matches`` single-core or whole-node
matches) under ``valgrind --tool=callgrind`` twice per policy, once without the measured
matches, and prints the difference divided by ``--matches``: the instructions one match
costs, the same on every run of the same code. A change to the matcher is judged by
this figure first and by sched_throughput.py's rate second.

``--shape gang`` counts gangs instead: ``node[--gang]`` of one socket's core each, on a
fresh graph, no warm-up (the first gang on a fresh graph is the one a broker meets, and
the one side by side with Fluxion in sched_rq_stream.py).

In fast mode a single-core match re-walks one node and merges in a heap, so its cost
hardly depends on the node count; 500 nodes keep each valgrind run under a minute.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fluxnode.scheduler.jobspec.request import from_jobspec
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from sched_common import gang_nodes, single_core, whole_node, write_grug

SHAPES = {"core1": single_core, "node1x": whole_node, "gang": gang_nodes}
WARMUP = 50


def _warmup(shape: str) -> int:
    return 0 if shape == "gang" else WARMUP


def stream(graph: Path, policy: str, shape: str, matches: int, gang: int) -> None:
    """The measured child: build, warm up, then ``matches`` more matches."""
    t = FastTraverser(read_grug(graph), Policy.parse(policy, stable_ties=True))
    one = from_jobspec(SHAPES[shape](gang) if shape == "gang" else SHAPES[shape]())
    for _ in range(_warmup(shape) + matches):
        t.match(one)


def instructions(graph: Path, policy: str, shape: str, matches: int, gang: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, "--child", "--graph", str(graph), "--policies", policy, "--shape", shape,
         "--matches", str(matches), "--gang", str(gang)],
        capture_output=True, text=True, check=True)
    got = re.search(r"Collected : (\d+)", out.stderr)
    if got is None:
        raise SystemExit(f"no instruction count from valgrind:\n{out.stderr[-2000:]}")
    return int(got.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--matches", type=int, default=400)
    ap.add_argument("--policies", default="high,low,locality,lonode,lonodex,first")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="core1")
    ap.add_argument("--gang", type=int, default=500, help="nodes per gang (--shape gang)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        stream(args.graph, args.policies, args.shape, args.matches, args.gang)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    per = args.gang if args.shape == "gang" else 1  # nodes a match takes (at most)
    if args.nodes < (_warmup(args.shape) + args.matches) * per:
        raise SystemExit(f"--nodes must be at least ({_warmup(args.shape)} + --matches)"
                         f" x {per}")
    with tempfile.TemporaryDirectory() as d:
        graph = write_grug(Path(d) / "g.graphml", args.nodes)
        print(f"graph: {args.nodes} nodes x (2 sockets x 32 cores + 4 GPUs), fast mode, "
              f"{args.shape} stream, {args.matches} matches after {_warmup(args.shape)}")
        for policy in args.policies.split(","):
            base = instructions(graph, policy, args.shape, 0, args.gang)
            full = instructions(graph, policy, args.shape, args.matches, args.gang)
            print(f"  {policy:10s} {(full - base) / args.matches:12,.0f} instructions/match",
                  flush=True)


if __name__ == "__main__":
    main()
