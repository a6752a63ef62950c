"""Benchmark: `fluxnode ping` round trips to a rank 4 levels down, side by side with `flux ping`.

    .venv/bin/python bench/ping.py [--count 1000] [--rounds 3] [--pad 0] [--interval 0.01]
                                   [--flux PATH]

Each round starts `fluxnode start --test-size 16 --topo kary:2` and, inside it, runs
`fluxnode ping -c COUNT -i 0.01 15`: rank 15 is 4 TBON hops below rank 0 (0 -> 1 -> 3 -> 7 ->
15, CURVE on every hop), the command's client on rank 0's local socket. With `--flux PATH`
(a flux-core install's `bin/flux`, e.g. /path/to/flux-core/bin/flux) each round also
runs `flux start --test-size=16 -Stbon.topo=kary:2 flux ping -c COUNT -i 0.01 15`, the same
tree and the same command, alternating with ours so both see the same load. Not `-i 0`:
`flux ping` sends on a timer whether or not the last answer came (flux-ping.c), so with no
interval it floods and times a queue (80 ms at depth 4 here); `fluxnode ping` waits for
each answer, then the interval. 10 ms is above either's round trip. Both print
`time=X ms` per answer; the first `--warmup` answers of each round are dropped and the
figure is the median over rounds of each round's median (and p99), with the ratio ours /
Flux's, and the ratio of each round (ours / Flux's, run back to back) with their median.
CPU per ping, which depends less on the load: the utime+stime the instance's brokers
spent during the ping command, divided by the pings (read from /proc by this script run
inside the instance, `--inner`: the brokers are the other children of `fluxnode start`,
and the flux-broker-* children of `flux start`). The brokers run without the scheduler
module (`broker.modules=`): a ping never reaches it, and without it both instances hold
the same services on the path. Timing depends on the load of the machine: it is printed
with the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

TIME = re.compile(r"time=([0-9.]+) ms")
CPU = re.compile(r"broker CPU per ping: ([0-9.]+) us")
TICK = os.sysconf("SC_CLK_TCK")
SIZE, TOPO, RANK = 16, "kary:2", 15


def _stat(pid: int) -> tuple[int, str, int]:
    """(parent pid, command name, utime+stime in ticks) of `pid`."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), text[text.index("(") + 1:text.rindex(")")], int(rest[11]) + int(rest[12])


def _brokers(start: int, flux: bool) -> list[int]:
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            try:
                ppid, comm, _ = _stat(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
            if ppid == start and (comm.startswith("flux-broker") or not flux):
                out.append(int(entry.name))
    return out


def inner(flux: bool, count: int, cmd: list[str]) -> None:
    """Inside the instance: run the ping command, then print the brokers' CPU per ping."""
    start = _stat(os.getppid())[0] if flux else os.getppid()  # flux start -> broker 0 -> us
    brokers = _brokers(start, flux)

    def cpu() -> int:
        return sum(_stat(p)[2] for p in brokers)

    before = cpu()
    subprocess.run(cmd, check=True)
    used = (cpu() - before) / TICK
    print(f"broker CPU per ping: {used / count * 1e6:.1f} us ({len(brokers)} brokers)",
          flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    """`cmd`'s output; RuntimeError with the end of its stderr if it fails (also used by
    bench/ping_instructions.py)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} {cmd[1]} exited with {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return done.stdout


def times_of(output: str, warmup: int) -> list[float]:
    """The round trips a ping command printed, less the first `warmup`."""
    found = [float(m.group(1)) for m in TIME.finditer(output)]
    return found[warmup:]


def ours(count: int, pad: int, interval: float) -> str:
    fluxnode = [sys.executable, "-m", "fluxnode"]
    cmd = [*fluxnode, "start", "--test-size", str(SIZE), "--topo", TOPO, "-q",
           "-S", "broker.modules=", "--",
           sys.executable, __file__, "--inner", "fluxnode", "--count", str(count), "--",
           *fluxnode, "ping", "-c", str(count), "-i", str(interval), "-p", str(pad),
           str(RANK)]
    return run(cmd)


def flux_env(flux: str) -> dict[str, str]:
    """This environment with the libraries of the flux-core install whose bin/flux is `flux`."""
    env = dict(os.environ)
    lib = Path(flux).resolve().parent.parent / "lib"
    env["LD_LIBRARY_PATH"] = f"{lib}:{env['LD_LIBRARY_PATH']}" if env.get(
        "LD_LIBRARY_PATH") else str(lib)
    return env


def theirs(flux: str, count: int, pad: int, interval: float) -> str:
    env = flux_env(flux)
    cmd = [flux, "start", f"--test-size={SIZE}", f"-Stbon.topo={TOPO}",
           sys.executable, __file__, "--inner", "flux", "--count", str(count), "--",
           flux, "ping", "-c", str(count), "-i", str(interval), "-p", str(pad), str(RANK)]
    return run(cmd, env)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def summary(name: str, rounds: list[list[float]]) -> float:
    medians = [statistics.median(r) for r in rounds]
    med = statistics.median(medians)
    print(f"{name}: median {med:.3f} ms (rounds {', '.join(f'{m:.3f}' for m in medians)}), "
          f"p99 {statistics.median(p99(r) for r in rounds):.3f} ms, "
          f"{sum(len(r) for r in rounds)} pings", flush=True)
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="pings per round (1000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, alternating (3)")
    ap.add_argument("--pad", type=int, default=0, help="payload pad in bytes (0)")
    ap.add_argument("--interval", type=float, default=0.01,
                    help="seconds between pings (0.01; see above)")
    ap.add_argument("--warmup", type=int, default=20, help="answers dropped per round (20)")
    ap.add_argument("--flux", metavar="PATH", help="flux-core's bin/flux: Flux's side too")
    ap.add_argument("--inner", choices=("fluxnode", "flux"), help=argparse.SUPPRESS)
    ap.add_argument("cmd", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.inner == "flux", args.count, args.cmd)
        return
    mine: list[list[float]] = []
    flux: list[list[float]] = []
    cpu_mine: list[float] = []
    cpu_flux: list[float] = []
    load = []
    for _ in range(args.rounds):
        load.append(os.getloadavg()[0])
        out = ours(args.count + args.warmup, args.pad, args.interval)
        mine.append(times_of(out, args.warmup))
        cpu_mine.extend(float(m.group(1)) for m in CPU.finditer(out))
        if args.flux:
            out = theirs(args.flux, args.count + args.warmup, args.pad, args.interval)
            flux.append(times_of(out, args.warmup))
            cpu_flux.extend(float(m.group(1)) for m in CPU.finditer(out))
    print(f"ping rank {RANK} of {SIZE} ({TOPO}, 4 hops down), pad {args.pad}, "
          f"{args.count} pings x {args.rounds} rounds", flush=True)
    m = summary("fluxnode ping", mine)
    print(f"  brokers' CPU per ping: {statistics.median(cpu_mine):.0f} us (rounds "
          f"{', '.join(f'{c:.0f}' for c in cpu_mine)})")
    if args.flux:
        f = summary("flux ping", flux)
        print(f"  brokers' CPU per ping: {statistics.median(cpu_flux):.0f} us (rounds "
              f"{', '.join(f'{c:.0f}' for c in cpu_flux)})")
        ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(mine, flux,
                                                                              strict=True)]
        print(f"ratio fluxnode / flux: latency {m / f:.2f} (per round "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f})"
              f", brokers' CPU {statistics.median(cpu_mine) / statistics.median(cpu_flux):.2f}")
    print(f"(load average at each round: {', '.join(f'{x:.1f}' for x in load)}; "
          f"cpus: {os.cpu_count()})")


if __name__ == "__main__":
    main()
