"""Admission on the TBON port: peers that have not proved themselves cannot starve the broker.

libzmq accepts on the ROUTER's listening socket by itself, greedily, and has no limit on
connections: at EMFILE its accept loop retries at once (tcp_listener.cpp, "TODO: handle
EMFILE"), so a peer that opens a few hundred raw TCP connections and sends nothing used to
keep the broker's I/O thread at 100% CPU and leave no descriptor for local clients, until
the CURVE handshake timeout freed them, only for the next batch to take their place.

We cannot put a descriptor back into libzmq's hands (the reserved-descriptor trick of
event loops needs the accept call), nor take over its accept without proxying every TBON
byte through Python. What we can do is watch (socket monitor: ACCEPTED with the new
descriptor, DISCONNECTED), know who proved itself (a message's source descriptor,
ZMQ_SRCFD, can only exist after the CURVE handshake and ZAP), and cut the others loose
with shutdown(2): libzmq's engine then reads end-of-file and closes the descriptor
itself, so no descriptor is ever closed under libzmq's feet. Before a shutdown the
descriptor's peer address is compared with the one recorded at accept, so a number the
kernel has meanwhile given to another connection is left alone.

The rules, applied on every accept, oldest unproved connection shed first:

* reserve: the top `fd_reserve` descriptors under the soft RLIMIT_NOFILE are the
  broker's own (local clients, children's reconnects, files). Linux hands out the lowest
  free descriptor, so an accepted descriptor numbered in the reserve means the table is
  that full: one unproved connection is shed per such accept, until accepts land below;
* per address: at most `pending_per_address` unproved connections from one IP;
* in total: at most `pending_max` unproved connections.

A legitimate peer completes its handshake in milliseconds and sends at once (a child its
hello, a client its request); it is the newest unproved connection when it arrives, so
shedding the oldest first spares it. Shed connections are logged once per `LOG_EVERY`
seconds with their count.
"""

from __future__ import annotations

import _socket  # not `socket`: see connector.py
import resource
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass

from fluxnode.agent.broker import zmq_core as zmq
from fluxnode.agent.broker.broker_log import BrokerLog

LOG_EVERY = 10.0  # seconds between two "shed" log lines
MONITOR_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


@dataclass(frozen=True)
class GuardLimits:
    """Set by the broker attributes tbon.pending-max, tbon.pending-per-address and
    tbon.fd-reserve."""

    pending_max: int = 128
    pending_per_address: int = 16
    fd_reserve: int = 32


@dataclass
class Pending:
    """A TBON connection that has not completed its CURVE handshake yet."""

    fd: int
    peer: tuple[str, int]
    since: float


def peer_of(fd: int) -> tuple[str, int] | None:
    """The TCP peer (address, port) of descriptor `fd`, or None when it is not a connected
    TCP socket (any more). The descriptor stays open either way."""
    try:
        sock = _socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family not in (_socket.AF_INET, _socket.AF_INET6):
            return None
        addr = sock.getpeername()
        return (addr[0], addr[1])
    except OSError:
        return None
    finally:
        sock.detach()


def shut(fd: int) -> None:
    """Shut a connection down without closing its descriptor (libzmq owns and closes it)."""
    sock = _socket.socket(fileno=fd)
    try:
        sock.shutdown(_socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()


class AdmissionGuard:
    """Tracks the ROUTER's connections that have not yet sent a message; sheds the oldest."""

    def __init__(self, log: BrokerLog, limits: GuardLimits | None = None) -> None:
        self.log = log
        self.limits = limits or GuardLimits()
        self.pending: OrderedDict[int, Pending] = OrderedDict()  # fd -> entry, oldest first
        self._by_address: dict[str, OrderedDict[int, None]] = {}
        self.shed_total = 0
        self._shed_since_log = 0
        self._logged = -LOG_EVERY

    def ceiling(self) -> int:
        """The first descriptor number of the reserve (read each time: a broker's limit may
        be changed from outside, e.g. prlimit(1))."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1 << 30
        return max(1, soft - self.limits.fd_reserve)

    # -- events ----------------------------------------------------------------------------
    def on_monitor(self, frames: list[bytes]) -> None:
        """A raw socket-monitor message of the ROUTER (ACCEPTED or DISCONNECTED)."""
        if len(frames[0]) < 6:
            return
        event, value = struct.unpack("=hi", frames[0][:6])
        if event == zmq.EVENT_ACCEPTED:
            self.accepted(value)
        elif event == zmq.EVENT_DISCONNECTED:
            self.forget(value)

    def accepted(self, fd: int) -> None:
        self.forget(fd)  # a number reused after a close whose event we have not seen
        peer = peer_of(fd)
        if peer is None:
            return
        entry = Pending(fd, peer, time.monotonic())
        self.pending[fd] = entry
        self._by_address.setdefault(peer[0], OrderedDict())[fd] = None
        same = self._by_address[peer[0]]
        while len(same) > self.limits.pending_per_address:
            self._shed(next(iter(same)))
        while len(self.pending) > self.limits.pending_max:
            self._shed(next(iter(self.pending)))
        if fd >= self.ceiling() and self.pending:
            self._shed(next(iter(self.pending)))
        self.flush_log()

    def proved(self, fd: int) -> None:
        """A message came from `fd`: its peer passed the CURVE handshake and ZAP."""
        self.forget(fd)

    def forget(self, fd: int) -> None:
        entry = self.pending.pop(fd, None)
        if entry is None:
            return
        same = self._by_address.get(entry.peer[0])
        if same is not None:
            same.pop(fd, None)
            if not same:
                del self._by_address[entry.peer[0]]

    # -- shedding --------------------------------------------------------------------------
    def _shed(self, fd: int) -> None:
        entry = self.pending[fd]
        self.forget(fd)
        if peer_of(fd) != entry.peer:
            return  # closed already, and the number given to another connection
        shut(fd)
        self.shed_total += 1
        self._shed_since_log += 1

    def flush_log(self) -> None:
        """Log the connections shed since the last line, at most once per LOG_EVERY."""
        now = time.monotonic()
        if self._shed_since_log and now - self._logged >= LOG_EVERY:
            self.log.warning(
                "overlay: shed %d TBON connection(s) that had not completed the CURVE "
                "handshake (%d since start; %d unproved now, at most %d per address, %d in "
                "all, descriptors from %d reserved)",
                self._shed_since_log, self.shed_total, len(self.pending),
                self.limits.pending_per_address, self.limits.pending_max, self.ceiling())
            self._logged = now
            self._shed_since_log = 0
