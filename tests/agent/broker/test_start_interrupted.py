"""`fluxnode start` interrupted at any moment of its start-up, and two of them on one rundir.

Ctrl-C during start-up used to be swallowed (the KeyboardInterrupt met os.fork's hooks and
was "ignored"): the instance carried on, ran its command to the end and exited 0. Each
case here sends SIGINT at a stage seen from outside (the rundir's files) and checks, from
outside, the exit code (130) and that no process is left holding anything in the rundir
(/proc/*/fd scanned, independent of the launcher's own bookkeeping).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fluxnode.testing.waiting import wait_for

SIZE = 16


def start(rundir: Path, *command: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "fluxnode", "start", "--test-size", str(SIZE), "--rundir",
            str(rundir), "--quiet", "-S", "broker.modules=", "--", *(command or ("sleep", "300"))]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def holders(rundir: Path) -> list[str]:
    """Processes with a descriptor open on anything under `rundir`."""
    found = []
    prefix = str(rundir.resolve()) + "/"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith(prefix):
                    found.append(f"pid {proc.name}: {target}")
        except OSError:
            continue
    return found


def broker_logs(rundir: Path) -> int:
    return sum(1 for r in range(SIZE) if (rundir / str(r) / "broker.log").exists())


STAGES = {
    "prepared": lambda rundir: (rundir / "broker.toml").exists(),
    "forking": lambda rundir: broker_logs(rundir) >= 1,
    "half joined": lambda rundir: broker_logs(rundir) >= SIZE // 2,
    "running the command": lambda rundir: (rundir / "instance.json").exists(),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_sigint_at_any_stage_of_start_up_exits_130_leaving_nothing(tmp_path, stage):
    rundir = tmp_path / "run"
    proc = start(rundir)
    try:
        wait_for(lambda: STAGES[stage](rundir) or proc.poll() is not None, 60,
                 what=f"fluxnode start to reach {stage!r}", interval=0.002)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == 130, f"exit {code} after SIGINT at {stage!r}: {err}"
    assert "Exception ignored" not in err and "Traceback" not in err, err
    wait_for(lambda: not holders(rundir), 20, what=f"nothing left in the rundir ({stage})")


def test_sigterm_while_the_command_runs_exits_143(tmp_path):
    rundir = tmp_path / "run"
    proc = start(rundir)
    try:
        wait_for(lambda: (rundir / "instance.json").exists(), 60, what="the command to run")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_for(lambda: not holders(rundir), 20, what="nothing left in the rundir")


def test_a_second_start_on_a_rundir_in_use_is_refused_naming_the_first(tmp_path):
    rundir = tmp_path / "run"
    first = start(rundir)
    try:
        wait_for(lambda: (rundir / "instance.json").exists(), 60, what="the first instance")
        config = (rundir / "broker.toml").read_text()
        second = subprocess.run(
            [sys.executable, "-m", "fluxnode", "start", "--test-size", "2", "--rundir",
             str(rundir), "--quiet", "--", "true"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert f"rundir {rundir.resolve()} is in use by fluxnode start (pid {first.pid})" \
            in second.stderr, second.stderr
        assert (rundir / "broker.toml").read_text() == config  # nothing of the first touched
        env = {**os.environ, "FLUXNODE_URI": f"local://{rundir}/0/local"}
        ping = subprocess.run([sys.executable, "-m", "fluxnode", "ping", "--count", "1",
                               str(SIZE - 1)], env=env, capture_output=True, text=True,
                              timeout=60)
        assert ping.returncode == 0, ping.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    # once the first is gone, the rundir is free again
    again = subprocess.run(
        [sys.executable, "-m", "fluxnode", "start", "--test-size", "2", "--rundir", str(rundir),
         "--quiet", "-S", "broker.modules=", "--", "true"], capture_output=True, text=True,
        timeout=60)
    assert again.returncode == 0, again.stderr
