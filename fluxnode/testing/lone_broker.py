"""One worker broker started alone, as the node agent starts it on a node.

    with lone_worker(tmp_path) as (proc, uri):
        ...  # proc: the `python -m fluxnode broker` process; uri: its local://

It is rank 1, a leaf, of a three-host instance (node[0-2]) whose other brokers do not run:
it connects to a parent that never answers, which is what a worker's memory and imports
are measured on (the footprint bench and the test that a worker imports no scheduler,
YAML, Kubernetes client or click). `python_args` go before `-m` (e.g. `-X importtime`,
whose report goes to `stderr`).

    with leader_and_worker(tmp_path) as (rank0, rank1, uri):
        ...

starts ranks 0 and 1 of the same config as two processes and waits until rank 1 answers
through rank 0: what a broker loads once messages cross the overlay.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from fluxnode.agent.broker.client import Client
from fluxnode.broker_conf import certificate
from fluxnode.testing.exits import stop_process
from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for


def write_worker_config(root: Path) -> Path:
    cert = root / "curve.cert"
    certificate.write(cert, certificate.generate(), force=True)
    cfg = root / "broker.toml"
    cfg.write_text(
        "[bootstrap]\n"
        f'curve_cert = "{cert}"\n'
        f"default_port = {free_port()}\n"
        'default_bind = "tcp://127.0.0.1:%p"\n'
        'default_connect = "tcp://127.0.0.1:%p"\n'
        'hosts = [ { host = "node[0-2]" } ]\n'
    )
    return cfg


def _broker_argv(python: str, python_args: tuple[str, ...], cfg: Path, hostname: str,
                 rundir: Path) -> list[str]:
    return [python, *python_args, "-m", "fluxnode", "broker", "--config-path", str(cfg),
            "--hostname", hostname, "-S", f"rundir={rundir}", "-S", f"statedir={rundir}",
            "-S", "log-stderr-level=3"]


def _answers(proc: subprocess.Popen, uri: str, nodeid: int) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"a broker exited with {proc.returncode}")
    with Client.connect(uri, timeout=2.0) as c:
        return bool(c.rpc("broker.ping", {}, nodeid=nodeid))


@contextlib.contextmanager
def lone_worker(
    root: Path, python_args: tuple[str, ...] = (), stderr: IO[bytes] | int | None = None,
    timeout: float = 60.0, python: str = sys.executable,
) -> Iterator[tuple[subprocess.Popen, str]]:
    """Start the worker (with `python`, another checkout's to compare), wait until it
    answers a ping on its local socket, yield, stop it."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = write_worker_config(root)
    rundir = root / "run"
    uri = f"local://{rundir}/local"
    proc = subprocess.Popen(_broker_argv(python, python_args, cfg, "node1", rundir),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: _answers(proc, uri, 1), timeout,  # its own rank
                 what="the lone worker broker to answer a ping")
        yield proc, uri
    finally:
        stop_process(proc, 10)


@contextlib.contextmanager
def leader_and_worker(
    root: Path, python_args: tuple[str, ...] = (),
    stderr: tuple[IO[bytes], IO[bytes]] | None = None, timeout: float = 60.0,
) -> Iterator[tuple[subprocess.Popen, subprocess.Popen, str]]:
    """Ranks 0 and 1 of the same three-host config, each its own process (not forked from a
    launcher), `python_args` (and `stderr`, one per rank) given to both; yields once rank 1
    has joined and answers a ping sent to rank 0's local socket (over the TBON, through rank
    0's ROUTER, ZAP handler and monitor and rank 1's DEALER): (rank 0, rank 1, rank 0's
    local URI)."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = write_worker_config(root)
    procs: list[subprocess.Popen] = []
    try:
        for rank in (0, 1):
            rundir = root / f"run{rank}"
            procs.append(subprocess.Popen(
                _broker_argv(sys.executable, python_args, cfg, f"node{rank}", rundir),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if stderr is None else stderr[rank]))
        uri = f"local://{root / 'run0'}/local"

        def joined() -> bool:
            _answers(procs[1], f"local://{root / 'run1'}/local", 1)
            return _answers(procs[0], uri, 1)

        wait_for(joined, timeout, what="rank 1 to answer a ping through rank 0")
        yield procs[0], procs[1], uri
    finally:
        for proc in reversed(procs):
            stop_process(proc, 10)
