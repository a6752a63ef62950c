"""Issue 32: a peer holding hundreds of raw TCP connections to rank 0's TBON port must not
starve it of descriptors. Rank 0's limit is lowered from outside (prlimit) to 128; 300
connections from loopback never send a byte. Before the admission guard, libzmq accepted
until EMFILE and then retried accept at once: 99% CPU and no local client served for as
long as they were held. Everything is observed from outside the broker: CPU ticks and
descriptors in /proc, what the hostile sockets read, the broker log."""

from __future__ import annotations

import os
import resource
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fluxnode.agent.broker.client import Client

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

LIMIT = 128
HOSTILE = 300


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@contextmanager
def hostile(host: str, port: int, count: int = HOSTILE) -> Iterator[list[socket.socket]]:
    """`count` TCP connections from loopback that never send, held until the block ends."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, port))  # EINPROGRESS: the kernel finishes it (backlog)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def cut_off(socks: list[socket.socket]) -> int:
    """How many of `socks` the broker has closed (they read end-of-file or a reset)."""
    readable, _, _ = select.select(socks, [], [], 0)
    n = 0
    for s in readable:
        try:
            n += s.recv(1 << 16) == b""
        except OSError:
            n += 1
    return n


def ping_ok(uri: str) -> bool:
    with Client.connect(uri, timeout=1.0) as c:
        return bool(c.rpc("broker.ping", {}))


def test_held_connections_neither_spin_rank_0_nor_keep_out_clients_and_children(tmp_path):
    # a short torpid_max: the killed child is seen lost in a second or two
    with Instance(3, tmp_path, tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        pid = inst.pids[0]
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (LIMIT, LIMIT))
        host, port = inst.tcp_uri(0).removeprefix("tcp://").rsplit(":", 1)
        closed = 0
        with hostile(host, int(port)) as socks:
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            wait_for(lambda: time.monotonic() - t0 >= 3.0, 10, what="a 3 s window", interval=0.1)
            busy = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
            assert busy < 0.10, f"rank 0 used {busy:.0%} of a CPU with {HOSTILE} connections held"

            t1 = time.monotonic()
            wait_for(lambda: ping_ok(inst.uri), 1.0, what="a local client served within 1 s")
            assert time.monotonic() - t1 < 1.5

            # what the broker did: it cut most of them loose (not just stopped accepting),
            # said so in its log, and stayed clear of its limit
            def count() -> int:
                nonlocal closed
                closed += cut_off(socks)
                return closed >= HOSTILE - 100
            wait_for(count, 10, what="the broker to shed the held connections")
            assert "TBON connection(s) that had not completed the CURVE handshake" in inst.log(0)
            assert len(os.listdir(f"/proc/{pid}/fd")) < LIMIT

            # a child killed and restarted while a fresh batch is held rejoins
            inst.kill(1)
            wait_for(lambda: inst.child_status(0, 1) != "full", 30, what="rank 1 to be lost")
            with hostile(host, int(port)):
                inst.restart(1)
                wait_for(lambda: inst.child_status(0, 1) == "full", 30,
                         what="the restarted rank 1 to rejoin")
                assert inst.online() == "0-2"
                assert ping_ok(inst.uri)
