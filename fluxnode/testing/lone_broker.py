"""One worker broker started alone, as the node agent starts it on a node.

    with lone_worker(tmp_path) as (proc, uri):
        ...  # proc: the `python -m fluxnode broker` process; uri: its local://

It is rank 1, a leaf, of a three-host instance (node[0-2]) whose other brokers do not run:
it connects to a parent that never answers, which is what a worker's memory and imports
are measured on (the footprint bench and the test that a worker imports no scheduler,
YAML, Kubernetes client or click). `python_args` go before `-m` (e.g. `-X importtime`,
whose report goes to `stderr`).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from fluxnode.agent.broker.client import Client
from fluxnode.broker_conf import certificate
from fluxnode.testing.exits import stop_process
from fluxnode.testing.waiting import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_worker_config(root: Path) -> Path:
    cert = root / "curve.cert"
    certificate.write(cert, certificate.generate(), force=True)
    cfg = root / "broker.toml"
    cfg.write_text(
        "[bootstrap]\n"
        f'curve_cert = "{cert}"\n'
        f"default_port = {_free_port()}\n"
        'default_bind = "tcp://127.0.0.1:%p"\n'
        'default_connect = "tcp://127.0.0.1:%p"\n'
        'hosts = [ { host = "node[0-2]" } ]\n'
    )
    return cfg


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
    argv = [python, *python_args, "-m", "fluxnode", "broker", "--config-path", str(cfg),
            "--hostname", "node1", "-S", f"rundir={rundir}", "-S", f"statedir={rundir}",
            "-S", "log-stderr-level=3"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=stderr)
    try:
        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the lone broker exited with {proc.returncode}")
            with Client.connect(uri, timeout=2.0) as c:
                return bool(c.rpc("broker.ping", {}, nodeid=1))  # its own rank

        wait_for(answers, timeout, what="the lone worker broker to answer a ping")
        yield proc, uri
    finally:
        stop_process(proc, 10)
