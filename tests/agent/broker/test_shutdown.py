"""`fluxnode start` stopped by SIGINT or SIGTERM shuts the instance down cleanly.

Watched from the outside: every broker's exit through a pidfd (who left first), the exit
code of `fluxnode start`, its stderr (it names any broker it had to signal), the
processes and the sockets that remain.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fluxnode.testing.exits import ExitWatcher
from fluxnode.testing.waiting import wait_for

SIZE = 7  # kary:2: 0 -> 1, 2; 1 -> 3, 4; 2 -> 5, 6 (three levels)


def parent(rank: int) -> int | None:
    return None if rank == 0 else (rank - 1) // 2


def start(tmp_path: Path) -> tuple[subprocess.Popen, dict, int, Path]:
    """`fluxnode start` with a command that waits on its stdin; returns it, instance.json,
    the command's pid, and the stderr file."""
    rundir = tmp_path / "run"
    pidfile = tmp_path / "command.pid"
    stderr = tmp_path / "start.stderr"
    argv = [
        sys.executable,
        "-m",
        "fluxnode",
        "start",
        "--test-size",
        str(SIZE),
        "--topo",
        "kary:2",
        "--rundir",
        str(rundir),
        "--test-hosts",
        f"node[0-{SIZE - 1}]",
        "--quiet",
        "-S",
        "broker.modules=",
        "--",
        sys.executable,
        "-c",
        f"import os, pathlib, sys; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid())); "
        "sys.stdin.read()",
    ]
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(
            lambda: pidfile.exists() and pidfile.read_text(),
            60,
            what="the instance to run its command",
        )
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    info = json.loads((rundir / "instance.json").read_text())
    return proc, info, int(pidfile.read_text()), stderr


def tbon_ports(info: dict) -> list[int]:
    from fluxnode.broker_conf import config

    conf = config.load(info["config"])
    return [
        int(conf.connect_uri(r).rsplit(":", 1)[1])
        for r in range(SIZE)
        if r == 0 or 2 * r + 1 < SIZE
    ]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_start_stops_cleanly_on_a_signal_leaves_first(tmp_path, sig):
    """Leaf rank 3 is frozen (SIGSTOP) before the signal, so the order is not left to the
    scheduler: the shutdown message must reach every other leaf through its parent and
    they leave, while rank 3's parent (1) and the root (0) wait for it; once rank 3 runs
    again the rest leave, and nobody had to be signalled. A second signal while the
    shutdown is under way changes nothing. (Exit order among processes
    that leave within milliseconds of each other is not checked: a broker's goodbye comes
    before its own teardown, so its parent may finish first.)"""
    proc, info, command_pid, stderr = start(tmp_path)
    brokers = {b["rank"]: b["pid"] for b in info["brokers"]}
    watcher = ExitWatcher({**brokers, "command": command_pid})
    frozen = 3
    try:
        sockets = {
            b["rank"]: Path(b["attrs"]["local-uri"].removeprefix("local://"))
            for b in info["brokers"]
        }
        ports = tbon_ports(info)
        assert all(p.exists() for p in sockets.values()) and all(listening(p) for p in ports)

        os.kill(brokers[frozen], signal.SIGSTOP)
        proc.send_signal(sig)
        waiting_for_frozen = {frozen, parent(frozen), 0}
        others = set(brokers) - waiting_for_frozen
        wait_for(lambda: not set(watcher.running()) & (others | {"command"}), 20,
                 what=f"ranks {sorted(others)} and the command to exit")
        # the frozen leaf's parent and the root have not given up on it
        assert sorted(r for r in waiting_for_frozen if not watcher.alive(r)) == [], watcher.exited
        # a second signal (an impatient user) must not cut the shutdown under way short
        proc.send_signal(sig)
        os.kill(brokers[frozen], signal.SIGCONT)

        code = proc.wait(timeout=30)
        err = stderr.read_text(errors="replace")
        # the exit code says which signal stopped it (128 + signal number, as a shell reports it)
        assert code == 128 + sig, f"exit code {code} after {sig.name}; stderr: {err}"
        # nothing left running: every broker and the command
        assert watcher.wait(5), f"still running after fluxnode start exited: {watcher.running()}"
        # no broker needed SIGTERM or SIGKILL (fluxnode start names any broker it had to signal)
        assert "did not stop" not in err and "Traceback" not in err, err
        # no socket left: the local sockets are unlinked and nothing listens on the TBON ports
        assert not [str(p) for p in sockets.values() if p.exists()]
        assert not [p for p in ports if listening(p)]
    finally:
        if watcher.alive(frozen):
            watcher.kill(frozen, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for key in watcher.running():
            watcher.kill(key)
        watcher.close()
