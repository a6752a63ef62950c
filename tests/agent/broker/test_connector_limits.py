"""The local connector under clients that would make a broker hold without end: messages
never finished, answers never read, descriptors exhausted. Each test runs a real lone
broker process and measures it from outside (/proc: resident memory, CPU time)."""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from fluxnode.agent.broker.client import Client
from fluxnode.agent.broker.connector import ConnectorLimits
from fluxnode.agent.broker.message import Message, StreamDecoder, encode_stream

from fluxnode.testing.waiting import wait_for

MiB = 1024 * 1024
LIMITS = ConnectorLimits()


@contextlib.contextmanager
def lone_broker(tmp_path: Path, nofile: int | None = None):
    """A broker without hosts (rank 0 of 1) serving `<tmp>/run/local`; `nofile` caps its
    descriptors (soft and hard, so the broker cannot raise it)."""
    cfg = tmp_path / "broker.toml"
    cfg.write_text("[bootstrap]\n")
    rundir = tmp_path / "run"
    log = tmp_path / "broker.log"

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    p = subprocess.Popen(
        [sys.executable, "-m", "fluxnode", "broker", "--config-path", str(cfg), "--hostname",
         "solo", "-S", f"rundir={rundir}", "-S", "broker.modules=", "-S",
         f"log-filename={log}", "-S", "log-stderr-level=0"],
        stdin=subprocess.DEVNULL, preexec_fn=limit)
    try:
        sock = rundir / "local"
        wait_for(sock.exists, timeout=30, what="the broker's local socket")
        yield p, str(sock), log
    finally:
        p.kill()
        p.wait()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def ping_ms(uri: str) -> float:
    with Client.connect(f"local://{uri}", timeout=10) as c:
        t0 = time.monotonic()
        c.rpc("broker.ping", {})
        return (time.monotonic() - t0) * 1000


def test_unfinished_messages_cannot_take_more_than_the_input_budget(tmp_path):
    """Six clients each send 48 MiB of a 60 MiB message and stop: without a budget the
    broker held all 288 MiB (32 -> 320 MiB); now the clients past the budget are refused
    and the broker's memory grows by about the budget at most."""
    with lone_broker(tmp_path) as (p, uri, _log):
        before = rss(p.pid)
        chunk = b"x" * MiB
        outcome: dict[int, str] = {}
        sent: dict[int, socket.socket] = {}

        def send(i: int) -> None:
            s = socket.socket(socket.AF_UNIX)
            s.connect(uri)
            s.settimeout(20)
            try:
                s.sendall(struct.pack("!I", 60 * MiB))
                for _ in range(48):
                    s.sendall(chunk)
                sent[i] = s
                outcome[i] = "held"
                # keep the connection open (its partial message held) until the test ends
                done.wait(60)
            except OSError as exc:
                outcome[i] = f"refused ({exc.__class__.__name__})"
            finally:
                s.close()

        done = threading.Event()
        threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(outcome) == 6, 60, what="every client sent or was refused")

            def still_held() -> list[int]:
                """The clients whose 48 MiB all left and to which the broker has said nothing:
                a client's last sends can fit the socket's buffer before the broker reads them
                and refuses it, so a finished send alone does not say held. None of them sent
                a whole message, so anything readable is the broker's refusal: its ENOBUFS
                answer, then the end of the stream (or a reset)."""
                return [i for i, s in list(sent.items())
                        if not select.select([s], [], [], 0)[0]]

            most = LIMITS.input_budget // (48 * MiB)
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: len(still_held()) <= most, 30,
                         what="the broker to refuse the clients past its input budget")
            held = len(still_held())
            grown = rss(p.pid) - before
            seen = f"{outcome}, still held {still_held()}, grew {grown / MiB:.0f} MiB"
            assert held <= most, seen
            assert grown < LIMITS.input_budget + 48 * MiB, seen
            latency = ping_ms(uri)
            assert latency < 1000, f"{latency:.0f} ms"  # and it serves everyone else
        finally:
            done.set()
            for t in threads:
                t.join()


def test_a_client_that_does_not_read_is_paused_and_loses_nothing(tmp_path):
    """3,000 pipelined 64 KiB pings without reading the answers: the broker stops reading
    that client once its answers pass `output_pause` (it blocks in its own send buffer)
    instead of buffering 188 MiB of answers; once the client reads, every answer comes."""
    count, pad = 3000, "y" * (64 * 1024)
    with lone_broker(tmp_path) as (p, uri, _log):
        before = rss(p.pid)
        s = socket.socket(socket.AF_UNIX)
        s.connect(uri)
        data = b"".join(
            encode_stream(Message.request("broker.ping", {"pad": pad}, matchtag=i + 1).to_frames())
            for i in range(count))
        s.settimeout(3)
        sent = 0
        try:
            while sent < len(data):
                sent += s.send(data[sent:sent + MiB])
        except TimeoutError:
            pass  # the broker stopped reading us: what the test wants to see
        assert sent < len(data), "the broker read every request without our reading an answer"
        grown = rss(p.pid) - before
        assert grown < 4 * LIMITS.output_pause + 16 * MiB, f"grew {grown / MiB:.0f} MiB"
        assert ping_ms(uri) < 1000  # another client is served meanwhile

        # now read: every request gets its answer, in order, none lost
        decoder, tags = StreamDecoder(), []
        s.settimeout(30)

        def writer() -> None:
            nonlocal sent
            while sent < len(data):
                sent += s.send(data[sent:sent + MiB])

        w = threading.Thread(target=writer)
        w.start()
        while len(tags) < count:
            chunk = s.recv(1 << 20)
            assert chunk, f"disconnected after {len(tags)} answers"
            decoder.feed(chunk)
            while (frames := decoder.next()) is not None:
                tags.append(Message.from_frames(frames).matchtag)
        w.join()
        s.close()
        assert tags == list(range(1, count + 1))


def test_running_out_of_descriptors_backs_off_instead_of_spinning(tmp_path):
    """At the descriptor limit the broker used to busy-loop on accept (100% CPU, ~1 MB/s
    of log). Now it stops accepting for a backoff and logs once per interval; when the
    flood ends it accepts again."""
    with lone_broker(tmp_path, nofile=64) as (p, uri, log):
        flood = []
        try:
            for _ in range(200):  # more than the broker can accept; the rest wait in the backlog
                s = socket.socket(socket.AF_UNIX)
                s.connect(uri)
                flood.append(s)
            wait_for(lambda: "Too many open files" in log.read_text(), 20,
                     what="the broker to run out of descriptors")
            cpu0, t0 = cpu_seconds(p.pid), time.monotonic()
            wait_for(lambda: time.monotonic() - t0 >= 2.0, 5, what="2 s to pass", interval=0.1)
            busy = (cpu_seconds(p.pid) - cpu0) / (time.monotonic() - t0)
            assert busy < 0.3, f"the broker used {busy:.0%} of a CPU while out of descriptors"
            lines = [x for x in log.read_text().splitlines() if "Too many open files" in x]
            assert len(lines) <= 2, lines
        finally:
            for s in flood:
                s.close()
        # descriptors free again: a new client gets in
        wait_for(lambda: ping_ms(uri) < 5000, 30, what="a client to be served again")
        assert p.poll() is None


def test_limits_defaults_fit_one_largest_message():
    """A message as large as the protocol allows must still be receivable and answerable."""
    assert LIMITS.input_budget >= LIMITS.max_message
    assert LIMITS.output_limit >= LIMITS.max_message


def test_the_broker_raises_its_soft_descriptor_limit_to_the_hard_one(tmp_path):
    cfg = tmp_path / "broker.toml"
    cfg.write_text("[bootstrap]\n")
    rundir = tmp_path / "run"

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    p = subprocess.Popen(
        [sys.executable, "-m", "fluxnode", "broker", "--config-path", str(cfg), "--hostname",
         "solo", "-S", f"rundir={rundir}", "-S", "broker.modules="],
        stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=low_soft_limit)
    try:
        wait_for((rundir / "local").exists, timeout=30, what="the broker's local socket")
        limits = Path(f"/proc/{p.pid}/limits").read_text().splitlines()
        line = next(x for x in limits if x.startswith("Max open files"))
        assert line.split()[3:5] == ["4096", "4096"], line
    finally:
        p.kill()
        p.wait()
