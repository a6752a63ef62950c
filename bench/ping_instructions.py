"""Benchmark: instructions each broker executes per ping, counted by callgrind (load-independent).

    .venv/bin/python bench/ping_instructions.py [--count 200] [--python PATH]

Latency and CPU time on a shared 2-core machine swing with the load more than a cut to the
message path moves them (issue 32, ping parity with Flux); the number of instructions a
broker executes per message does not. This runs `fluxnode start --test-size 3 --topo
kary:1` under `valgrind --tool=callgrind --trace-children=yes` (the forked brokers are
followed), pings rank 2 a few times to warm up, zeroes the brokers' counters
(`callgrind_control -z PID`), runs `fluxnode ping -c COUNT -i 0.01 2` (rank 1 forwards the
request down and the answer up; rank 2 answers; rank 0 holds the client's connector and
makes the first hop) and dumps their counters (`callgrind_control -d PID`). The figure is each
broker's instructions (both its threads: the Python main thread and libzmq's I/O thread,
CURVE included) divided by COUNT. The brokers are forked in rank order, so their process
ids sort as their ranks. `--python` measures another checkout's interpreter (e.g.
../main/.venv/bin/python). Needs valgrind; a run takes 2-3 minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SUMMARY = re.compile(r"^summary: (\d+)$", re.MULTILINE)


def measure(python: str, count: int) -> list[int]:
    """Instructions of ranks 0, 1 and 2 during `count` pings to rank 2."""
    fluxnode = f"{python} -m fluxnode"
    # only the brokers, the children of `fluxnode start` ($PPID of this shell), are zeroed
    # and dumped: not another user's or session's callgrind runs
    each = 'for p in $(pgrep -P "$PPID"); do callgrind_control {} "$p" >/dev/null || :; done'
    inner = (f"{fluxnode} ping -c 3 -i 0.01 2 >/dev/null && {each.format('-z')} && "
             f"{fluxnode} ping -c {count} -i 0.01 2 >/dev/null && {each.format('-d')}")
    with tempfile.TemporaryDirectory(prefix="ping-instr-") as out:
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
               "--trace-children-skip=/bin/*,/usr/bin/*,*/sh,*perl*",
               f"--callgrind-out-file={out}/cg.%p",
               python, "-m", "fluxnode", "start", "--test-size", "3", "--topo", "kary:1",
               "-S", "broker.modules=", "--", "sh", "-c", inner]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=out)
        if done.returncode != 0:
            raise SystemExit(f"ping_instructions: the run exited with {done.returncode}:\n"
                             f"{done.stderr[-2000:]}")
        # the dumps callgrind_control -d made, the brokers' by pid (their rank order)
        dumps = sorted(Path(out).glob("cg.*.1"), key=lambda p: int(p.name.split(".")[1]))
        counts = []
        for dump in dumps:
            found = SUMMARY.search(dump.read_text(errors="replace"))
            if found is None:
                raise SystemExit(f"ping_instructions: {dump.name} has no summary line")
            counts.append(int(found.group(1)))
    if len(counts) != 3:
        raise SystemExit(f"ping_instructions: expected the dumps of ranks 0-2, got {len(counts)}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200, help="pings counted (200)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose fluxnode is measured (this one)")
    args = ap.parse_args()
    if args.count < 1:
        ap.error("--count must be at least 1")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"ping_instructions: {tool} is not on PATH (install valgrind)")
    counts = measure(args.python, args.count)
    print(f"instructions per ping to rank 2 of 3 (kary:1), {args.count} pings at 10 ms, "
          f"{args.python}")
    for rank, what, n in zip((0, 1, 2), ("the client's connector, the first hop",
                                         "forwards both ways", "answers"), counts, strict=True):
        print(f"  rank {rank} ({what}): {n / args.count:,.0f}")


if __name__ == "__main__":
    main()
