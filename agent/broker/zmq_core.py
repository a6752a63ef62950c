"""libzmq through pyzmq's Cython backend alone, without loading pyzmq's sugar (issue 32).

A broker uses a handful of libzmq calls: contexts, sockets, options, send/recv of frames,
zmq_poll, a socket monitor, CURVE keys. They all live in pyzmq's compiled backend
(`zmq.backend.cython._zmq`), but `import zmq` first runs the package's `__init__`, which
loads the sugar layer and what it needs (pickle, random, json, platform, struct, bisect,
asyncio-free but still 23 modules): about 1.1 MiB of a lone worker's RSS that a broker
never calls (measured: interpreter + backend 15.0 MiB, + `import zmq` 16.2-16.4 MiB).

So when no one has imported `zmq` yet, this module registers the packages `zmq`,
`zmq.backend` and `zmq.backend.cython` as modules made from their real specs but not yet
executed (`deferred.DeferredModules`), and imports below them only what the backend itself
needs (`zmq.constants`, `zmq.error`, the extension). The extension reads one attribute of
the `zmq` package on our paths, `COPY_THRESHOLD` (a new Frame's default), which is set to
pyzmq's value. The first time any code asks one of the deferred packages for a name it
does not have yet (someone else's `import zmq; zmq.Context()`, or the extension on a path
we do not take), the three package `__init__`s run in place, in pyzmq's own order, and the
process has the whole of pyzmq as if it had been imported first. If `zmq` is already
imported (the CLI, a test), its backend is used as is.

Exported: `Context`, `Socket`, `Frame`, `zmq_poll`, `curve_keypair`, `ZMQError`, `Again`,
`z85`, the constants the broker uses as plain ints, and `monitor_socket`.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from fluxnode.agent.broker.deferred import DeferredModules

_DEFERRED = ("zmq", "zmq.backend", "zmq.backend.cython")  # in import order
_COPY_THRESHOLD = 65536  # zmq.COPY_THRESHOLD, pyzmq's `__init__` sets the same


def _backend() -> ModuleType:
    """The Cython backend module, importing as little of pyzmq as it allows."""
    if "zmq" not in sys.modules:
        deferred: DeferredModules | None = None
        try:
            deferred = DeferredModules(_DEFERRED)
            zmq = sys.modules["zmq"]
            zmq.COPY_THRESHOLD = _COPY_THRESHOLD
            backend = importlib.import_module("zmq.backend.cython._zmq")
            constants = sys.modules["zmq.constants"]
            # the names the backend and zmq.error take from the packages at run time
            zmq.Frame = backend.Frame  # what recv(copy=False) makes; the sugar's is a subclass
            zmq.zmq_version_info = backend.zmq_version_info  # checked before CURVE calls
            zmq.EAGAIN, zmq.ETERM = constants.EAGAIN, constants.ETERM  # raising a ZMQError
            sys.modules["zmq.backend"].strerror = backend.strerror  # a ZMQError's message
            sys.modules["zmq.backend"].zmq_errno = backend.zmq_errno
            return backend
        except (ImportError, AttributeError, KeyError):
            # another pyzmq layout: run what was deferred and take the whole package
            if deferred is not None:
                deferred.complete()
            else:
                for name in _DEFERRED:
                    sys.modules.pop(name, None)
    importlib.import_module("zmq")
    return importlib.import_module("zmq.backend.cython._zmq")


_zmq = _backend()

from zmq import constants as _c  # noqa: E402  (after the packages are in place)
from zmq.error import Again, ZMQError  # noqa: E402, F401
from zmq.utils import z85  # noqa: E402, F401

Context = _zmq.Context
Socket = _zmq.Socket
Frame = _zmq.Frame
zmq_poll = _zmq.zmq_poll
curve_keypair = _zmq.curve_keypair

# socket types, options, flags and events as plain ints (an enum costs a lookup per use)
PAIR, REP, DEALER, ROUTER = int(_c.PAIR), int(_c.REP), int(_c.DEALER), int(_c.ROUTER)
BLOCKY = int(_c.BLOCKY)
NOBLOCK, SNDMORE = int(_c.NOBLOCK), int(_c.SNDMORE)
POLLIN, POLLOUT, POLLERR = int(_c.POLLIN), int(_c.POLLOUT), int(_c.POLLERR)
EVENTS, SRCFD, FD = int(_c.EVENTS), int(_c.SRCFD), int(_c.FD)
LINGER, SNDHWM, RCVHWM, MAXMSGSIZE = (int(_c.LINGER), int(_c.SNDHWM), int(_c.RCVHWM),
                                      int(_c.MAXMSGSIZE))
TCP_KEEPALIVE, TCP_KEEPALIVE_CNT = int(_c.TCP_KEEPALIVE), int(_c.TCP_KEEPALIVE_CNT)
TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_INTVL = int(_c.TCP_KEEPALIVE_IDLE), int(_c.TCP_KEEPALIVE_INTVL)
TCP_MAXRT, CONNECT_TIMEOUT, HANDSHAKE_IVL = (int(_c.TCP_MAXRT), int(_c.CONNECT_TIMEOUT),
                                             int(_c.HANDSHAKE_IVL))
RECONNECT_IVL, RECONNECT_IVL_MAX = int(_c.RECONNECT_IVL), int(_c.RECONNECT_IVL_MAX)
ROUTING_ID, ROUTER_MANDATORY, ROUTER_HANDOVER = (int(_c.ROUTING_ID), int(_c.ROUTER_MANDATORY),
                                                 int(_c.ROUTER_HANDOVER))
ZAP_DOMAIN, USE_FD = int(_c.ZAP_DOMAIN), int(_c.USE_FD)
CURVE_SERVER, CURVE_PUBLICKEY = int(_c.CURVE_SERVER), int(_c.CURVE_PUBLICKEY)
CURVE_SECRETKEY, CURVE_SERVERKEY = int(_c.CURVE_SECRETKEY), int(_c.CURVE_SERVERKEY)
EVENT_ACCEPTED, EVENT_DISCONNECTED = int(_c.EVENT_ACCEPTED), int(_c.EVENT_DISCONNECTED)
EVENT_HANDSHAKE_FAILED_AUTH = int(_c.EVENT_HANDSHAKE_FAILED_AUTH)
EVENT_HANDSHAKE_FAILED_PROTOCOL = int(_c.EVENT_HANDSHAKE_FAILED_PROTOCOL)


def monitor_socket(sock: Any, events: int) -> Any:
    """Start libzmq's monitor of `sock` for `events` and return the PAIR socket its
    events arrive on (what pyzmq's `get_monitor_socket` does); `sock.monitor(None, 0)`
    stops it."""
    addr = f"inproc://monitor.s-{sock.get(FD)}"
    sock.monitor(addr, events)
    pair = Socket(sock.context, PAIR)
    pair.connect(addr)
    return pair
