"""The leader's memory with a 1,000-node graph (issue 32: RSS <= 40 MiB).

    .venv/bin/python bench/leader_footprint.py [--nodes 1000] [--cores 64] [--gpus 4]
                                               [--runs 1] [--python PY] [--flux-rq RQ]

Starts `python -m fluxnode broker` alone as rank 0 of a NODES-host instance (node[0-N-1],
the scheduler module loaded as by default), registers the other NODES-1 nodes with it
over its local socket (`resource.register`, what each broker sends when it joins: here
2 sockets, CORES cores, GPUS GPUs and 256 GiB each), waits until the scheduler's graph
holds all of them (`sched.resource-status`), and reads the leader's VmRSS and Pss from
/proc/PID/smaps_rollup. The fluxnode packages the leader imports are compiled to
bytecode first, as an installed wheel has them (a checkout run with
PYTHONDONTWRITEBYTECODE compiles each module from source in the leader, about 1.5 MiB
more). The nodes are down (no broker runs there): the graph holds them all the same,
which is what the figure is about; live brokers would add their overlay peers. Medians
over --runs. Memory figures do not depend on the machine's load. Where the memory goes:
bench/leader_memory.py.

``--flux-rq`` (Fluxion's ``resource-query``) adds the side-by-side figure for the graph
alone: the same graph as the leader's (a GRUG of NODES nodes, each with its cores, GPUs
and 128 memory granules directly below it, as the service's flat graph has them) loaded
by Fluxion's resource-query and by ``fluxnode resource-query``, the RSS of each once it
has answered ``stat``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from broker_footprint import compile_modules, memory
from fluxnode.agent.broker.client import Client
from fluxnode.broker_conf import certificate
from sched_common import KEYS

from fluxnode.testing.exits import stop_process
from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for

KiB = 1024


def leader(root: Path, nodes: int, cores: int, gpus: int, python: str) -> dict[str, int]:
    root.mkdir(parents=True)
    cert = root / "curve.cert"
    certificate.write(cert, certificate.generate(), force=True)
    cfg = root / "broker.toml"
    cfg.write_text("[bootstrap]\n"
                   f'curve_cert = "{cert}"\n'
                   f"default_port = {free_port()}\n"
                   'default_bind = "tcp://127.0.0.1:%p"\n'
                   'default_connect = "tcp://127.0.0.1:%p"\n'
                   f'hosts = [ {{ host = "node[0-{nodes - 1}]" }} ]\n')
    run = root / "run"
    uri = f"local://{run}/local"
    proc = subprocess.Popen([python, "-m", "fluxnode", "broker", "--config-path", str(cfg),
                             "--hostname", "node0", "-S", f"rundir={run}", "-S",
                             f"statedir={run}", "-S", "log-stderr-level=3"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the leader exited with {proc.returncode}")
            with Client.connect(uri, timeout=2.0) as c:
                return bool(c.rpc("broker.ping", {}, nodeid=0))

        wait_for(answers, 120, what="the leader to answer a ping")
        with Client.connect(uri, timeout=30.0) as c:
            for rank in range(1, nodes):
                c.rpc("resource.register", {"node": {
                    "rank": rank, "hostname": f"node{rank}", "cores": list(range(cores)),
                    "gpus": list(range(gpus)), "sockets": 2, "memory_mib": 262144}},
                    nodeid=0)

            def graph_full() -> bool:
                return len(c.rpc("sched.resource-status", {}, nodeid=0)["nodes"]) == nodes

            wait_for(graph_full, 300, what=f"the scheduler's graph to hold {nodes} nodes",
                     interval=0.2)
        return memory(proc.pid)
    finally:
        stop_process(proc, 20)


def flat_grug(nodes: int, cores: int, gpus: int, granules: int = 128,
              granule_mib: int = 2048) -> str:
    """cluster0 -> node[nodes] -> core[cores] + gpu[gpus] + memory[granules]: the
    service's flat graph (scheduler/service/flat_graph.py) as a GRUG recipe."""
    size = f'<data key="size">{granule_mib}</data><data key="unit">MiB</data>'
    kids = [("core", cores, ""), ("gpu", gpus, ""), ("memory", granules, size)]
    vertices = "".join(f'    <node id="{t}"><data key="type">{t}</data><data key="basename">{t}'
                       f"</data>{extra}</node>\n" for t, _, extra in kids)
    edges = "".join(f'    <edge id="n2{t}" source="node" target="{t}"><data key="id_scope">1'
                    f'</data><data key="multi_scale">{n}</data></edge>\n' for t, n, _ in kids)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
            f'{KEYS}  <graph id="leader" edgedefault="directed">\n'
            '    <node id="cluster"><data key="root">1</data><data key="type">cluster</data>'
            '<data key="basename">cluster</data></node>\n'
            '    <node id="node"><data key="type">node</data><data key="basename">node</data>'
            f'</node>\n{vertices}'
            '    <edge id="c2n" source="cluster" target="node"><data key="multi_scale">'
            f"{nodes}</data></edge>\n{edges}  </graph>\n</graphml>\n")


def resource_query(argv: list[str]) -> dict[str, int]:
    """``memory`` of a resource-query (``argv``) once it has loaded its graph and answered
    ``stat`` (whose last line both print is the average match time)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        proc.stdin.write("stat\n")
        proc.stdin.flush()
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "Avg. Match Time" in line:
                return memory(proc.pid)
        raise RuntimeError(f"{argv[0]} ended before answering stat: {''.join(seen[-5:])}")
    finally:
        stop_process(proc, 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes in the graph (1000)")
    parser.add_argument("--cores", type=int, default=64, help="cores per node (64)")
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per node (4)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs (default 1: a run takes about 3 minutes on 2 loaded cores)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the leader runs with (default: this one)")
    parser.add_argument("--flux-rq", metavar="RQ",
                        help="Fluxion's resource-query: also load the same graph in it and in "
                             "fluxnode resource-query")
    opts = parser.parse_args()
    if opts.nodes < 1 or opts.cores < 0 or opts.gpus < 0 or opts.runs < 1:
        parser.error("--nodes and --runs must be >= 1, --cores and --gpus >= 0")
    if opts.flux_rq:
        with tempfile.TemporaryDirectory(prefix="leader-rq-") as tmp:
            graph = Path(tmp) / "leader.graphml"
            graph.write_text(flat_grug(opts.nodes, opts.cores, opts.gpus))
            fluxnode = str(Path(opts.python).with_name("fluxnode"))
            for who, argv in (("Fluxion's resource-query", [opts.flux_rq]),
                              ("fluxnode resource-query", [fluxnode, "resource-query"])):
                got = resource_query([*argv, "-L", str(graph), "-P", "first"])
                print(f"{who} with the same graph: RSS {got['Rss'] / KiB:.1f} MiB, "
                      f"PSS {got['Pss'] / KiB:.1f} MiB")
    compile_modules(opts.python)
    with tempfile.TemporaryDirectory(prefix="leader-") as tmp:
        figures = [leader(Path(tmp) / f"run{i}", opts.nodes, opts.cores, opts.gpus,
                          opts.python) for i in range(opts.runs)]
    print(f"leader with a {opts.nodes}-node graph ({opts.cores} cores, {opts.gpus} GPUs per "
          f"node): RSS {statistics.median(f['Rss'] for f in figures) / KiB:.1f} MiB, PSS "
          f"{statistics.median(f['Pss'] for f in figures) / KiB:.1f} MiB "
          f"(median of {opts.runs})")


if __name__ == "__main__":
    main()
