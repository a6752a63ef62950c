"""The leader's memory with a 1,000-node graph (issue 32: RSS <= 40 MiB).

    .venv/bin/python bench/leader_footprint.py [--nodes 1000] [--cores 64] [--gpus 4]
                                               [--runs 1] [--python PY]

Starts `python -m fluxnode broker` alone as rank 0 of a NODES-host instance (node[0-N-1],
the scheduler module loaded as by default), registers the other NODES-1 nodes with it
over its local socket (`resource.register`, what each broker sends when it joins: here
2 sockets, CORES cores, GPUS GPUs and 256 GiB each), waits until the scheduler's graph
holds all of them (`sched.resource-status`), and reads the leader's VmRSS and Pss from
/proc/PID/smaps_rollup. The nodes are down (no broker runs there): the graph holds
them all the same, which is what the figure is about; live brokers would add their
overlay peers. Medians over --runs. Memory figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from broker_footprint import memory
from fluxnode.agent.broker.client import Client
from fluxnode.broker_conf import certificate

from fluxnode.testing.exits import stop_process
from fluxnode.testing.waiting import wait_for

KiB = 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leader(root: Path, nodes: int, cores: int, gpus: int, python: str) -> dict[str, int]:
    root.mkdir(parents=True)
    cert = root / "curve.cert"
    certificate.write(cert, certificate.generate(), force=True)
    cfg = root / "broker.toml"
    cfg.write_text("[bootstrap]\n"
                   f'curve_cert = "{cert}"\n'
                   f"default_port = {_free_port()}\n"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes in the graph (1000)")
    parser.add_argument("--cores", type=int, default=64, help="cores per node (64)")
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per node (4)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs (default 1: a run takes about 3 minutes on 2 loaded cores)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the leader runs with (default: this one)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leader-") as tmp:
        figures = [leader(Path(tmp) / f"run{i}", opts.nodes, opts.cores, opts.gpus,
                          opts.python) for i in range(opts.runs)]
    print(f"leader with a {opts.nodes}-node graph ({opts.cores} cores, {opts.gpus} GPUs per "
          f"node): RSS {statistics.median(f['Rss'] for f in figures) / KiB:.1f} MiB, PSS "
          f"{statistics.median(f['Pss'] for f in figures) / KiB:.1f} MiB "
          f"(median of {opts.runs})")


if __name__ == "__main__":
    main()
