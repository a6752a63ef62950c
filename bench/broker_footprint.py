"""A broker's memory: a worker started alone, as on a node, and the brokers of a forked
`fluxnode start --test-size N` instance (issue 32).

    .venv/bin/python bench/broker_footprint.py [--runs 3] [--size 16] [--python PY]
                                               [--flux PATH]

Lone worker: `python -m fluxnode broker` as rank 1 (a leaf) of a three-host config whose
other brokers do not run (fluxnode.testing.lone_broker), measured once it answers a ping:
VmRSS and Pss from /proc, and how many modules it imported (`-X importtime`, a separate
run). Instance: every broker's Pss (smaps_rollup: pages shared copy-on-write with the
launcher and the other brokers are divided among them) summed and divided by N, and the
mean RSS, and apart rank 0's Pss and the other brokers' mean; rank 0 loads the scheduler
module as `fluxnode start` does by default.
Medians over --runs. `--python` runs the brokers with another checkout's interpreter
(`../main/.venv/bin/python`: the figures before a change). First the bench compiles the
fluxnode modules that interpreter imports to bytecode (`compileall`, as pip does when it
installs the wheel on a node), unless `--no-compile`: where PYTHONDONTWRITEBYTECODE is
set, as in CI, a broker would otherwise compile every module of its own at start, 1.8
MiB more of a lone worker's RSS that no node pays. `--flux PATH` (a flux-core
install's bin/flux, e.g. /path/to/flux-core/bin/flux) measures Flux's brokers the
same way (bench/flux_side.py: a lone `flux broker` as rank 1 of three, the brokers of
`flux start --test-size=N -Stbon.topo=kary:2`) and prints the ratios. Memory figures do
not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from flux_side import flux_instance, lone_flux_worker

from fluxnode.testing.lone_broker import lone_worker
from fluxnode.testing.waiting import wait_for

KiB = 1024


def memory(pid: int) -> dict[str, int]:
    """Rss and Pss of `pid` in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Rss", "Pss"):
            out[key] = int(value.split()[0])
    return out


def compile_modules(python: str) -> None:
    """Bytecode for the fluxnode packages `python` imports, written beside their sources
    (a checkout's `__pycache__`, ignored by git), as an installed wheel has it."""
    where = subprocess.run(
        [python, "-c", "import sys, fluxnode, fluxnode.agent, fluxnode.broker_conf, "
         "fluxnode.scheduler; print(*(p for m in (fluxnode, fluxnode.agent, "
         "fluxnode.broker_conf, fluxnode.scheduler) for p in m.__path__), sep='\\n')"],
        capture_output=True, text=True, check=True).stdout.split()
    subprocess.run([python, "-m", "compileall", "-q", *where], check=True,
                   stdout=subprocess.DEVNULL)


def lone(root: Path, python: str) -> dict[str, int]:
    with lone_worker(root, python=python) as (proc, _uri):
        return memory(proc.pid)


def lone_modules(root: Path, python: str) -> int:
    root.mkdir(parents=True)
    report = root / "importtime.txt"
    with open(report, "wb") as f, lone_worker(root, ("-X", "importtime"), stderr=f,
                                              python=python):
        pass
    return sum(1 for line in report.read_text().splitlines() if line.startswith("import time:")
               and line.count("|") == 2) - 1  # the header line


def instance(root: Path, size: int, python: str) -> tuple[float, float, float, float]:
    """(mean Pss, mean Rss, rank 0's Pss, the other brokers' mean Pss) of the brokers of
    `fluxnode start --test-size SIZE`, in KiB, measured while its command waits on its
    stdin. (Rank 0 holds the scheduler module; the others are workers.)"""
    rundir, ready = root / "instance", root / "ready"
    wait = f"import pathlib, sys; pathlib.Path({str(ready)!r}).touch(); sys.stdin.read()"
    proc = subprocess.Popen([python, "-m", "fluxnode", "start", "--test-size", str(size),
                             "--rundir", str(rundir), "--quiet", "--", python, "-c", wait],
                            stdin=subprocess.PIPE)
    try:
        wait_for(ready.exists, 300, what=f"{size} brokers to reach quorum", interval=0.05)
        info = json.loads((rundir / "instance.json").read_text())
        figures = [memory(b["pid"]) for b in info["brokers"]]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=120)
    workers = figures[1:] or figures
    return (sum(f["Pss"] for f in figures) / len(figures),
            sum(f["Rss"] for f in figures) / len(figures),
            figures[0]["Pss"], sum(f["Pss"] for f in workers) / len(workers))


def flux_figures(root: Path, flux: str, runs: int, size: int) -> tuple[float, float, float]:
    """Flux's (lone worker RSS, PSS per broker, RSS per broker) in MiB, medians of `runs`."""
    lones, inst = [], []
    for i in range(runs):
        with lone_flux_worker(root / f"flux-lone{i}", flux) as pid:
            lones.append(memory(pid)["Rss"])
        figures = flux_instance(root / f"flux-inst{i}", size, flux, memory)
        inst.append((sum(f["Pss"] for f in figures) / len(figures),
                     sum(f["Rss"] for f in figures) / len(figures)))
    return (statistics.median(lones) / KiB, statistics.median(p for p, _ in inst) / KiB,
            statistics.median(r for _, r in inst) / KiB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure (default 3)")
    parser.add_argument("--size", type=int, default=16, help="brokers in the instance (16)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the brokers run with (default: this one)")
    parser.add_argument("--flux", metavar="PATH", help="flux-core's bin/flux: Flux's side too")
    parser.add_argument("--no-compile", action="store_true",
                        help="measure without compiling the modules to bytecode first")
    opts = parser.parse_args()
    if not opts.no_compile:
        compile_modules(opts.python)
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        root = Path(tmp)
        lones = [lone(root / f"lone{i}", opts.python) for i in range(opts.runs)]
        modules = lone_modules(root / "modules", opts.python)
        inst = [instance(root / f"inst{i}", opts.size, opts.python) for i in range(opts.runs)]
        flux = flux_figures(root, opts.flux, opts.runs, opts.size) if opts.flux else None
    rss = statistics.median(f["Rss"] for f in lones) / KiB
    pss = statistics.median(f["Pss"] for f in lones) / KiB
    inst_pss = statistics.median(i[0] for i in inst) / KiB
    inst_rss = statistics.median(i[1] for i in inst) / KiB
    leader_pss = statistics.median(i[2] for i in inst) / KiB
    worker_pss = statistics.median(i[3] for i in inst) / KiB
    print(f"lone worker broker: RSS {rss:.1f} MiB, PSS {pss:.1f} MiB, {modules} modules "
          f"imported (median of {opts.runs})")
    print(f"{opts.size}-broker instance: PSS per broker {inst_pss:.1f} MiB (rank 0 "
          f"{leader_pss:.1f}, the others {worker_pss:.2f} each), RSS per broker "
          f"{inst_rss:.1f} MiB (median of {opts.runs}); load average {os.getloadavg()[0]:.1f}")
    if flux:
        print(f"flux-core: lone worker RSS {flux[0]:.1f} MiB (ratio {rss / flux[0]:.2f}); "
              f"{opts.size} brokers: PSS per broker {flux[1]:.1f} MiB (ratio "
              f"{inst_pss / flux[1]:.2f}), RSS per broker {flux[2]:.1f} MiB (ratio "
              f"{inst_rss / flux[2]:.2f})")


if __name__ == "__main__":
    main()
