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
../main/.venv/bin/python). The client, `fluxnode ping` itself, is counted in a second
instance: the instructions of `ping -c 20+COUNT` less those of `ping -c 20`, run under
callgrind, divided by COUNT (its start-up cancels out). `--flux PATH` (flux-core's
bin/flux) counts Flux the same way: `flux start --test-size=3 -Stbon.topo=kary:1` with
every broker under callgrind (`--wrap`), counters zeroed after 3 pings and dumped after
COUNT, and `flux ping` as ours. Needs valgrind; a run takes 1-3 minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ping import flux_env, run  # bench/ping.py, beside this file

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


CLIENT = ('c() {{ valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=/dev/null '
          '{ping} -c "$1" -i 0.01 2 2>&1 >/dev/null | sed -n "s/.*Collected : //p" | tail -1; }}; '
          'echo "client: $(c 20) $(c {total})"')


def client(python: str, count: int) -> int:
    """Instructions of `fluxnode ping` per ping to rank 2 of 3 (kary:1)."""
    inner = CLIENT.format(ping=f"{python} -m fluxnode ping", total=20 + count)
    out = run([python, "-m", "fluxnode", "start", "--test-size", "3", "--topo",
                       "kary:1", "-S", "broker.modules=", "--", "sh", "-c", inner])
    return _client_difference(out, count)


def _client_difference(out: str, count: int) -> int:
    found = re.search(r"client: (\d+) (\d+)", out)
    if found is None:
        raise SystemExit(f"ping_instructions: no client counts in {out!r}")
    return (int(found.group(2)) - int(found.group(1))) // count


def flux(flux_cmd: str, count: int) -> tuple[list[int], int]:
    """Flux's brokers (ranks 0-2) and `flux ping`, counted as ours."""
    env = flux_env(flux_cmd)
    with tempfile.TemporaryDirectory(prefix="ping-instr-flux-") as out:
        # the brokers are the children of `flux start`, the parent of rank 0 (this shell's
        # parent, which runs it as the initial program)
        each = 'for p in $B; do callgrind_control {} "$p" >/dev/null || :; done'
        inner = ('B=$(pgrep -P "$(ps -o ppid= "$PPID" | tr -d " ")"); '
                 f"{flux_cmd} ping -c 3 -i 0.01 2 >/dev/null && {each.format('-z')} && "
                 f"{flux_cmd} ping -c {count} -i 0.01 2 >/dev/null && {each.format('-d')}")
        run([flux_cmd, "start", "--test-size=3", "-Stbon.topo=kary:1",
                     f"--wrap=valgrind,--tool=callgrind,--callgrind-out-file={out}/cg.%p",
                     "sh", "-c", inner], env)
        dumps = sorted(Path(out).glob("cg.*.1"), key=lambda p: int(p.name.split(".")[1]))
        counts = [int(SUMMARY.search(d.read_text(errors="replace")).group(1)) for d in dumps]
    if len(counts) != 3:
        raise SystemExit(f"ping_instructions: expected Flux's ranks 0-2, got {len(counts)}")
    inner = CLIENT.format(ping=f"{flux_cmd} ping", total=20 + count)
    out = run([flux_cmd, "start", "--test-size=3", "-Stbon.topo=kary:1", "sh", "-c",
                       inner], env)
    return [n // count for n in counts], _client_difference(out, count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200, help="pings counted (200)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose fluxnode is measured (this one)")
    ap.add_argument("--flux", metavar="PATH", help="flux-core's bin/flux: Flux's counts too")
    args = ap.parse_args()
    if args.count < 1:
        ap.error("--count must be at least 1")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"ping_instructions: {tool} is not on PATH (install valgrind)")
    counts = [n // args.count for n in measure(args.python, args.count)]
    mine = client(args.python, args.count)
    print(f"instructions per ping to rank 2 of 3 (kary:1), {args.count} pings at 10 ms, "
          f"{args.python}")
    theirs = flux(args.flux, args.count) if args.flux else None
    for i, what in enumerate(("rank 0 (the client's connector, the first hop)",
                              "rank 1 (forwards both ways)", "rank 2 (answers)", "client")):
        n = counts[i] if i < 3 else mine
        line = f"  {what}: {n:,}"
        if theirs is not None:
            m = theirs[0][i] if i < 3 else theirs[1]
            line += f"; flux-core {m:,} (ratio {n / m:.2f})"
        print(line)
    depth4 = counts[0] + 3 * counts[1] + counts[2] + mine
    print(f"  a ping at depth 4 (rank 0, three forwarders, the leaf, the client): {depth4:,}"
          + (f"; flux-core {sum(theirs[0]) + 2 * theirs[0][1] + theirs[1]:,} (ratio "
             f"{depth4 / (sum(theirs[0]) + 2 * theirs[0][1] + theirs[1]):.2f})"
             if theirs is not None else ""))


if __name__ == "__main__":
    main()
