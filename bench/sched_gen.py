"""Generate scheduler benchmark inputs: GRUG graphs, jobspec streams, resource-query commands.

The graph is a GRUG recipe (the .graphml format resource-query loads with ``-L``, ``-f grug``):
cluster -> [rack ->] node[N] -> socket[S] -> core[C] (+ gpu, + memory pools). Node ids are
global, core/gpu/memory ids are unique within their node (``id_scope`` 1), like the graphs
in Fluxion's test corpus. Jobspecs are RFC 14 YAML in the shapes the corpus uses; the
commands file is what resource-query reads on stdin.

Usage (all sub-commands take ``--seed``; output paths are created):

  bench/sched_gen.py grug --nodes 1024 --sockets 2 --cores 16 [--gpus 4] [--memory-gb 256]
                          [--memory-pools 4] [--racks 8] [--name cluster] -o graph.graphml

  bench/sched_gen.py jobspecs --kind core|socket|node|gang|gpu [--count K] [--sockets 2]
                              [--cores 16] [--gpus 4] [--memory-gb 0] [--gang-nodes 4]
                              [--duration 3600] -o DIR
      writes DIR/<kind>.yaml (one jobspec; --count sets the number of slots for
      core/socket/gpu jobs)

  bench/sched_gen.py commands --jobspec-dir DIR --jobs 10000 [--mix core=8,node=1,gang=1]
                              [--op allocate_orelse_reserve] [--cancel-lag 0] -o cmds.in
      a resource-query command stream: --jobs ``match OP FILE`` lines picking jobspec
      kinds by weight (seeded), with ``cancel J`` of job i-LAG after job i when --cancel-lag
      is set, then ``quit``

  bench/sched_gen.py all --nodes 64 --sockets 2 --cores 16 --gpus 4 --memory-gb 256
                         --jobs 1000 [--mix ...] -o OUTDIR
      OUTDIR/graph.graphml, OUTDIR/jobspecs/*.yaml (every kind), OUTDIR/cmds.in, and
      OUTDIR/run.sh showing the resource-query command line

Example:

  .venv/bin/python bench/sched_gen.py all --nodes 256 --jobs 5000 -o /tmp/rq-bench
  fluxnode resource-query -L /tmp/rq-bench/graph.graphml -P first -t /tmp/out.R \\
      < /tmp/rq-bench/cmds.in
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from xml.sax.saxutils import escape

import yaml
from fluxnode.scheduler.jobspec.jobspec import Jobspec

KINDS = ("core", "socket", "node", "gang", "gpu")

_KEYS = """\
    <key id="root" for="node" attr.name="root" attr.type="int"><default>0</default></key>
    <key id="type" for="node" attr.name="type" attr.type="string"/>
    <key id="basename" for="node" attr.name="basename" attr.type="string"/>
    <key id="unit" for="node" attr.name="unit" attr.type="string"/>
    <key id="size" for="node" attr.name="size" attr.type="long"><default>1</default></key>
    <key id="subsystem" for="node" attr.name="subsystem" attr.type="string">
        <default>containment</default></key>
    <key id="e_subsystem" for="edge" attr.name="e_subsystem" attr.type="string">
        <default>containment</default></key>
    <key id="relation" for="edge" attr.name="relation" attr.type="string">
        <default>contains</default></key>
    <key id="rrelation" for="edge" attr.name="rrelation" attr.type="string">
        <default>in</default></key>
    <key id="id_scope" for="edge" attr.name="id_scope" attr.type="int"><default>0</default></key>
    <key id="id_start" for="edge" attr.name="id_start" attr.type="int"><default>0</default></key>
    <key id="id_stride" for="edge" attr.name="id_stride" attr.type="int"><default>1</default></key>
    <key id="gen_method" for="edge" attr.name="gen_method" attr.type="string">
        <default>MULTIPLY</default></key>
    <key id="multi_scale" for="edge" attr.name="multi_scale" attr.type="int"><default>1</default></key>
    <key id="as_tgt_subsystem" for="edge" attr.name="as_tgt_subsystem" attr.type="string">
        <default>containment</default></key>
    <key id="as_tgt_uplvl" for="edge" attr.name="as_tgt_uplvl" attr.type="int"><default>1</default></key>
    <key id="as_src_uplvl" for="edge" attr.name="as_src_uplvl" attr.type="int"><default>1</default></key>
"""


def grug(nodes: int, sockets: int, cores: int, *, gpus: int = 0, memory_gb: int = 0,
         memory_pools: int = 1, racks: int = 0, name: str = "cluster") -> str:
    """A GRUG recipe; gpus and memory are per node, spread evenly over the sockets."""
    if nodes < 1 or sockets < 1 or cores < 1:
        raise ValueError("--nodes, --sockets and --cores must be >= 1")
    if racks and nodes % racks:
        raise ValueError(f"--nodes {nodes} does not spread evenly over --racks {racks}")
    if gpus % sockets:
        raise ValueError(f"--gpus {gpus} does not spread evenly over --sockets {sockets}")
    if memory_gb and memory_gb % (sockets * memory_pools):
        raise ValueError(f"--memory-gb {memory_gb} does not split evenly into "
                         f"{sockets} sockets x {memory_pools} pools")
    vertices = [("cluster", "cluster", name, {"root": 1})]
    edges = []
    if racks:
        vertices.append(("rack", "rack", "rack", {}))
        edges.append(("cluster", "rack", {"multi_scale": racks}))
        edges.append(("rack", "node", {"id_scope": 1, "multi_scale": nodes // racks}))
    else:
        edges.append(("cluster", "node", {"multi_scale": nodes}))
    vertices += [("node", "node", "node", {}), ("socket", "socket", "socket", {}),
                 ("core", "core", "core", {})]
    edges.append(("node", "socket", {"multi_scale": sockets}))
    edges.append(("socket", "core", {"id_scope": 1, "multi_scale": cores}))
    if gpus:
        vertices.append(("gpu", "gpu", "gpu", {}))
        edges.append(("socket", "gpu", {"id_scope": 1, "multi_scale": gpus // sockets}))
    if memory_gb:
        size = memory_gb // (sockets * memory_pools)
        vertices.append(("memory", "memory", "memory", {"size": size, "unit": "GB"}))
        edges.append(("socket", "memory", {"id_scope": 1, "multi_scale": memory_pools}))

    shape = f"node[{nodes}]->socket[{sockets}]->core[{cores}]"
    if racks:
        shape = f"rack[{racks}]->node[{nodes // racks}]->socket[{sockets}]->core[{cores}]"
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f"<!-- generated by bench/sched_gen.py: cluster[1]->{shape}"
           f"{f' + gpu[{gpus}]/node' if gpus else ''}"
           f"{f' + memory {memory_gb}GB/node' if memory_gb else ''} -->",
           '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
           _KEYS.rstrip("\n"),
           f'    <graph id="{escape(name)}" edgedefault="directed">']
    for vid, rtype, basename, extra in vertices:
        out.append(f'        <node id="{vid}">')
        if extra.get("root"):
            out.append('            <data key="root">1</data>')
        out.append(f'            <data key="type">{rtype}</data>')
        out.append(f'            <data key="basename">{escape(basename)}</data>')
        if "size" in extra:
            out.append(f'            <data key="size">{extra["size"]}</data>')
            out.append(f'            <data key="unit">{extra["unit"]}</data>')
        out.append("        </node>")
    for src, dst, data in edges:
        out.append(f'        <edge id="{src}2{dst}" source="{src}" target="{dst}">')
        for key, value in data.items():
            out.append(f'            <data key="{key}">{value}</data>')
        out.append("        </edge>")
    out += ["    </graph>", "</graphml>", ""]
    return "\n".join(out)


def jobspec(kind: str, *, count: int = 1, sockets: int = 2, cores: int = 16, gpus: int = 0,
            memory_gb: int = 0, gang_nodes: int = 4, duration: int = 3600) -> dict:
    """One jobspec of a benchmark shape (validated with Jobspec.parse).

    core:   slot[count] -> core[1]                      (matched inside any socket)
    socket: slot[count] -> socket[1] -> core[cores]     (whole sockets)
    node:   slot[1] -> node[1] -> socket[S] -> core[C] (+gpu, +memory): a whole node
    gang:   slot[gang_nodes] -> node[1] -> ...          whole nodes, all at once
    gpu:    node[1] -> slot[count] -> {core[cores//(gpus/S) or 1], gpu[1]}
    """
    def per_socket() -> list[dict]:
        kids = [{"type": "core", "count": cores}]
        if gpus:
            kids.append({"type": "gpu", "count": gpus // sockets})
        if memory_gb:
            kids.append({"type": "memory", "count": memory_gb // sockets})
        return kids

    whole_node = {"type": "node", "count": 1,
                  "with": [{"type": "socket", "count": sockets, "with": per_socket()}]}
    if kind == "core":
        resources = [{"type": "slot", "count": count, "label": "task",
                      "with": [{"type": "core", "count": 1}]}]
    elif kind == "socket":
        resources = [{"type": "slot", "count": count, "label": "task",
                      "with": [{"type": "socket", "count": 1,
                                "with": [{"type": "core", "count": cores}]}]}]
    elif kind == "node":
        resources = [{"type": "slot", "count": 1, "label": "task", "with": [whole_node]}]
    elif kind == "gang":
        resources = [{"type": "slot", "count": gang_nodes, "label": "task",
                      "with": [whole_node]}]
    elif kind == "gpu":
        if not gpus:
            raise ValueError("gpu jobs need --gpus")
        per_gpu = max(1, cores // max(1, gpus // sockets))
        resources = [{"type": "node", "count": 1, "with": [
            {"type": "slot", "count": count, "label": "task",
             "with": [{"type": "core", "count": per_gpu}, {"type": "gpu", "count": 1}]}]}]
    else:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    doc = {"version": 9999, "resources": resources,
           "attributes": {"system": {"duration": duration}},
           "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}
    Jobspec.parse(doc)
    return doc


def parse_mix(text: str) -> dict[str, int]:
    mix = {}
    for part in filter(None, text.split(",")):
        kind, _, weight = part.partition("=")
        if kind not in KINDS or not weight.isdigit():
            raise ValueError(f"--mix entry {part!r}: want KIND=WEIGHT, KIND in {KINDS}")
        mix[kind] = int(weight)
    if not mix or not any(mix.values()):
        raise ValueError("--mix needs at least one positive weight")
    return mix


def commands(files: dict[str, Path], jobs: int, mix: dict[str, int], *, op: str,
             cancel_lag: int, rng: random.Random) -> str:
    missing = [k for k in mix if mix[k] and k not in files]
    if missing:
        raise ValueError(f"no jobspec file for {missing}")
    kinds = [k for k in mix if mix[k]]
    weights = [mix[k] for k in kinds]
    lines = []
    for job in range(1, jobs + 1):
        kind = rng.choices(kinds, weights)[0]
        lines.append(f"match {op} {files[kind]}")
        if cancel_lag and job > cancel_lag:
            lines.append(f"cancel {job - cancel_lag}")
    lines.append("quit")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sched_gen.py", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def shape(p: argparse.ArgumentParser) -> None:
        p.add_argument("--sockets", type=int, default=2)
        p.add_argument("--cores", type=int, default=16, help="cores per socket")
        p.add_argument("--gpus", type=int, default=0, help="gpus per node")
        p.add_argument("--memory-gb", type=int, default=0, help="memory per node")

    def jobshape(p: argparse.ArgumentParser) -> None:
        p.add_argument("--gang-nodes", type=int, default=4)
        p.add_argument("--duration", type=int, default=3600)

    g = sub.add_parser("grug", help="a GRUG graph recipe")
    g.add_argument("--nodes", type=int, required=True)
    shape(g)
    g.add_argument("--memory-pools", type=int, default=1, help="memory vertices per socket")
    g.add_argument("--racks", type=int, default=0)
    g.add_argument("--name", default="cluster")
    g.add_argument("-o", "--output", type=Path, required=True)

    j = sub.add_parser("jobspecs", help="one jobspec of a kind")
    j.add_argument("--kind", choices=KINDS, required=True)
    j.add_argument("--count", type=int, default=1)
    shape(j)
    jobshape(j)
    j.add_argument("-o", "--output", type=Path, required=True, help="directory")

    c = sub.add_parser("commands", help="a resource-query command stream")
    c.add_argument("--jobspec-dir", type=Path, required=True)
    c.add_argument("--jobs", type=int, required=True)
    c.add_argument("--mix", default="core=8,node=1,gang=1")
    c.add_argument("--op", default="allocate_orelse_reserve",
                   choices=["allocate", "allocate_orelse_reserve",
                            "allocate_with_satisfiability", "satisfiability"])
    c.add_argument("--cancel-lag", type=int, default=0)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("-o", "--output", type=Path, required=True)

    a = sub.add_parser("all", help="graph + every jobspec kind + commands")
    a.add_argument("--nodes", type=int, required=True)
    shape(a)
    jobshape(a)
    a.add_argument("--memory-pools", type=int, default=1)
    a.add_argument("--racks", type=int, default=0)
    a.add_argument("--jobs", type=int, default=1000)
    a.add_argument("--mix", default="core=8,node=1,gang=1")
    a.add_argument("--op", default="allocate_orelse_reserve")
    a.add_argument("--cancel-lag", type=int, default=0)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("-o", "--output", type=Path, required=True, help="directory")

    args = ap.parse_args(argv)
    try:
        if args.cmd == "grug":
            _write(args.output, grug(args.nodes, args.sockets, args.cores, gpus=args.gpus,
                                     memory_gb=args.memory_gb, memory_pools=args.memory_pools,
                                     racks=args.racks))
        elif args.cmd == "jobspecs":
            doc = jobspec(args.kind, count=args.count, sockets=args.sockets, cores=args.cores,
                          gpus=args.gpus, memory_gb=args.memory_gb,
                          gang_nodes=args.gang_nodes, duration=args.duration)
            _write(args.output / f"{args.kind}.yaml", _dump(doc))
        elif args.cmd == "commands":
            files = {p.stem: p.resolve() for p in sorted(args.jobspec_dir.glob("*.yaml"))}
            _write(args.output, commands(files, args.jobs, parse_mix(args.mix), op=args.op,
                                         cancel_lag=args.cancel_lag,
                                         rng=random.Random(args.seed)))
        else:
            out: Path = args.output
            _write(out / "graph.graphml",
                   grug(args.nodes, args.sockets, args.cores, gpus=args.gpus,
                        memory_gb=args.memory_gb, memory_pools=args.memory_pools,
                        racks=args.racks))
            files = {}
            for kind in KINDS:
                if kind == "gpu" and not args.gpus:
                    continue
                doc = jobspec(kind, sockets=args.sockets, cores=args.cores, gpus=args.gpus,
                              memory_gb=args.memory_gb, gang_nodes=args.gang_nodes,
                              duration=args.duration)
                files[kind] = (out / "jobspecs" / f"{kind}.yaml").resolve()
                _write(files[kind], _dump(doc))
            _write(out / "cmds.in", commands(files, args.jobs, parse_mix(args.mix), op=args.op,
                                             cancel_lag=args.cancel_lag,
                                             rng=random.Random(args.seed)))
            _write(out / "run.sh",
                   "#!/bin/sh\n# resource-query over the generated graph and command stream\n"
                   f'exec fluxnode resource-query -L "{(out / "graph.graphml").resolve()}" '
                   f'-P "${{POLICY:-first}}" -t "${{OUT:-/dev/null}}" '
                   f'< "{(out / "cmds.in").resolve()}"\n')
            (out / "run.sh").chmod(0o755)
    except ValueError as e:
        print(f"sched_gen.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
