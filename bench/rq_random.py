"""Random resource-query cases with Fluxion's own answers: cases nobody wrote, made fresh.

``../shared/fluxion-random`` is one draw of 2,014 such cases (seeds 1000-3299); other
draws are checked too. This script makes new ones from other seeds, by the distribution
that corpus's README describes (small GRUG graphs with or without racks, GPUs and memory
pools and either id scope; one to four RFC 14 jobspecs in ten shapes, with count ranges,
explicit exclusivity and now and then no ``attributes``; every first-match and
exhaustive policy and writer, prune filters; scripts of matches, cancels, finds, status
changes, ``info``, ``list`` and ``multi-match``). Fluxion's ``resource-query`` (built
beside the project, never committed) writes each expected output, and
``run_conformance.py`` then runs fluxnode against them:

    .venv/bin/python bench/rq_random.py --fluxion /path/to/resource-query \\
        --seeds 5000-6999 --out /tmp/rq-random
    cd /tmp/rq-random && PATH=$PWD/.venv/bin:$PATH python3 \\
        ../shared/fluxion-corpus/run_conformance.py --manifest cases.jsonl --root . \\
        --cmd 'fluxnode resource-query'

As in that corpus, a case is dropped when Fluxion exits non-zero, writes no ``-t``
file, or answers differently on a second run (or runs 20 s: it loops on some graphs
after ``attach`` and ``remove``); ``-e`` and ``stat`` are never used (their
output holds times). A case whose ``rlite`` writer fails is dropped too (Fluxion's rlite
writer fails on nearly every GRUG graph).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import yaml
from rq_readers import (
    Loaded,
    copy_hwloc,
    copy_power,
    partial_cancel_r,
    write_attach,
    write_bad_json,
    write_jgf,
    write_rv1,
    write_update_jgf,
)
from rq_variants import fluxion_run
from sched_common import KEYS

PLACEHOLDER = "@TEST_SRCDIR@"
POLICIES = ["first", "first", "low", "high", "lonode", "hinode", "lonodex", "hinodex",
            "firstnodex"]
WRITERS = ["simple", "simple", "jgf", "rv1_nosched", "rlite", "pretty_simple", "rv1"]
PRUNES = ["ALL:core", "ALL:core,ALL:node", "ALL:core,ALL:gpu,ALL:memory", "ALL:node",
          "cluster:node,rack:core"]
DURATIONS = [1, 10, 60, 100, 3600, 7200, 57600]
# --wide (issue 35): what users type beyond the first distribution; drawn only then, so
# the seeds of ../shared/fluxion-random still make the cases they made
WIDE_POLICIES = POLICIES + ["locality", "variation"]
WIDE_WRITERS = WRITERS + ["jgf_shorthand", "rv1_shorthand"]
WIDE_VERBS = ["allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
              "satisfiability", "without_allocating", "without_allocating_future"]
WIDE_DURATIONS = DURATIONS + [None, None, 0.5, 3153599999, 3153600000, 4000000000]
WIDE_FINDS = ["agfilter=t", "agfilter=false", "status=up or sched-now=free and agfilter=t",
              "status=bogus", "names=node0", "property=fast", "jobid-tag=1",
              "jobid-span=1 agfilter=t", "(status=up or status=down) and sched-now=free"]
WIDE_OPTIONS = [["--traverser-policy=simple"], ["-g", "graphml", "-o", "g"],
                ["--match-subsystems=ca"], [], [], ["-T", "flexible"],
                ["--traverser-policy=flexible"], ["--match-policy=low"],
                ["--match-format=jgf"], ["--prune-filters=ALL:core"]]
# --wide: how the graph is loaded (rq_readers.py), GRUG as often as all the others
READERS = ["grug", "grug", "grug", "grug", "jgf", "rv1exec", "rv1exec", "hwloc", "power"]



class Graph:
    """One random GRUG graph and what the jobspecs and commands may ask of it."""

    def __init__(self, rng: random.Random) -> None:
        self.base = rng.choice(["cluster", "tiny", "c"])
        self.racks = 0 if rng.random() < 0.4 else rng.choice([1, 2, 3])
        self.per_rack = rng.randint(1, 4)
        self.sockets = rng.randint(1, 2)
        self.cores = rng.choice([1, 2, 3, 4, 4, 6, 8])
        self.gpus = 0 if rng.random() < 0.5 else rng.randint(1, 2)
        self.memory = 0 if rng.random() < 0.5 else rng.randint(1, 2)
        self.memory_gb = rng.choice([1, 2, 4, 16])
        self.node_scope = rng.randint(0, 1)
        self.core_scope = rng.randint(0, 1)
        self.nodes = self.per_rack * max(self.racks, 1)
        self.has_sockets = True  # an RV1 graph has none: jobspecs then never name one

    def node_paths(self) -> list[str]:
        if self.racks:
            out = []  # id_scope 0: node ids per rack; 1: global
            for r in range(self.racks):
                for i in range(self.per_rack):
                    n = i if self.node_scope == 0 else r * self.per_rack + i
                    out.append(f"/{self.base}0/rack{r}/node{n}")
            return out
        return [f"/{self.base}0/node{i}" for i in range(self.per_rack)]

    def graphml(self) -> str:
        nodes = ['<node id="cluster"><data key="root">1</data><data key="type">cluster</data>'
                 f'<data key="basename">{self.base}</data></node>']
        kinds = (["rack"] if self.racks else []) + ["node", "socket", "core"]
        kinds += ["gpu"] if self.gpus else []
        for k in kinds:
            nodes.append(f'<node id="{k}"><data key="type">{k}</data>'
                         f'<data key="basename">{k}</data></node>')
        if self.memory:
            nodes.append('<node id="memory"><data key="type">memory</data><data key="basename">'
                         f'memory</data><data key="size">{self.memory_gb}</data>'
                         '<data key="unit">GB</data></node>')
        edges = []

        def edge(src: str, dst: str, n: int, scope: int = 0) -> None:
            sc = f'<data key="id_scope">{scope}</data>' if scope else ""
            edges.append(f'<edge id="{src}2{dst}" source="{src}" target="{dst}">{sc}'
                         f'<data key="multi_scale">{n}</data></edge>')

        if self.racks:
            edge("cluster", "rack", self.racks)
            edge("rack", "node", self.per_rack, self.node_scope)
        else:
            edge("cluster", "node", self.per_rack, self.node_scope)
        edge("node", "socket", self.sockets)
        edge("socket", "core", self.cores, self.core_scope)
        if self.gpus:
            edge("socket", "gpu", self.gpus, self.core_scope)
        if self.memory:
            edge("socket", "memory", self.memory, self.core_scope)
        body = "\n        ".join(nodes + edges)
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n' + KEYS
                + '    <graph id="g" edgedefault="directed">\n        ' + body
                + "\n    </graph>\n</graphml>\n")


def count(rng: random.Random, lo: int, hi: int) -> int | dict:
    """A fixed count (70%), a range with an operator (20%), or a minimum only (10%)."""
    x = rng.random()
    n = rng.randint(lo, hi)
    if x < 0.7:
        return n
    if x < 0.9:
        op = rng.choice(["+", "*", "^"])
        operand = rng.randint(1, 3) if op == "+" else 2
        return {"min": n, "max": n + rng.randint(0, 4), "operator": op, "operand": operand}
    return {"min": n}


def resource(rng: random.Random, type_: str, lo: int, hi: int, with_=None) -> dict:
    r: dict = {"type": type_, "count": count(rng, lo, hi)}
    if rng.random() < 0.15:
        r["exclusive"] = rng.random() < 0.5
    if with_:
        r["with"] = with_
    return r


def leaves(rng: random.Random, g: Graph) -> list[dict]:
    out = [resource(rng, "core", 1, max(1, min(g.cores, 6)))]
    if g.gpus and rng.random() < 0.4:
        out.append(resource(rng, "gpu", 1, 2))
    if g.memory and rng.random() < 0.3:
        out.append(resource(rng, "memory", 1, max(1, g.memory_gb * g.memory // 2)))
    if len(out) > 1 and rng.random() < 0.3:
        rng.shuffle(out)
    return out


def slot(rng: random.Random, with_: list[dict], lo: int = 1, hi: int = 3) -> dict:
    return {"type": "slot", "count": count(rng, lo, hi), "label": "default", "with": with_}


def jobspec(rng: random.Random, g: Graph, drop_attributes: bool, wide: bool = False) -> dict:
    shape = rng.randrange(10)
    if shape == 5 and not g.racks:
        shape = 9
    if not g.has_sockets and shape in (2, 3, 4, 6):
        shape = {2: 1, 3: 7, 4: 8, 6: 0}[shape]
    if shape == 0:
        res = [slot(rng, leaves(rng, g))]
    elif shape == 1:
        res = [resource(rng, "node", 1, 3, [slot(rng, leaves(rng, g))])]
    elif shape == 2:
        res = [resource(rng, "node", 1, 2, [resource(rng, "socket", 1, 2,
                                                     [slot(rng, leaves(rng, g))])])]
    elif shape == 3:
        res = [slot(rng, [resource(rng, "node", 1, 2, [resource(rng, "socket", 1, 2,
                                                                leaves(rng, g))])], 1, 2)]
    elif shape == 4:
        res = [resource(rng, "node", 1, 2, [slot(rng, [resource(rng, "socket", 1, 2,
                                                                leaves(rng, g))], 1, 2)])]
    elif shape == 5:
        res = [resource(rng, "rack", 1, 2, [resource(rng, "node", 1, 2,
                                                     [slot(rng, leaves(rng, g))])])]
    elif shape == 6:
        res = [slot(rng, [resource(rng, "socket", 1, 2, leaves(rng, g))])]
    elif shape == 7:
        res = [slot(rng, [resource(rng, "node", 1, 3)], 1, 3)]
    elif shape == 8:
        node = resource(rng, "node", 1, 3, [slot(rng, [resource(rng, "core", 1, 4)])])
        if rng.random() < 0.5:
            node["exclusive"] = True
        res = [node]
    else:
        res = [resource(rng, "cluster", 1, 1, [resource(rng, "node", 1, 3,
                                                        [slot(rng, leaves(rng, g))])])]
    js: dict = {"version": 1, "resources": res,
                "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}]}
    if not (drop_attributes and rng.random() < 0.08):
        js["attributes"] = {"system": {"duration": rng.choice(DURATIONS)}}
    if wide:
        duration = rng.choice(WIDE_DURATIONS)
        system = {} if duration is None else {"duration": duration}
        if rng.random() < 0.1:
            system["constraints"] = {"properties": ["fast"]}
        js["version"] = 9999  # a version 1 jobspec must have a duration
        js["attributes"] = {"system": system}
        if rng.random() < 0.05:  # a type the graph lacks: a jobspec error in Fluxion
            js["resources"] = [slot(rng, [resource(rng, "nic", 1, 1)])]
    return js


def add_labels(rng: random.Random, resources: list[dict]) -> None:
    """--more: a label on a quarter of the non-slot requests (Fluxion's JGF writers show
    it as the vertex's "ephemeral" label, kept from the last walk that set one)."""
    for r in resources:
        if r["type"] != "slot" and rng.random() < 0.25:
            r["label"] = rng.choice(["a", "b"])
        add_labels(rng, r.get("with", []))


def or_slots(rng: random.Random, g: Graph) -> dict:
    """--flex: a jobspec whose slot is two or three alternatives at one level (RFC 14's
    or-slots, which only ``-T flexible`` takes; the plain traverser refuses the
    same-type siblings), each a few leaves with labels ``a``, ``b`` or none, so that
    labelled requests of one type meet on the vertices the flexible traverser walks
    with one request per type (its dom_slot's union). Counts are fixed or ranges."""
    alts = []
    for i in range(rng.randint(2, 3)):
        with_ = leaves(rng, g)
        for r in with_:
            if rng.random() < 0.7:
                r["label"] = rng.choice(["a", "b"])
        alts.append({"type": "slot", "count": count(rng, 1, 2), "label": f"s{i}",
                     "with": with_})
    if g.has_sockets:
        res = [{"type": "socket", "count": count(rng, 1, 2), "with": alts}]
        if rng.random() < 0.5:
            res = [resource(rng, "node", 1, 2, res)]
    else:
        res = [resource(rng, "node", 1, 2, alts)]
    return {"version": 9999, "resources": res,
            "tasks": [{"command": ["app"], "slot": "s0", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": rng.choice(DURATIONS)}}}


def more_commands(rng: random.Random, jobs: int, paths: list[str], ranks: int,
                  updates: list[tuple[str, str]], attaches: list[str], bad: list[str]
                  ) -> list[str]:
    """--more: updates (allocate or reserve from an R or a JGF, now and then a job id in
    use, a time or duration refused), attach and remove (by path or by rank), and
    malformed JSON given to update, attach and partial-cancel."""
    out = []
    for _ in range(rng.randint(1, 4)):
        x = rng.random()
        if x < 0.35 and updates:
            reader, fn = rng.choice(updates)
            out.append(f"update {rng.choice(['allocate', 'reserve'])} {reader} {fn} "
                       f"{rng.randint(1, jobs + 3)} {rng.choice([0, 0, 10, 3600, -1])} "
                       f"{rng.choice([10, 60, 3600, 0])}")
        elif x < 0.5 and attaches:
            out.append(f"attach {rng.choice(attaches)}")
        elif x < 0.7:
            if ranks and rng.random() < 0.5:
                lo = rng.randrange(ranks + 1)
                out.append(f"remove {lo}-{lo + rng.randint(0, 1)} false")
            else:
                out.append(f"remove {rng.choice(paths)} true")
        elif bad:
            y = rng.random()
            fn = rng.choice(bad)
            if y < 0.4:
                out.append(f"update allocate {rng.choice(['jgf', 'rv1exec'])} {fn} "
                           f"{jobs + 1} 0 60")
            elif y < 0.7:
                out.append(f"attach {fn}")
            else:
                out.append(f"partial-cancel {rng.randint(1, max(jobs, 1))} "
                           f"{rng.choice(['jgf', 'rv1exec'])} {fn}")
    return out


def commands(rng: random.Random, g: Graph, specs: list[str], wide: bool = False,
             paths: list[str] | None = None, cancels: list[str] | None = None) -> str:
    """3 to 16 commands, then quit (the jobspecs as @TEST_SRCDIR@/data/jobspecs/...);
    ``paths`` are the node paths to name (default: ``g``'s), ``cancels`` R files for
    ``partial-cancel`` (drawn twice in a row now and then: overlapping partial cancels)."""
    lines: list[str] = []
    jobs = 0
    paths = paths if paths is not None else g.node_paths()
    for _ in range(rng.randint(3, 16)):
        x = rng.random()
        if wide and cancels and jobs and x < 0.08:
            for _ in range(2 if rng.random() < 0.4 else 1):
                lines.append(f"partial-cancel {rng.randint(1, jobs)} rv1exec "
                             + rng.choice(cancels))
            continue
        if wide and x < 0.15:
            y = rng.random()
            if y < 0.4:
                verb = rng.choice(WIDE_VERBS)
                many = rng.random() < 0.3
                lines.append(f"{'multi-match' if many else 'match'} {verb} "
                             + " ".join(rng.choice(specs) for _ in range(2 if many else 1)))
                jobs += 2 if many else 1
            elif y < 0.7:
                lines.append("find " + rng.choice(WIDE_FINDS))
            elif y < 0.85:
                lines.append(f"set-property {rng.choice(paths)} {rng.choice(['fast', 'k'])}=1")
            else:
                lines.append(f"get-property {rng.choice(paths)}")
            continue
        if x < 0.60:
            op = rng.choice(["allocate", "allocate_orelse_reserve", "allocate_orelse_reserve",
                             "allocate_with_satisfiability", "satisfiability"])
            lines.append(f"match {op} {rng.choice(specs)}")
            jobs += 1
        elif x < 0.75:
            if jobs:
                lines.append(f"cancel {rng.randint(1, jobs + (1 if rng.random() < 0.15 else 0))}")
        elif x < 0.82:
            if jobs:
                lines.append(f"info {rng.randint(1, jobs)}")
        elif x < 0.90:
            lines.append("find " + rng.choice([
                "status=up", "status=down", "sched-now=allocated", "sched-now=free",
                "sched-future=reserved", "status=down or sched-now=allocated",
                "status=up and sched-now=free", f"jobid-alloc={max(jobs, 1)}"]))
        elif x < 0.95:
            lines.append(f"set-status {rng.choice(paths)} {rng.choice(['up', 'down'])}")
        elif rng.random() < 0.5:
            lines.append(f"multi-match allocate {rng.choice(specs)} {rng.choice(specs)}")
            jobs += 2
        else:
            lines.append("list")
    if rng.random() < 0.25:
        for _ in range(rng.randint(1, 2)):
            where = rng.choice(paths + ["/" + paths[0].split("/")[1], f"/{g.base}0/nosuch9"])
            lines.insert(rng.randint(0, len(lines)), f"get-status {where}")
    return "\n".join(lines + ["quit"]) + "\n"


def make_case(seed: int, data: Path, wide: bool = False, shared: Path | None = None,
              more: bool = False, flex: bool = False) -> dict:
    rng = random.Random(seed)
    g = Graph(rng)
    text = g.graphml()
    gname = hashlib.sha256(text.encode()).hexdigest()[:16]
    reader = rng.choice(READERS) if wide and shared else "grug"
    loaded = None
    if reader == "grug":
        (data / "graphs" / f"{gname}.graphml").write_text(text)
        gfile, load = f"{gname}.graphml", ["-f", "grug", "-S", "CA"]
    else:
        loaded = load_other(reader, g, rng, data / "graphs", f"r{seed}", shared)
        gfile, load = loaded.name, loaded.options + (
            [] if "-S" in loaded.options else ["-S", "CA"])
    drop = rng.random() < 0.3
    specs = []
    for _ in range(rng.randint(1, 4)):
        spec = jobspec(rng, g, drop, wide)
        if more:
            add_labels(rng, spec["resources"])
        js = yaml.safe_dump(spec, sort_keys=False)
        jname = hashlib.sha256(js.encode()).hexdigest()[:16]
        (data / "jobspecs" / f"{jname}.yaml").write_text(js)
        specs.append(f"{PLACEHOLDER}/data/jobspecs/{jname}.yaml")
    if flex:  # after the other jobspecs: a seed's graph and jobspecs stay those of --more
        for _ in range(rng.randint(1, 2)):
            js = yaml.safe_dump(or_slots(rng, g), sort_keys=False)
            jname = hashlib.sha256(js.encode()).hexdigest()[:16]
            (data / "jobspecs" / f"{jname}.yaml").write_text(js)
            specs.append(f"{PLACEHOLDER}/data/jobspecs/{jname}.yaml")
    specs += [f"{PLACEHOLDER}/data/jobspecs/{name}" for name in (loaded.jobspecs if loaded else ())]
    cancels = []
    if loaded and loaded.ranks:
        for i in range(rng.randint(1, 3)):
            name = partial_cancel_r(rng, loaded, data / "jobspecs", f"r{seed}_pc{i}")
            cancels.append(f"{PLACEHOLDER}/data/jobspecs/{name}")
    cmds = commands(rng, g, specs, wide, loaded.paths if loaded else None, cancels)
    if more:
        cmds = with_more(rng, g, data, seed, cmds, loaded, cancels)
    (data / "commands" / f"r{seed}.in").write_text(cmds)
    argv = ["-L", f"{{root}}/data/graphs/{gfile}", *load,
            "-P", rng.choice(POLICIES), "-F", rng.choice(WRITERS), "-d"]
    if rng.random() < 0.15:
        argv += ["-p", rng.choice(PRUNES)]
    if wide:
        argv[argv.index("-P") + 1] = rng.choice(WIDE_POLICIES)
        argv[argv.index("-F") + 1] = rng.choice(WIDE_WRITERS)
        argv += rng.choice(WIDE_OPTIONS)
    if flex:
        if rng.random() < 0.8 and "flexible" not in " ".join(argv):
            argv += ["-T", "flexible"]
        if rng.random() < 0.7:
            argv[argv.index("-F") + 1] = "jgf"  # the writer that shows the labels
    return {"id": f"r{seed}", "description": f"random case, seed {seed}", "argv": argv,
            "commands": f"data/commands/r{seed}.in", "expected": f"data/expected/r{seed}.out",
            "seed": seed}


def with_more(rng: random.Random, g: Graph, data: Path, seed: int, cmds: str,
              loaded: Loaded | None, cancels: list[str]) -> str:
    """``cmds`` with more_commands' lines put in at random places (before ``quit``), and
    the files they name written under data/jobspecs."""
    specs = data / "jobspecs"
    paths = loaded.paths if loaded else g.node_paths()
    root = "/" + paths[0].split("/")[1]
    updates = [("rv1exec", fn) for fn in cancels]
    if loaded and loaded.options[:2] == ["-f", "jgf"]:
        doc = json.loads((data / "graphs" / loaded.name).read_text())
        for i in range(rng.randint(1, 2)):
            name = write_update_jgf(rng, doc, specs, f"r{seed}_up{i}")
            updates.append(("jgf", f"{PLACEHOLDER}/data/jobspecs/{name}"))
    attaches = [f"{PLACEHOLDER}/data/jobspecs/"
                + write_attach(g, rng, specs, f"r{seed}_at{i}", root, 90 + i)
                for i in range(rng.randint(0, 2))]
    good = (data / "graphs" / loaded.name).read_bytes()[:400] if loaded else b'{"graph": {}}'
    bad = [f"{PLACEHOLDER}/data/jobspecs/" + write_bad_json(rng, specs, f"r{seed}_bad{i}", good)
           for i in range(rng.randint(1, 2))]
    lines = cmds.splitlines()[:-1]  # quit last
    jobs = sum(1 for line in lines if line.startswith(("match", "multi-match")))
    for line in more_commands(rng, jobs, paths, loaded.ranks if loaded else g.nodes,
                              updates, attaches, bad):
        lines.insert(rng.randint(0, len(lines)), line)
    return "\n".join(defined_removes(lines, paths) + ["quit"]) + "\n"


def defined_removes(lines: list[str], paths: list[str]) -> list[str]:
    """``lines`` without what Fluxion answers by undefined behaviour: a ``remove RANKS
    false`` naming a rank whose vertices an earlier ``remove`` (by path or by rank) already
    took; such a rank is dropped from the line (and the line, when none is left). No random
    draw is made here, so every other case is drawn as before.

    Why: removing a node empties its entry of the graph's by-rank index but keeps the key.
    flux-sched v0.54's ``dfu_impl_t::remove_subgraph (const std::set<int64_t> &ranks)``
    (resource/traversers/dfu_impl_update.cpp, lines 1226-1257) then pushes a root it never
    set, boost's null vertex, and ``remove_subgraph (roots, vertices)`` (lines 831-844)
    asks ``get_parent_vtx`` (lines 765-783) for the in-edges of that vertex: memory before
    the vertex array. Fluxion accepts with ``-t FILE`` and refuses without it (seed 15128
    of ``--flex --seeds 15100-15299``); fluxnode refuses (there is no defined answer to
    match). ``paths[i]`` is the node of rank ``i`` (GRUG numbers nodes in that order; the
    JGF and RV1 graphs are written so)."""
    rank_of = {path: rank for rank, path in enumerate(paths)}
    gone: set[int] = set()
    out = []
    for line in lines:
        words = line.split()
        if words[:1] == ["remove"] and words[2:] == ["true"] and words[1] in rank_of:
            gone.add(rank_of[words[1]])
        elif words[:1] == ["remove"] and words[2:] == ["false"]:
            lo, _, hi = words[1].partition("-")
            ranks = range(int(lo), int(hi or lo) + 1)
            kept = [r for r in ranks if r not in gone or r >= len(paths)]
            gone.update(r for r in ranks if r < len(paths))
            if not kept:
                continue
            if len(kept) < len(ranks):
                line = f"remove {idset_text(kept)} false"
        out.append(line)
    return out


def idset_text(ranks: list[int]) -> str:
    """RFC 22 text of at most two ascending ranks (a ``remove`` line's)."""
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def load_other(reader: str, g: Graph, rng: random.Random, folder: Path, stem: str,
               shared: Path) -> Loaded:
    """The graph of a --wide case read other than as GRUG (rq_readers.py); for the
    power graph, ``g`` takes its shape so that the jobspecs fit it."""
    if reader == "jgf":
        return write_jgf(g, rng, folder, stem)
    if reader == "rv1exec":
        g.has_sockets, g.memory = False, 0
        return write_rv1(g, rng, folder, stem)
    if reader == "hwloc":
        g.racks, g.per_rack, g.nodes, g.memory = 0, 1, 1, 0
        return copy_hwloc(rng, shared, folder)
    g.base, g.racks, g.per_rack, g.nodes = "power", 4, 18, 72
    g.sockets, g.cores, g.gpus, g.memory, g.memory_gb = 2, 18, 1, 4, 2
    return copy_power(rng, shared, folder)


def fluxion_output(fluxion: str, case: dict, root: Path) -> tuple[bytes, bytes] | None:
    """Fluxion's ``-t`` output and stderr (the case's folder written @TEST_SRCDIR@) for
    ``case``, or None when the case is dropped (see the module's docstring)."""
    outs = []
    for _ in range(2):
        try:
            run, got = fluxion_run(fluxion, case["argv"], root, root / case["commands"], 20)
        except subprocess.TimeoutExpired:  # Fluxion loops (seen after attach and remove)
            return None
        if run.returncode != 0 or got is None or b"writer emit" in run.stderr and \
                "rlite" in case["argv"]:
            return None
        outs.append((got, run.stderr.replace(str(root).encode(), PLACEHOLDER.encode())))
    if outs[0] != outs[1] or str(root).encode() in outs[0][0]:
        return None
    return outs[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fluxion", required=True, help="Fluxion's resource-query binary")
    ap.add_argument("--seeds", default="5000-5999", help="FIRST-LAST (inclusive)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wide", action="store_true",
                    help="also draw what issue 35 added: every verb (without_allocating...), "
                    "the shorthand writers, locality and variation, jobspecs without a "
                    "duration or naming a type the graph lacks, properties, more finds, "
                    "long options, -T flexible, graphs read as JGF, RV1 (with properties, "
                    "and partial cancels of its ranks), hwloc and the power graph under "
                    "other -S subsystems")
    ap.add_argument("--more", action="store_true",
                    help="--wide, and besides: update (allocate or reserve from an R or "
                    "a JGF), attach and remove, labels on requests, malformed JSON for "
                    "update, attach and partial-cancel; each case also records Fluxion's "
                    "stderr (run_conformance.py --check-stderr compares it)")
    ap.add_argument("--shared", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "fluxion-corpus"
                    / "data", help="flux-sched's test data (the hwloc files and power graph "
                    "--wide copies; default ../shared/fluxion-corpus/data)")
    ap.add_argument("--flex", action="store_true",
                    help="--more, and besides: or-slots (RFC 14's slot alternatives) with "
                    "labelled requests of one type, mostly under -T flexible and the JGF "
                    "writer")
    args = ap.parse_args()
    args.more = args.more or args.flex
    first, _, last = args.seeds.partition("-")
    out = args.out.resolve()
    data = out / "data"
    for part in ("graphs", "jobspecs", "commands", "expected"):
        (data / part).mkdir(parents=True, exist_ok=True)
    kept = dropped = 0
    with open(out / "cases.jsonl", "w") as manifest:
        for seed in range(int(first), int(last or first) + 1):
            case = make_case(seed, data, args.wide or args.more,
                             args.shared if args.shared.is_dir() else None, args.more,
                             args.flex)
            expected = fluxion_output(args.fluxion, case, out)
            if expected is None:
                dropped += 1
                continue
            (out / case["expected"]).write_bytes(expected[0])
            if args.more:  # run_conformance.py --check-stderr compares it
                case["expected_stderr"] = case["expected"].replace(".out", ".err")
                case["expected_stderr_subst"] = True
                (out / case["expected_stderr"]).write_bytes(expected[1])
            manifest.write(json.dumps(case) + "\n")
            kept += 1
    print(f"{kept} cases in {out / 'cases.jsonl'} ({dropped} dropped)", file=sys.stderr)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
