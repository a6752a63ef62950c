"""The TBON port against peers that cost without contributing, and torpid checks turned
off. Real brokers, observed from outside (/proc: open descriptors; the broker logs)."""

from __future__ import annotations

import os
import signal
import socket
import time

from fluxnode.agent.broker.overlay import HANDSHAKE_TIMEOUT

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_peers_that_never_finish_the_curve_handshake_are_dropped(tmp_path):
    """100 TCP connections to rank 0's TBON port that never send a byte each held one of
    the broker's descriptors for good; now the handshake timeout drops them. (The admission
    guard would shed all but 16 of them at once: its caps are raised here, so the timeout
    alone is tested; test_descriptor_starvation.py tests the guard.)"""
    caps = {"tbon.pending-per-address": "1000", "tbon.pending-max": "1000"}
    with Instance(2, tmp_path, attrs=caps) as inst:
        pid = inst.pids[0]
        host, port = inst.tcp_uri(0).removeprefix("tcp://").rsplit(":", 1)
        before = open_fds(pid)
        silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(100)]
        try:
            wait_for(lambda: open_fds(pid) >= before + 90, 20,
                     what="the broker to accept the silent connections")
            t0 = time.monotonic()
            wait_for(lambda: open_fds(pid) <= before + 5, HANDSHAKE_TIMEOUT + 15,
                     what="the silent connections to be dropped")
            assert time.monotonic() - t0 < HANDSHAKE_TIMEOUT + 15
        finally:
            for s in silent:
                s.close()
        assert inst.rpc("broker.ping", nodeid=1)  # the tree is unharmed


def test_torpid_max_zero_turns_torpid_checks_off(tmp_path):
    """flux-config-tbon(5): torpid_max = 0 disables torpid checking. It used to make every
    child flap lost and back (80 times in 6 s): a keepalive every 20 ms, lost after 0 s."""
    with Instance(4, tmp_path, tbon={"torpid_min": "0.2s", "torpid_max": "0s"}) as inst:
        assert inst.online() == "0-3"
        pid = inst.pids[3]
        os.kill(pid, signal.SIGSTOP)  # silent, but its connection is still open
        try:
            t0 = time.monotonic()
            # a window of 10 keepalive periods: with checks on it would be lost in 1 or 2
            while time.monotonic() - t0 < 2.0:
                assert inst.child_status(1, 3) == "full"
                assert inst.online() == "0-3"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert "marking it lost" not in inst.log(1) + inst.log(0)
