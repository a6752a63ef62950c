"""`fluxnode exec` against real brokers: output, exit codes, signals, stdin, flow control, the
[exec] switch and the fan-out down the tree.

The 8-broker kary:2 tree is 0 -> 1,2; 1 -> 3,4; 2 -> 5,6; 3 -> 7. Processes learn their rank
from $FLUXNODE_URI (each broker sets it to its own socket, `<rundir>/<rank>/local`), so the
expected output is computed here from the rank, not read back from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import seeds

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

FLUXNODE = [sys.executable, "-m", "fluxnode"]
RANK = 'r=$(basename "$(dirname "${FLUXNODE_URI#local://}")")'
WINDOW = 1 << 20  # exec_service.DEFAULT_WINDOW, the client's window too
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(8, tmp_path_factory.mktemp("exec8")) as inst:
        yield inst


def exec_argv(*args: str) -> list[str]:
    return [*FLUXNODE, "exec", *args]


def run(inst: Instance, *args: str, input: bytes | None = None, env: dict | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(exec_argv(*args), input=input, capture_output=True, timeout=timeout,
                          env={**os.environ, "FLUXNODE_URI": inst.uri, **(env or {})},
                          stdin=None if input is not None else subprocess.DEVNULL)


def stats(inst: Instance, rank: int) -> dict:
    return inst.rpc("rexec.stats", nodeid=rank)


def labeled(out: bytes) -> dict[int, bytes]:
    """Per-rank streams rebuilt from --label-io output (every line starts `RANK: `)."""
    streams: dict[int, bytearray] = {}
    for line in out.split(b"\n")[:-1]:
        label, sep, rest = line.partition(b": ")
        assert sep and label.isdigit(), line[:80]
        streams.setdefault(int(label), bytearray()).extend(rest + b"\n")
    return {r: bytes(s) for r, s in streams.items()}


def test_output_in_order_per_rank_with_labels(inst):
    done = run(inst, "-l", "-r", "all", "sh", "-c", f'{RANK}; i=1; while [ $i -le 300 ]; do '
               'echo "$r line $i"; i=$((i+1)); done')
    assert done.returncode == 0, done.stderr
    streams = labeled(done.stdout)
    assert sorted(streams) == list(range(8))
    for r, text in streams.items():
        assert text.decode() == "".join(f"{r} line {i}\n" for i in range(1, 301))


def test_largest_exit_code_wins_and_signals_count_128_plus(inst):
    done = run(inst, "sh", "-c", f"{RANK}; exit $r")
    assert done.returncode == 7
    assert "7: Exit 7" in done.stderr.decode()
    done = run(inst, "-r", "1-4", "sh", "-c", f'{RANK}; [ "$r" = 3 ] && kill -TERM $$; exit 1')
    assert done.returncode == 128 + signal.SIGTERM
    err = done.stderr.decode()
    assert "3: Terminated" in err and "[1-2,4]: Exit 1" in err


def test_command_not_found_and_bad_directory(inst):
    done = run(inst, "-r", "2", "no-such-command-here")
    assert done.returncode == 127
    assert "Error: rank 2 (node2): no-such-command-here: No such file or directory" in \
        done.stderr.decode()
    done = run(inst, "-r", "5", "-d", "/no/such/dir", "true")
    assert done.returncode == 127 and "/no/such/dir" in done.stderr.decode()


def test_dir_env_and_the_callers_environment(inst, tmp_path):
    done = run(inst, "-r", "2,6", "-l", "-d", str(tmp_path), "-e", "GREETING=hi there",
               "sh", "-c", 'echo "$GREETING/$INHERITED"; pwd', env={"INHERITED": "yes"})
    assert done.returncode == 0, done.stderr
    assert labeled(done.stdout) == {r: f"hi there/yes\n{tmp_path}\n".encode() for r in (2, 6)}
    done = run(inst, "-e", "NOEQUALS", "true")
    assert done.returncode == 2 and "expected VAR=VAL" in done.stderr.decode()


def test_rank_and_exclude_sets(inst):
    done = run(inst, "-l", "-r", "0-5", "-x", "1,3,99", "sh", "-c", f"{RANK}; echo $r")
    assert done.returncode == 0
    assert labeled(done.stdout) == {r: f"{r}\n".encode() for r in (0, 2, 4, 5)}
    done = run(inst, "-r", "3,9", "true")
    assert done.returncode == 68 and "no such rank 9" in done.stderr.decode()
    done = run(inst, "-r", "2-x", "true")
    assert done.returncode == 1 and "--rank '2-x'" in done.stderr.decode()


def test_stdin_goes_to_every_process_and_noinput_gives_none(inst):
    seed = seeds.choose("test_stdin_goes_to_every_process_and_noinput_gives_none")
    data = random.Random(seed).randbytes(300_000)
    done = run(inst, "-l", "-r", "1,5,7", "sha256sum", input=data)
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(data).hexdigest()
    assert labeled(done.stdout) == {r: f"{digest}  -\n".encode() for r in (1, 5, 7)}
    # -n: stdin stays open here, yet cat sees end of file at once
    p = subprocess.Popen(exec_argv("-n", "-r", "all", "cat"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env={**os.environ, "FLUXNODE_URI": inst.uri})
    try:
        out = p.stdout.read()
        assert p.wait(timeout=30) == 0 and out == b""
    finally:
        p.stdin.close()
        p.kill()


def test_large_output_arrives_byte_for_byte(inst):
    seed = seeds.choose("test_large_output_arrives_byte_for_byte")
    size = 3 << 20
    script = (f"import os,random,sys; r=int(os.path.basename(os.path.dirname("
              f"os.environ['FLUXNODE_URI'][8:]))); "
              f"sys.stdout.buffer.write(random.Random({seed}+r).randbytes({size})+b'\\n')")
    done = run(inst, "-l", "-r", "0,3,7", sys.executable, "-c", script, timeout=120)
    assert done.returncode == 0, done.stderr
    streams = labeled(done.stdout)
    assert sorted(streams) == [0, 3, 7]
    for r, got in streams.items():
        want = random.Random(seed + r).randbytes(size) + b"\n"
        assert len(got) == len(want) and got == want, f"rank {r} differs"


def test_a_slow_reader_bounds_what_interior_brokers_hold(inst, tmp_path):
    """Rank 7 writes 32 MiB while nobody reads: its output stops at the window of every edge
    (0 <- 1 <- 3 <- 7) and its process blocks, instead of piling up in ranks 0, 1 and 3."""
    size = 32 << 20
    script = f"import sys; sys.stdout.buffer.write(b'x' * {size})"
    for rank in (0, 1, 3, 7):  # earlier tests held more (one window per process and subtree)
        inst.rpc("rexec.stats", {"reset": True}, nodeid=rank)
    p = subprocess.Popen(exec_argv("-n", "-r", "7", sys.executable, "-c", script),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "FLUXNODE_URI": inst.uri})
    try:
        # The leaf's own queue fills to its window: nothing above it takes more.
        wait_for(lambda: stats(inst, 7)["buffered"] >= WINDOW - CHUNK, timeout=60,
                 what="rank 7 to hold a full window")
        assert p.poll() is None
        # One window per edge plus one event, whatever rank 7 writes (32 windows here).
        for rank in (0, 1, 3, 7):
            held = stats(inst, rank)
            assert held["buffered_max"] <= WINDOW + 2 * CHUNK, (rank, held)
        out = p.stdout.read()
        assert p.wait(timeout=60) == 0, p.stderr.read()
        assert out == b"x" * size
    finally:
        p.kill()


def _start(inst: Instance, *args: str, stderr: Path) -> subprocess.Popen:
    return subprocess.Popen(exec_argv(*args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=open(stderr, "wb"),
                            env={**os.environ, "FLUXNODE_URI": inst.uri})


def _ready(p: subprocess.Popen, count: int) -> None:
    for _ in range(count):
        assert p.stdout.readline().endswith(b"ready\n")


def test_sigint_and_sigterm_reach_every_process(inst, tmp_path):
    err = tmp_path / "err"
    p = _start(inst, "-r", "all", "sh", "-c", "echo ready; exec sleep 300", stderr=err)
    try:
        _ready(p, 8)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 128 + signal.SIGINT
        assert "[0-7]: Interrupt" in err.read_text()
    finally:
        p.kill()
    p = _start(inst, "-r", "all", "sh", "-c",
               'trap "exit 3" TERM; echo ready; while :; do sleep 0.1; done', stderr=err)
    try:
        _ready(p, 8)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 3
    finally:
        p.kill()


def test_a_second_ctrl_c_kills_processes_that_ignore_the_first(inst, tmp_path):
    err = tmp_path / "err"
    p = _start(inst, "-v", "-r", "all", "sh", "-c", "trap '' INT; echo ready; exec sleep 300",
               stderr=err)
    try:
        _ready(p, 8)
        pids = [int(m) for m in re.findall(r"started, pid (\d+)", err.read_text())]
        assert len(pids) == 8
        p.send_signal(signal.SIGINT)
        wait_for(lambda: "one more time" in err.read_text(), what="the first interrupt")
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 128 + signal.SIGKILL
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists(), pid
    finally:
        p.kill()


def test_exec_switch_refuses_with_eperm(inst):
    config = Path(inst.config_path)
    text = config.read_text()
    assert "[exec]\nallow = true" in text
    try:
        config.write_text(text.replace("[exec]\nallow = true", "[exec]\nallow = false"))
        inst.rpc("config.reload", nodeid=3)
        done = run(inst, "-r", "2-4", "true")
        assert done.returncode == 126
        assert re.search(r"Error: rank 3 \(node3\): true: exec is disabled on node3 \(rank 3\): "
                         r"\[exec\] allow = false in .*broker.toml", done.stderr.decode())
        inst.rpc("config.reload", nodeid=0)
        done = run(inst, "-r", "1", "true")
        assert done.returncode == 1
        assert "rexec.exec: exec is disabled on node0 (rank 0): [exec] allow = false" in \
            done.stderr.decode()
    finally:
        config.write_text(text)
        inst.rpc("config.reload", nodeid=0)
        inst.rpc("config.reload", nodeid=3)
    assert run(inst, "-r", "3", "true").returncode == 0


def test_the_leader_sends_one_fanout_per_child_subtree(inst):
    before = {r: stats(inst, r) for r in range(8)}
    assert run(inst, "true").returncode == 0
    after = {r: stats(inst, r) for r in range(8)}

    def delta(r: int, kind: str, key: str) -> int:
        return after[r][kind].get(key, 0) - before[r][kind].get(key, 0)

    assert delta(0, "sent", "rexec.fanout") == 2  # to ranks 1 and 2, not one per rank
    assert [delta(r, "received", "rexec.fanout") for r in range(8)] == [0] + [1] * 7
    assert [delta(r, "sent", "rexec.fanout") for r in range(8)] == [2, 2, 2, 1, 0, 0, 0, 0]


def test_over_curve_tcp(inst):
    done = subprocess.run(
        exec_argv("--uri", inst.tcp_uri(0), "--curve-cert", inst.cert_path, "-l", "-r", "4",
                  "echo", "hi"), capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"4: hi\n"


def test_lost_and_unreachable_ranks_are_named(tmp_path):
    """kary:2 on 4: 0 -> 1,2; 1 -> 3."""
    with Instance(4, tmp_path, tbon={"torpid_max": "2s"}) as inst:
        err = tmp_path / "err"
        # lost while running: rank 3 dies under a running `cat`
        p = subprocess.Popen(exec_argv("-r", "all", "cat"), stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=open(err, "wb"),
                             env={**os.environ, "FLUXNODE_URI": inst.uri})
        try:
            wait_for(lambda: stats(inst, 3)["sessions"] == 1, what="rank 3 to run cat")
            inst.kill(3)
            wait_for(lambda: "rank 3 (node3)" in err.read_text(), timeout=30,
                     what="rank 3 reported lost")
            p.stdin.close()
            assert p.wait(timeout=30) == 68
            assert re.search(r"Error: rank 3 \(node3\): cat: lost: node3 \(rank 3\) is lost",
                             err.read_text())
        finally:
            p.kill()
        # unreachable subtree: rank 1 gone, so 1 and 3 cannot be reached
        inst.kill(1)
        wait_for(lambda: inst.child_status(0, 1) == "lost", timeout=30, what="rank 1 lost")
        done = run(inst, "-l", "-r", "all", "sh", "-c", f"{RANK}; echo $r")
        assert done.returncode == 68
        assert labeled(done.stdout) == {0: b"0\n", 2: b"2\n"}
        stderr = done.stderr.decode()
        for r in (1, 3):
            assert f"Error: rank {r} (node{r}): sh: unreachable: node1 (rank 1) is lost" in stderr


def _pids(err: Path, count: int) -> list[int]:
    wait_for(lambda: len(re.findall(r"started, pid (\d+)", err.read_text())) == count,
             what=f"{count} processes started")
    return [int(m) for m in re.findall(r"started, pid (\d+)", err.read_text())]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_client_killed_mid_run_takes_its_processes_with_it(inst, tmp_path):
    """The client talks to rank 3's socket and dies with kill -9; nobody reads the output any
    more, so every process on every rank is killed (none runs on for 300 s)."""
    err = tmp_path / "err"
    p = subprocess.Popen(exec_argv("-v", "-r", "all", "sh", "-c", "echo ready; exec sleep 300"),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=open(err, "wb"),
                         env={**os.environ, "FLUXNODE_URI": inst.broker_uri(3)})
    try:
        _ready(p, 8)
        pids = _pids(err, 8)
        p.kill()
        p.wait(timeout=10)
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=30,
                 what="every process of the killed client to be killed")
        wait_for(lambda: all(stats(inst, r)["sessions"] == 0 for r in range(8)),
                 what="every broker to drop the session")
    finally:
        p.kill()
        for pid in pids if "pids" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_processes_die_when_their_parent_broker_restarts(tmp_path):
    """kary:1 on 3 is a chain 0 -> 1 -> 2. Rank 0 dies with kill -9 while ranks 1 and 2 run a
    command for it; when rank 0 comes back, rank 1 joins it again and nothing above waits for
    that command: both processes are killed rather than left running with nobody to read
    them."""
    with Instance(3, tmp_path, topo="kary:1", tbon={"torpid_max": "2s"}) as inst:
        err = tmp_path / "err"
        p = subprocess.Popen(exec_argv("-v", "-r", "1-2", "sh", "-c",
                                       "echo ready; exec sleep 300"),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=open(err, "wb"),
                             env={**os.environ, "FLUXNODE_URI": inst.uri})
        pids: list[int] = []
        try:
            _ready(p, 2)
            pids = _pids(err, 2)
            inst.kill(0)
            p.wait(timeout=30)  # its broker is gone
            assert all(_alive(pid) for pid in pids)  # rank 1 does not know yet
            inst.restart(0)
            wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=60,
                     what="the processes of a restarted parent's command to be killed")
            wait_for(lambda: stats(inst, 1)["sessions"] == 0 and stats(inst, 2)["sessions"] == 0,
                     what="ranks 1 and 2 to drop the session")
        finally:
            p.kill()
            for pid in pids:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
