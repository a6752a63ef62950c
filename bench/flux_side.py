"""Flux's side of bench/broker_footprint.py: flux-core's brokers measured as ours are.

A lone worker: `flux broker` as rank 1 (a leaf) of a three-host bootstrap config
(node[0-2]) whose other brokers do not run, like fluxnode.testing.lone_broker's, measured
once it answers a request on its local socket (`flux getattr rank`). An instance: the
brokers of `flux start --test-size=N -Stbon.topo=kary:2` (the children of `flux start`
named flux-broker-*), measured while the initial program waits on its stdin. `flux` is a
flux-core install's bin/flux; its lib/ goes on LD_LIBRARY_PATH.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from fluxnode.testing.exits import stop_process
from fluxnode.testing.ports import free_port

Memory = dict[str, int]


def _env(flux: str) -> dict[str, str]:
    env = dict(os.environ)
    lib = str(Path(flux).resolve().parent.parent / "lib")
    env["LD_LIBRARY_PATH"] = f"{lib}:{env['LD_LIBRARY_PATH']}" if env.get(
        "LD_LIBRARY_PATH") else lib
    return env


def _wait(what: str, ready, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def lone_flux_worker(root: Path, flux: str) -> Iterator[int]:
    """Start Flux's lone worker under `root`, yield its pid once it answers, stop it."""
    env = _env(flux)
    conf, run = root / "conf", root / "run"
    conf.mkdir(parents=True)
    run.mkdir()
    cert = root / "curve.cert"
    subprocess.run([flux, "keygen", str(cert)], env=env, check=True, capture_output=True)
    (conf / "boot.toml").write_text(
        "[bootstrap]\n"
        f'curve_cert = "{cert}"\n'
        f"default_port = {free_port()}\n"
        'default_bind = "tcp://127.0.0.1:%p"\n'
        'default_connect = "tcp://127.0.0.1:%p"\n'
        'hosts = [ { host = "node[0-2]" } ]\n')
    proc = subprocess.Popen([flux, "broker", f"--config-path={conf}", "-Shostname=node1",
                             f"-Srundir={run}", f"-Sstatedir={run}", "-Slog-stderr-level=3"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    env["FLUX_URI"] = f"local://{run}/local-1"

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the lone flux broker exited with {proc.returncode}")
        return subprocess.run([flux, "getattr", "rank"], env=env, capture_output=True,
                              timeout=10).returncode == 0

    try:
        _wait("the lone flux broker to answer", answers)
        yield proc.pid
    finally:
        stop_process(proc, 10)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        if int(rest.split()[1]) == pid and comm.startswith("flux-broker"):
            out.append(int(entry.name))
    return out


def flux_instance(root: Path, size: int, flux: str, memory) -> list[Memory]:
    """`memory(pid)` of each broker of a running `flux start --test-size=SIZE`."""
    ready = root / "ready"
    root.mkdir(parents=True, exist_ok=True)
    wait = f"touch {ready}; cat >/dev/null"
    proc = subprocess.Popen([flux, "start", f"--test-size={size}", "-Stbon.topo=kary:2",
                             "sh", "-c", wait], env=_env(flux), stdin=subprocess.PIPE)
    try:
        _wait(f"{size} flux brokers to start", ready.exists, 300)
        pids = _children(proc.pid)
        assert len(pids) == size, f"found {len(pids)} flux brokers, not {size}"
        return [memory(p) for p in pids]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=120)
