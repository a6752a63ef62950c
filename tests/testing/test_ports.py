"""The test port allocator (fluxnode.testing.ports): each xdist worker its own block of ports
outside the kernel's ephemeral range, each port handed out once, ports in use skipped."""

from __future__ import annotations

import os
import socket

import pytest

from fluxnode.testing.ports import (
    FALLBACK_RANGE,
    PortAllocator,
    ephemeral_range,
    free_port,
    pool,
    probe,
    refused_port,
)

TWO_WORKERS = [{"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "2"} for i in (0, 1)]


def test_each_worker_hands_out_ports_of_its_own_block_only():
    gw0, gw1 = (PortAllocator.from_env(env, pid=os.getpid()) for env in TWO_WORKERS)
    assert set(gw0.block).isdisjoint(gw1.block)
    taken0 = [gw0.take() for _ in range(50)]
    taken1 = [gw1.take() for _ in range(50)]
    assert all(p in gw0.block for p in taken0) and all(p in gw1.block for p in taken1)
    assert set(taken0).isdisjoint(taken1)


def test_no_port_is_in_the_kernels_ephemeral_range():
    low, high = ephemeral_range()
    for env in TWO_WORKERS:
        block = PortAllocator.from_env(env, pid=os.getpid()).block
        assert block.stop <= low or block.start > high, (block, low, high)
    # what the kernel picks for bind(0) really is in the range the file names
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert low <= s.getsockname()[1] <= high


def test_a_range_leaving_little_room_below_gives_ports_above_it(tmp_path):
    (tmp_path / "range").write_text("20000\t30000\n")
    kernel = ephemeral_range(tmp_path / "range")
    assert kernel == (20000, 30000)
    assert pool(kernel) == range(30001, 65536)  # 35,535 ports above, 10,000 below
    assert ephemeral_range(tmp_path / "absent") == FALLBACK_RANGE
    with pytest.raises(RuntimeError, match="leaves fewer than"):
        pool((10500, 65000))


def test_a_port_held_by_a_listening_socket_is_skipped():
    allocator = PortAllocator(0, 1, pool(ephemeral_range()))
    block = allocator.block
    with socket.socket() as held:
        # the first port of the block this test can listen on: start the allocator there
        offset = next(i for i, p in enumerate(block) if probe(p) and probe(block[i + 1]))
        held.bind(("127.0.0.1", block[offset]))
        held.listen()
        assert not probe(block[offset])
        allocator = PortAllocator(0, 1, pool(ephemeral_range()), offset=offset)
        assert allocator.take() == block[offset + 1]


def test_a_port_is_never_handed_out_twice_and_a_used_up_block_says_so():
    # starting 30 ports before the end of the block: it wraps round to its start
    allocator = PortAllocator(0, 1, pool(ephemeral_range()), offset=-30)
    taken = [allocator.take() for _ in range(100)]
    assert len(set(taken)) == 100 and all(p in allocator.block for p in taken)
    start = allocator.block.start
    small = PortAllocator(0, 1, range(start, start + 5))
    taken = []
    with pytest.raises(RuntimeError, match="all 5 ports of this worker's block"):
        for _ in range(6):
            taken.append(small.take())
    assert len(taken) == len(set(taken)) <= 5


def test_free_port_in_this_process():
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    ours = PortAllocator.from_env(os.environ, pid=os.getpid()).block
    assert all(p in ours for p in ports)
    # another process of the same worker starts elsewhere in the block
    first = {PortAllocator.from_env(os.environ, pid=pid).take() for pid in (100, 101, 102)}
    assert len(first) == 3


def test_a_refused_port_refuses_and_cannot_be_taken_meanwhile():
    with refused_port() as port:
        with socket.socket() as c, pytest.raises(ConnectionRefusedError):
            c.connect(("127.0.0.1", port))
        assert not probe(port)
