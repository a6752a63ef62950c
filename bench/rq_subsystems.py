"""Fluxion's and fluxnode's resource-query side by side under several subsystems (``-S C+PA``...).

    .venv/bin/python bench/rq_subsystems.py [--seeds 0-199] [--fluxion PATH] [--show 5]

Each seed draws one case: flux-sched's ``power.graphml`` (the shared corpus's copy) or
the tests' small ``power2.graphml``, a ``-S`` selection (``C+PA`` most often, ``CA``
and ``PA`` now and then), every match policy in turn across the seeds, a prune filter
(none, ``ALL:core``, ``ALL:node``, both, or one anchored at a rack or a pdu), a writer,
``-e`` now and then, and a stream of 2 to 8 commands: matches of every verb of random
jobspecs (slots of cores, sockets, GPUs, memory or nodes, exclusive nodes, racks; and
the power jobspecs of the tests and of flux-sched; now and then with a hostlist
constraint), cancels, nodes set down or up, and ``find``. Both
programs run on the same files; a case passes when their stdout (without the timing
lines of ``-e``), stderr, exit code and ``-t`` output are equal byte for byte. The
oracle is Fluxion's binary (v0.54, built from source beside the project), never
fluxnode's. Fixed seeds: the same command draws the same cases.

It prints one line per differing case (its seed, options and the first differing
line) and the count that passed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "scheduler" / "data" / "subsystems"
SHARED = HERE.parent.parent / "shared" / "fluxion-corpus" / "data" / "resource"
FLUXION = Path("/work/flux-build/install/bin/resource-query")
POLICIES = ["first", "high", "low", "lonode", "hinode", "lonodex", "hinodex", "locality",
            "variation", "firstnodex"]
PRUNES = [None, "ALL:core", "ALL:node", "ALL:core,ALL:node", "rack:node", "pdu:node",
          "ALL:socket"]
FORMATS = ["simple", "simple", "pretty_simple", "jgf", "rv1_nosched"]
VERBS = ["allocate"] * 5 + ["allocate_orelse_reserve"] * 2 + [
    "satisfiability", "allocate_with_satisfiability", "without_allocating"]
POWER2_JOBSPECS = ["node_core.yaml", "node_power.yaml", "slot_power.yaml",
                   "sibling_power.yaml", "slot_core.yaml", "xnode_slot_core.yaml"]
FLUX_POWER_JOBSPECS = ["jobspecs/power/test001.yaml", "jobspecs/power/test002.yaml",
                       "jobspecs/update/test005.yaml", "jobspecs/update/test006.yaml"]
TIMING = ("Time", "ELAPSE")


@dataclass
class Case:
    seed: int
    graph: Path
    args: list[str]
    commands: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # jobspec name -> text


def _jobspec(rng: random.Random, big: bool) -> str:
    """A random containment jobspec that fits the power graph's shape (racks of nodes
    of 2 sockets of cores, a GPU and memory; power2's nodes hold cores alone)."""
    k = rng.choice([1, 1, 2, 3, 18] if big else [1, 1, 2])
    x = rng.choice(["", "", "        exclusive: true\n"])
    slot = rng.choice([1, 1, 2, 3])
    if not big:
        shape = rng.choice(["core", "node_core", "xnode", "node"])
    else:
        shape = rng.choice(["core", "socket", "node_core", "xnode", "gpu", "memory", "rack",
                            "node", "socket_core"])
    inner = {
        "core": f"      - type: core\n        count: {k}\n",
        "socket": "      - type: socket\n        count: 1\n",
        "gpu": f"      - type: core\n        count: {k}\n      - type: gpu\n        count: 1\n",
        "memory": "      - type: memory\n        count: 2\n",
        "node": "      - type: node\n        count: 1\n" + x,
        "socket_core": ("      - type: socket\n        count: 1\n        with:\n"
                        f"          - type: core\n            count: {k}\n"),
    }
    if shape in inner:
        res = (f"  - type: slot\n    count: {slot}\n    label: default\n    with:\n"
               + inner[shape])
    elif shape in ("node_core", "xnode"):
        xn = "    exclusive: true\n" if shape == "xnode" else ""
        res = (f"  - type: node\n    count: {rng.choice([1, 1, 2])}\n{xn}    with:\n"
               f"      - type: slot\n        count: {slot}\n        label: default\n"
               f"        with:\n          - type: core\n            count: {k}\n")
    else:  # rack
        res = ("  - type: rack\n    count: 1\n    with:\n      - type: slot\n"
               f"        count: {slot}\n        label: default\n        with:\n"
               "          - type: node\n            count: 1\n")
    constraint = ""
    if rng.random() < 0.15:  # RFC 31: nodes by name (a pdu's power walk meets them too)
        lo = rng.randint(0, 60 if big else 2)
        hosts = f"node[{lo}-{lo + rng.randint(0, 9)}]"
        constraint = f"    constraints:\n      hostlist: [\"{hosts}\"]\n"
    return ("version: 9999\nresources:\n" + res + "attributes:\n  system:\n"
            "    duration: 3600\n" + constraint + "tasks:\n  - command: [ \"app\" ]\n"
            "    slot: default\n    count:\n      per_slot: 1\n")


def draw(seed: int, shared: Path) -> Case:
    rng = random.Random(seed)
    big = rng.random() < 0.7
    graph = shared / "grugs" / "power.graphml" if big else DATA / "power2.graphml"
    subsystems = rng.choice(["C+PA"] * 6 + ["CA", "PA"])
    args = ["-S", subsystems, "-P", POLICIES[seed % len(POLICIES)],
            "-F", rng.choice(FORMATS)]
    prune = rng.choice(PRUNES)
    if prune is not None:
        args += ["-p", prune]
    if rng.random() < 0.3:
        args.append("-e")
    case = Case(seed, graph, args)
    fixed = ([str(shared / p) for p in FLUX_POWER_JOBSPECS] if big
             else [str(DATA / p) for p in POWER2_JOBSPECS])
    for i in range(rng.randint(1, 3)):
        case.files[f"js{i}.yaml"] = _jobspec(rng, big)
    pool = list(case.files) * 3 + fixed
    jobs = 0
    for _ in range(rng.randint(2, 8)):
        r = rng.random()
        if r < 0.12 and jobs:
            case.commands.append(f"cancel {rng.randint(1, jobs)}")
        elif r < 0.22:
            node = rng.randint(0, 71) if big else rng.randint(0, 3)
            rack = node // 18 if big else node // 2
            top = "power0" if big else "grid0"
            case.commands.append(f"set-status /{top}/rack{rack}/node{node} "
                                 f"{rng.choice(['down', 'down', 'up'])}")
        elif r < 0.27:
            case.commands.append(rng.choice(["find sched-now=allocated", "find status=up",
                                             "stat"]))
        else:
            case.commands.append(f"match {rng.choice(VERBS)} {rng.choice(pool)}")
            jobs += 1
    case.commands.append("quit")
    return case


def _run(argv: list[str], case: Case, folder: Path, env: dict | None) -> tuple:
    out = folder / "out.t"
    proc = subprocess.run([*argv, "-L", str(case.graph), "-d", *case.args, "-t", str(out)],
                          input="\n".join(case.commands) + "\n", capture_output=True,
                          text=True, cwd=folder, env=env, timeout=600, check=False)
    text = _untimed(out.read_text()) if out.exists() else None
    if out.exists():
        out.unlink()
    # the status as a shell reports it: Fluxion's abort() (SIGABRT) is 134, as is
    # fluxnode's exit where Fluxion aborts (command.py, FluxionAbort)
    rc = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
    return rc, _untimed(proc.stdout), proc.stderr, text


def _untimed(text: str) -> str:
    """``text`` without the lines that say how long something took (-e's)."""
    return "".join(x for x in text.splitlines(keepends=True) if not any(t in x for t in TIMING))


def first_difference(a: tuple, b: tuple) -> str:
    names = ("exit code", "stdout", "stderr", "-t output")
    for name, x, y in zip(names, a, b, strict=True):
        if x == y:
            continue
        if not isinstance(x, str) or not isinstance(y, str):
            return f"{name}: fluxion {x!r:.80} fluxnode {y!r:.80}"
        xl, yl = x.splitlines(), y.splitlines()
        for i, (p, q) in enumerate(zip(xl, yl, strict=False)):
            if p != q:
                return f"{name} line {i + 1}: fluxion {p!r:.100} / fluxnode {q!r:.100}"
        return f"{name}: {len(xl)} lines from fluxion, {len(yl)} from fluxnode"
    return ""


def seeds_of(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-199", help="seed ranges, e.g. 0-99,500")
    ap.add_argument("--fluxion", type=Path, default=FLUXION,
                    help="Fluxion's resource-query binary (its lib/ beside its bin/)")
    ap.add_argument("--shared", type=Path, default=SHARED,
                    help="flux-sched's t/data/resource (grugs/power.graphml, jobspecs/)")
    ap.add_argument("--keep", type=Path, help="keep each differing case's files here")
    ns = ap.parse_args()
    if not ns.fluxion.exists():
        print(f"no Fluxion resource-query at {ns.fluxion}", file=sys.stderr)
        return 2
    if not (ns.shared / "grugs" / "power.graphml").exists():
        print(f"no power.graphml under {ns.shared}/grugs", file=sys.stderr)
        return 2
    lib = ns.fluxion.parent.parent / "lib"
    fenv = dict(os.environ, LD_LIBRARY_PATH=f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    ours = [sys.executable, "-m", "fluxnode", "resource-query"]
    seeds = seeds_of(ns.seeds)
    passed = 0
    for seed in seeds:
        case = draw(seed, ns.shared)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for name, text in case.files.items():
                (folder / name).write_text(text)
            theirs = _run([str(ns.fluxion)], case, folder, fenv)
            mine = _run(ours, case, folder, None)
            if theirs == mine:
                passed += 1
                continue
            print(f"seed {seed}: {case.graph.name} {' '.join(case.args)}: "
                  f"{first_difference(theirs, mine)}", flush=True)
            if ns.keep is not None:
                dest = ns.keep / f"seed{seed}"
                shutil.copytree(folder, dest, dirs_exist_ok=True)
                (dest / "cmds").write_text("\n".join(case.commands) + "\n")
                (dest / "argv").write_text(" ".join(["-L", str(case.graph), "-d",
                                                     *case.args]) + "\n")
    print(f"{passed} / {len(seeds)} cases the same")
    return 0 if passed == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
