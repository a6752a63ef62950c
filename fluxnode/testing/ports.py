"""Ports for the processes tests start, that no other test and no kernel choice can take.

    from fluxnode.testing.ports import free_port, refused_port

    port = free_port()            # a child process will listen on it
    with refused_port() as port:  # nobody listens on it while the block runs
        ...

The race this replaces. The usual way to find a free port (bind port 0, read the number the
kernel chose, close the socket, give the number to a process that binds it later) leaves the
port unowned between the close and the child's bind, and the kernel hands out exactly those
ports again: port 0 and every outgoing connect() without a bind draw from
net.ipv4.ip_local_port_range (32768-60999 by default), so another xdist worker's bind(0), or
any connection either worker opens to a broker, the API emulator or sshd, can take it first.
The child then exits "Address already in use" (fresh-clone CI failed so; `fluxnode binder`
and sshd were started again on other ports by hand-written retry loops).

Where the ports come from instead. The kernel never picks a port outside its range on its own
(autobinding for bind(0) and connect() stays inside it), so the ports handed out here lie
BELOW the range's low bound, from `POOL_FLOOR` up (above the ports services usually listen
on). That pool is cut into one block per xdist worker (PYTEST_XDIST_WORKER gw0, gw1, ... of
PYTEST_XDIST_WORKER_COUNT; one block when tests run in one process), so two workers never
hand out the same port. Within a block a process counts up from an offset drawn from its
pid, and never hands a port twice (it says so when its block is used up rather than start
over); the offset keeps a forked child, or a second pytest session on the same machine (whose
gw0 gets the same block), from walking the same ports in the same order. A port that cannot
be bound right now (something else on the machine listens there, or it is in TIME_WAIT) is
skipped: the probe binds without SO_REUSEADDR, stricter than the brokers and aiohttp that
bind it afterwards.

When the range's file is absent (not Linux) the range is taken to be IANA's dynamic ports,
49152-65535, which BSD, macOS and Windows use. When the room below the range is too small (a
machine that gave the kernel almost everything), the room above its high bound is used.

A spawned process that can report the port it bound itself (bind port 0, then print or write
the number: `fluxnode agent --health-port 0` writes run/agent.health, `fluxnode binder
--http-port 0 --webhook-port 0` logs both) needs none of this, and is better still: there
is no window at all. So does a server that can take an accepted socket: the tests' sshd runs
in inetd mode (`sshd -i`) behind a port-0 listener of the test's own (tests/support/sshd.py).
`free_port` is for a port that must be known before the process starts
(a broker's TBON port written into broker.toml for every rank).

`refused_port` is a different need: a port where nothing listens, to see a connection refused.
It holds a socket bound there without listen() for the whole block, so connecting is refused
and no other process can bind the port meanwhile; the kernel's own bind(0) chooses it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
FALLBACK_RANGE = (49152, 65535)  # IANA's dynamic ports: the BSDs', macOS's and Windows' range
POOL_FLOOR = 10000  # below: ports services usually listen on (5432, 6379, 8080, ...)
MIN_POOL = 1024  # less room than this on either side of the range: refuse, saying why
HOST = "127.0.0.1"


def ephemeral_range(path: Path = RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for bind(0) and connect(), inclusive; `FALLBACK_RANGE` when `path`
    cannot be read."""
    try:
        low, high = (int(w) for w in path.read_text().split())
    except (OSError, ValueError):
        return FALLBACK_RANGE
    return low, high


def pool(kernel_range: tuple[int, int]) -> range:
    """The ports outside `kernel_range` to hand out: below its low bound (from `POOL_FLOOR`),
    or above its high bound when there is more room there."""
    low, high = kernel_range
    below, above = range(POOL_FLOOR, low), range(high + 1, 65536)
    chosen = below if len(below) >= len(above) else above
    if len(chosen) < MIN_POOL:
        raise RuntimeError(f"the kernel's port range {low}-{high} leaves fewer than {MIN_POOL} "
                           f"ports outside it (above {POOL_FLOOR}) for tests to listen on")
    return chosen


def probe(port: int) -> bool:
    """Whether `port` can be bound on the loopback address right now."""
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Hands out the ports of worker `worker`'s block (of `workers`) in `pool`, each once,
    starting `offset` ports into the block and skipping ports `probe` finds taken."""

    def __init__(self, worker: int, workers: int, pool: range, offset: int = 0) -> None:
        workers = max(workers, worker + 1)
        size = len(pool) // workers
        if size == 0:
            raise RuntimeError(f"{len(pool)} ports cannot be split among {workers} workers")
        self.block = range(pool.start + worker * size, pool.start + (worker + 1) * size)
        self._offset = offset % size
        self._next = 0  # how many ports of the block have been looked at
        self._lock = threading.Lock()

    def take(self) -> int:
        """The next port of the block nothing is bound to; never one handed out before."""
        with self._lock:
            while self._next < len(self.block):
                port = self.block[(self._offset + self._next) % len(self.block)]
                self._next += 1
                if probe(port):
                    return port
        raise RuntimeError(f"all {len(self.block)} ports of this worker's block "
                           f"{self.block.start}-{self.block.stop - 1} have been looked at")

    @classmethod
    def from_env(cls, env: Mapping[str, str], pid: int,
                 kernel_range: tuple[int, int] | None = None) -> PortAllocator:
        """The allocator of the process `pid` with environment `env` (its xdist worker)."""
        worker = env.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        workers = env.get("PYTEST_XDIST_WORKER_COUNT", "1")
        # Knuth's multiplicative hash spreads neighbouring pids over the whole block
        return cls(int(worker) if worker.isdigit() else 0,
                   int(workers) if workers.isdigit() else 1,
                   pool(kernel_range or ephemeral_range()), offset=pid * 2654435761)


_shared: tuple[int, PortAllocator] | None = None  # (the pid it was made for, it)
_shared_lock = threading.Lock()


def free_port() -> int:
    """A loopback port for a process the caller starts to listen on: outside the kernel's
    ephemeral range, in this xdist worker's own block, never handed out before in this
    process, nothing bound to it now."""
    global _shared
    pid = os.getpid()
    with _shared_lock:
        if _shared is None or _shared[0] != pid:  # first call, or a forked child's first
            _shared = (pid, PortAllocator.from_env(os.environ, pid))
        allocator = _shared[1]
    return allocator.take()


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port bound but not listening for the block's duration: a connection to it
    is refused, and no other process can take it meanwhile."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        yield s.getsockname()[1]
