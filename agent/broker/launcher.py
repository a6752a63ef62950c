"""Launch an N-broker test instance on this machine (the engine of `fluxnode start --test-size`).

Why fork: a fresh Python per broker costs ~100 ms of imports and ~20 MiB of
private memory; forking from a launcher that already imported the broker code
(before any ZeroMQ context exists) starts each broker in a few milliseconds and
shares the imported pages copy-on-write.

A page stays shared only while no broker writes to it, and CPython writes to every object
it touches (reference counts). So just before the fork the launcher also leaves its heap
so that a broker's own writes land in pages of its own rather than in its pages: the
method cache no longer names the launcher's strings (`_settle_type_cache`), and the free
blocks of obmalloc's pools and the small free chunks of the malloc heap are taken
(`_fill_pools`, `_fill_heap`), so what a broker allocates is packed in fresh pages. The
brokers of a 16-broker instance had 4.2 MiB of private pages each on average, now 3.5
(a leaf 3.45 -> 2.87; issue 32; docs/overlay.md, "A broker's footprint").
"""

from __future__ import annotations

import _signal
import ctypes
import errno
import fcntl
import gc
import json
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Importing the broker (and through it discovery, the overlay, broker_conf) here also
# means forked children start warm; with the services a worker builds on first use
# (the leader builds them at start), so their modules are shared pages, not each
# child's own.
from fluxnode.agent.broker import archive_service, content_store, discovery, exec_service
from fluxnode.agent.broker import broker as broker_mod
from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.broker_conf import certificate, render
from fluxnode.broker_conf.topology import Topology

_PRELOADED = (archive_service, content_store, exec_service)  # (see above: not used here)
LEAF_PORT = 1  # placeholder port for brokers without children (they never bind)


class LaunchError(Exception):
    """The instance could not be set up or did not reach quorum."""


@dataclass
class BrokerProc:
    rank: int
    hostname: str
    attrs: dict[str, str]
    pid: int = 0
    exit_code: int | None = None


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
LOCK_FILE = ".lock"


@dataclass
class TestInstance:
    size: int
    rundir: Path
    config_path: Path
    hostnames: list[str]
    brokers: list[BrokerProc] = field(default_factory=list)
    keep_rundir: bool = False
    listeners: dict[int, socket.socket] = field(default_factory=dict, repr=False)
    lock_fd: int | None = field(default=None, repr=False)  # flock on <rundir>/.lock
    # forked and not yet reaped, by pid; and those reaped, in the order they were
    running: dict[int, BrokerProc] = field(default_factory=dict, repr=False)
    exited: list[BrokerProc] = field(default_factory=list, repr=False)

    @property
    def uri(self) -> str:
        return self.brokers[0].attrs["local-uri"]

    def info(self) -> dict:
        return {
            "size": self.size,
            "uri": self.uri,
            "rundir": str(self.rundir),
            "config": str(self.config_path),
            "hostnames": self.hostnames,
            "brokers": [
                {"rank": b.rank, "hostname": b.hostname, "pid": b.pid, "attrs": b.attrs}
                for b in self.brokers
            ],
        }


def hostname_prefix() -> str:
    """This machine's name without its trailing digits: the default hosts are PREFIX0..N-1."""
    name = socket.gethostname().split(".")[0] or "host"
    name = re.sub(r"[^A-Za-z0-9-]", "-", name)
    return re.sub(r"\d+$", "", name) or "host"


def default_hosts(size: int) -> list[str]:
    return [f"{hostname_prefix()}{i}" for i in range(size)]


def listen_ports(count: int) -> list[socket.socket]:
    """Bound, listening sockets for the brokers' TBON endpoints, handed to them by fd.

    Holding the socket from choice to use leaves no window for anything else to take
    the port. Ports are below the kernel's ephemeral range, so once a broker dies its
    port is not taken by some outgoing connection before the broker is restarted.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first, last = (10000, low - 1) if low > 12000 else (low // 2, low - 1)
    rng = random.Random()
    socks: list[socket.socket] = []
    tries = 0
    try:
        while len(socks) < count:
            tries += 1
            if tries > count * 50 + 100:
                raise LaunchError(f"cannot find {count} free TCP ports in {first}-{last}")
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", rng.randint(first, last)))
            except OSError:
                s.close()
                continue
            s.listen(256)
            socks.append(s)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def prepare(
    size: int,
    *,
    topo: str = "kary:2",
    attrs: dict[str, str] | None = None,
    rundir: str | None = None,
    hosts: list[str] | None = None,
    tbon: dict[str, str] | None = None,
    resources: dict | None = None,
    resource_override_dir: str | None = None,
    log_level: str = "4",
) -> TestInstance:
    """Write certificate and broker.toml into a private rundir; plan one broker per host.

    `hosts` names the brokers (the first `size` of them; default this machine's name with
    0..N-1, as `flux start --test-hosts` does); `resources` is a resource override (the
    keys of an override file) every broker gets, unless `resource_override_dir` has a
    file for its host. Both make an instance look the same on any machine.
    """
    if size < 1:
        raise LaunchError(f"--test-size must be at least 1 (got {size})")
    if hosts is not None and len(hosts) < size:
        raise LaunchError(
            f"--test-hosts names {len(hosts)} host{'s' if len(hosts) != 1 else ''}, "
            f"fewer than --test-size {size}")
    if hosts is not None and len(set(hosts[:size])) < size:
        raise LaunchError("--test-hosts names a host twice")
    attrs = dict(attrs or {})
    if rundir:
        root = Path(rundir).absolute()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
        keep = True
    else:
        root = Path(tempfile.mkdtemp(prefix="fluxnode-"))
        keep = False
    lock_fd = lock_rundir(root)
    try:
        inst = _prepare(
            root, keep, size, topo, attrs, hosts, tbon, resources, resource_override_dir,
            log_level,
        )
    except BaseException:
        os.close(lock_fd)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    inst.lock_fd = lock_fd
    return inst


def lock_rundir(root: Path) -> int:
    """Take `<root>/.lock` (flock) for as long as the returned descriptor is open, so two
    instances never share a rundir (its broker.toml, certificate and sockets). Forked
    brokers inherit the descriptor: the rundir stays taken while any of them lives.
    LaunchError names the process that holds it."""
    path = root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise LaunchError(f"rundir {root} is in use by {holder}") from None
        raise LaunchError(f"rundir {root}: cannot lock {path}: {exc.strerror}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"fluxnode start (pid {os.getpid()})\n".encode(), 0)
    return fd


def _prepare(
    root: Path,
    keep: bool,
    size: int,
    topo: str,
    attrs: dict[str, str],
    hosts: list[str] | None,
    tbon: dict[str, str] | None,
    resources: dict | None,
    resource_override_dir: str | None,
    log_level: str,
) -> TestInstance:
    hosts = list(hosts[:size]) if hosts is not None else default_hosts(size)
    shared_override = _write_shared_override(root, resources, hosts[0]) if resources else None
    spec = attrs.pop("tbon.topo", None) or topo
    try:
        topology = Topology.from_spec(spec, size)
    except ValueError as exc:
        raise LaunchError(f"tbon.topo: {exc}") from None
    interior = [r for r in range(size) if r == 0 or topology.children(r)]
    listeners = dict(zip(interior, listen_ports(len(interior)), strict=True))
    ports = {r: s.getsockname()[1] for r, s in listeners.items()}
    overrides = {
        hosts[r]: {"bind": f"tcp://127.0.0.1:{p}", "connect": f"tcp://127.0.0.1:{p}"}
        for r, p in ports.items()
    }
    cert_path = root / "curve.cert"
    cert_path.unlink(
        missing_ok=True
    )  # every instance gets a fresh certificate, also in a reused --rundir
    certificate.write(cert_path, certificate.generate())
    text = render.render_broker_toml(hosts, curve_cert=str(cert_path), port=LEAF_PORT, topo=spec,
                                     bind="tcp://127.0.0.1:%p", connect="tcp://127.0.0.1:%p",
                                     host_overrides=overrides, tbon=tbon or {},
                                     exec_table={"allow": True})  # a private test instance
    config_path = root / "broker.toml"
    config_path.write_text(text)
    inst = TestInstance(size, root, config_path, hosts, keep_rundir=keep, listeners=listeners)
    for rank, host in enumerate(hosts):
        d = root / str(rank)
        d.mkdir(mode=0o700, exist_ok=True)
        a = {"log-stderr-level": log_level, "log-filename": str(d / "broker.log"), **attrs,
             "rundir": str(d), "local-uri": f"local://{d}/local", "statedir": str(d)}
        if shared_override:
            a["resource.override"] = str(shared_override)
        if resource_override_dir:
            for ext in ("json", "toml"):
                f = Path(resource_override_dir) / f"{host}.{ext}"
                if f.exists():
                    a["resource.override"] = str(f.absolute())
                    break
        inst.brokers.append(BrokerProc(rank, host, a))
    return inst


def _write_shared_override(root: Path, resources: dict, host: str) -> Path:
    """`<rundir>/resources.json`, the override every broker reads; checked here, once, so
    a bad value is one line from `fluxnode start` rather than N brokers failing."""
    path = root / "resources.json"
    path.write_text(json.dumps(resources))
    try:
        discovery.discover(path, host)
    except discovery.ResourceDiscoveryError as exc:
        raise LaunchError(f"--test-resources: {str(exc).removeprefix(f'{path}: ')}") from None
    return path


def _prctl() -> Any:
    """libc's prctl, looked up once in the launcher: in each forked broker the lookup cost
    about 0.5 ms of CPU (ctypes loading libc's handle, mostly page faults), issue 32."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl: Any) -> None:
    if prctl is not None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no orphaned brokers if the launcher dies


def _shared(config: Any) -> broker_mod.Shared:
    """What every broker would find again for itself: the certificate and this machine's
    resources, found once here. Anything that fails is left to each broker, which then
    reports it as it did before."""
    cert = machine = None
    if config.bootstrap.curve_cert is not None:
        try:
            cert = certificate.load(Path(config.bootstrap.curve_cert), require_secret=True)
        except Exception:
            cert = None
    try:
        machine = discovery.discover()
    except Exception:
        machine = None
    return broker_mod.Shared(cert=cert, machine=machine)


def _settle_type_cache() -> None:
    """Empty the interpreter's method cache, and give every class its version tag again,
    so that a forked broker does not write to strings of the launcher's (issue 32).

    CPython's type attribute cache (4,096 entries, `_PyType_Lookup`) holds a strong
    reference to the attribute name of each entry. After the launcher's imports and
    rendering, its entries name attributes of jinja2, tomllib, email and click; each
    lookup a broker caches replaces an entry and drops that name's reference, a write to a
    random launcher string, so a copy of its page: 45-50 pages per worker of the 64- and
    80-byte size classes (`/proc/PID/pagemap` of a broker against the launcher's memory
    at fork, changed words mapped to the objects there). `sys._clear_type_cache()` drops
    all the names but also every class's version tag, and each broker would then write a
    fresh tag into every class it uses; a failed lookup of the empty string (a string of
    the interpreter's own, whose page every process writes) on every class tags it again,
    and the entries it leaves name only that string."""
    clear = getattr(sys, "_clear_type_cache", None)
    if clear is None:  # not CPython: no such cache to settle
        return
    clear()
    lookup = type.__getattribute__
    seen: set[int] = set()
    todo: list[type] = [object]
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        try:
            lookup(cls, "")
        except AttributeError:
            pass
        todo.extend(type.__subclasses__(cls))


# Objects that fill the launcher's part-used obmalloc pools before the fork (_fill_pools);
# kept for the launcher's life, never touched again.
_POOL_FILL: list[object] = []


def _fill_pools() -> None:
    """Fill every part-used pool of CPython's small-object allocator before the fork, so
    what a broker allocates goes to pools of its own, packed, rather than into the free
    blocks the launcher's imports left scattered over its pools (issue 32).

    obmalloc allocates a size class from the first of its part-used pools (16 KiB each),
    then the next: a forked broker's first few thousand objects landed in the free
    blocks of 30-60 pools per size class, and each block it took or gave back copied a
    page of the launcher's (the block's, and the pool's header). Filled, the launcher's
    pools stay shared and a broker's objects fill fresh pools page by page. How many
    blocks each class has free comes from `sys._debugmallocstats()` (CPython's own
    report, written to the C stderr, read here through a file); the fillers are bytes
    objects of the class's exact size (ints for the 32-byte class), 0.3-0.5 MiB of the
    launcher's memory for all 32 classes. Without pymalloc or that report, nothing."""
    report = getattr(sys, "_debugmallocstats", None)
    if report is None:
        return
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            report()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    free: list[tuple[int, int]] = []
    for line in text.splitlines():
        # "class size num-pools blocks-in-use avail-blocks": one line per size class
        fields = line.split()
        if len(fields) == 5 and all(f.isdigit() for f in fields) and int(fields[1]) >= 32:
            free.append((int(fields[1]), int(fields[4])))
    fillers: list[object] = [None] * sum(n for _, n in free)  # sized once (_fill_heap)
    i = 0
    for size, n in free:
        for k in range(n):
            # a bytes object of n bytes takes 33 + n, a one-digit int 28
            fillers[i] = bytes(size - 33) if size >= 48 else (1 << 20) + k
            i += 1
    _POOL_FILL.append(fillers)


# Chunks that fill the free lists of the launcher's malloc heap before the fork
# (_fill_heap); never freed, never touched.
_HEAP_FILL: list[list[int | None]] = []
TCACHE_MAX_CHUNK = 1040  # glibc's per-thread cache holds up to 7 free chunks of each
TCACHE_COUNT = 7  # size up to this one (64 sizes, 16 bytes apart)


def _fill_heap() -> None:
    """Take the small free chunks of the launcher's malloc heap before the fork, so that
    what a broker mallocs (pyzmq's and libzmq's objects, Python's tables over 512 bytes)
    is carved from the heap's top, packed, rather than from free chunks scattered over
    the launcher's pages, each of which it would copy (issue 32).

    Which chunks are free comes from glibc's `malloc_info` (an XML report: size and count
    of the free chunks of each bin, per arena; the main arena's first); its per-thread
    cache, which the report leaves out, holds up to 7 chunks of each size up to 1,040
    bytes, so 7 more of each are taken. Chunks over 1,040 bytes are left: a broker's
    larger allocations split them from one end. About 600 chunks, 0.25 MiB at most, kept
    for the launcher's life. Anything but glibc: nothing."""
    try:
        libc = ctypes.CDLL(None)
        malloc, malloc_info = libc.malloc, libc.malloc_info
        fdopen, fclose = libc.fdopen, libc.fclose
    except (OSError, AttributeError):
        return
    malloc.restype = fdopen.restype = ctypes.c_void_p
    with tempfile.TemporaryFile() as out:
        stream = fdopen(os.dup(out.fileno()), b"w")
        if not stream:
            return
        malloc_info(0, ctypes.c_void_p(stream))
        fclose(ctypes.c_void_p(stream))
        out.seek(0)
        report = out.read().decode(errors="replace")
    sizes = list(range(32, TCACHE_MAX_CHUNK + 1, 16)) * TCACHE_COUNT
    main_arena = report.split('<heap nr="1">')[0].split("</sizes>")[0]
    for m in re.finditer(r'<size from="(\d+)" to="\d+" total="\d+" count="(\d+)"/>', main_arena):
        chunk = int(m[1]) - 1  # the report's "from" is a chunk's size + 1
        if chunk <= TCACHE_MAX_CHUNK:
            sizes += [chunk] * int(m[2])
    # sized once: a list grown by appends would leave its outgrown arrays as new holes
    taken: list[int | None] = [None] * len(sizes)
    for i, chunk in enumerate(sizes):
        taken[i] = malloc(chunk - 16)  # a request of n bytes is a chunk of n + 16
    _HEAP_FILL.append(taken)


def fork_brokers(inst: TestInstance) -> None:
    config_path = str(inst.config_path)
    config = broker_mod.load_config(config_path)
    topology = config.topology()
    # the config's views of all N hosts (the names, the rank of each) are built here, once,
    # and shared: built again in each broker, N brokers walked N hosts each (issue 32)
    _ = config.hostnames, config.rank_of(inst.brokers[0].hostname)
    shared, prctl = _shared(config), _prctl()
    # Keep the garbage collector away from the shared heap so pages stay shared after fork.
    gc.collect()
    _settle_type_cache()
    _fill_pools()
    _fill_heap()
    _fill_heap()  # and what the first round's own allocations freed
    gc.freeze()
    # The brokers wait at a gate (the read end of a pipe) until every one is forked: started
    # at once, 1,000 brokers took the 2 cores from the launcher, and its k-th fork waited
    # behind k busy brokers (a fork took 58 ms at N=256 under load 16, 15 s in all).
    gate, opened = os.pipe()
    listener_fds = _fd_runs(sorted(s.fileno() for s in inst.listeners.values()))
    try:
        for b in inst.brokers:
            # SIGINT/SIGTERM are blocked across the fork: delivered inside os.fork's hooks, the
            # KeyboardInterrupt was swallowed ("Exception ignored") and the instance went on.
            # Blocked, the parent gets it right after, with every forked broker recorded.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setpgid(0, 0)
                    _die_with_parent(prctl)
                    # `_signal`'s calls, not `signal`'s enum wrappers: see shutdown.py
                    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
                    _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
                    _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
                    os.close(opened)
                    mine = inst.listeners.get(b.rank)
                    _close_listeners(listener_fds, mine.fileno() if mine else -1)
                    os.read(gate, 1)  # end of file once the launcher has forked everyone
                    os.close(gate)
                    code = broker_mod.main(
                        config_path,
                        dict(b.attrs),
                        b.hostname,
                        config=config,
                        topology=topology,
                        tbon_fd=mine.fileno() if mine else None,
                        shared=shared,
                    )
                except BaseException as exc:  # never return into the launcher's stack
                    try:
                        print(f"fluxnode-broker[{b.rank}]: {exc}", file=sys.stderr)
                    except Exception:
                        pass
                finally:
                    os._exit(code)
            b.pid = pid
            inst.running[pid] = b
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    finally:
        for b in inst.brokers:
            if not b.pid:
                # never forked (interrupted while starting): nothing to wait for, and never
                # to signal (kill(0, ...) would hit the launcher's own process group)
                b.exit_code = 0
        os.close(gate)
        os.close(opened)  # the gate opens (also when interrupted: those forked stop cleanly)
    for s in inst.listeners.values():
        s.close()  # each broker now holds its own
    (inst.rundir / "instance.json").write_text(json.dumps(inst.info(), indent=1))


def _fd_runs(fds: list[int]) -> list[tuple[int, int]]:
    """Sorted descriptors as runs [low, high) of consecutive numbers."""
    runs: list[list[int]] = []
    for fd in fds:
        if runs and runs[-1][1] == fd:
            runs[-1][1] = fd + 1
        else:
            runs.append([fd, fd + 1])
    return [(low, high) for low, high in runs]


def _close_listeners(runs: list[tuple[int, int]], keep: int) -> None:
    """In a forked broker: close the other brokers' listening sockets, all but `keep`, a
    close_range per run of descriptors. (Closing them one socket object at a time cost each
    of N brokers N/2 calls and wrote to every socket object's page, issue 32. The objects,
    held by the launcher's frames until the broker's os._exit, are never used again.)"""
    for low, high in runs:
        if low <= keep < high:
            os.closerange(low, keep)
            os.closerange(keep + 1, high)
        else:
            os.closerange(low, high)


def reap(inst: TestInstance) -> None:
    """Record the exit code of every broker that has exited. It asks the kernel which child
    has exited (waitid without reaping, then waitpid of that broker), so a poll with none
    exited is one system call and not one per broker: the launcher polls every 10 ms, and
    at 1,024 brokers asking each one cost it more CPU than the forks (issue 32). A child
    that is not a broker (this process may have others) is left alone: then each broker
    is asked in turn, as before."""
    while inst.running:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # no child at all: those left were reaped elsewhere
            for b in list(inst.running.values()):
                _exited(inst, b, -1)
            return
        if info is None:
            return
        b = inst.running.get(info.si_pid)
        if b is None:
            break
        _, status = os.waitpid(b.pid, 0)
        _exited(inst, b, os.waitstatus_to_exitcode(status))
    for b in list(inst.running.values()):
        try:
            pid, status = os.waitpid(b.pid, os.WNOHANG)
        except ChildProcessError:
            _exited(inst, b, -1)
            continue
        if pid:
            _exited(inst, b, os.waitstatus_to_exitcode(status))


def _exited(inst: TestInstance, b: BrokerProc, code: int) -> None:
    b.exit_code = code
    del inst.running[b.pid]
    inst.exited.append(b)


def wait_quorum(inst: TestInstance, timeout: float, progress=None) -> None:
    deadline = time.monotonic() + timeout
    client = None
    last = -1
    try:
        while True:
            reap(inst)
            if inst.exited:
                dead = inst.exited[0]
                raise LaunchError(
                    f"broker {dead.hostname} (rank {dead.rank}) exited with code {dead.exit_code} "
                    "before quorum"
                )
            try:
                if client is None:
                    client = Client.connect(inst.uri, timeout=5.0)
                status = client.rpc("broker.status", nodeid=0)
                if progress and status["count"] != last:
                    last = status["count"]
                    progress(status["count"], inst.size)
                if status["state"] == "run":
                    return
            except (ConnectError, RPCError):
                if client is not None:
                    client.close()
                    client = None
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"quorum not reached within {timeout:g}s ({max(last, 0)}/{inst.size} brokers "
                    "online)"
                )
            time.sleep(0.01)
    finally:
        if client is not None:
            client.close()


def shutdown(inst: TestInstance, grace: float = 10.0) -> None:
    """Clean shutdown down the tree via rank 0, then SIGTERM, then SIGKILL the stragglers."""
    reap(inst)
    if inst.brokers and inst.brokers[0].exit_code is None:
        try:
            with Client.connect(inst.uri, timeout=2.0) as c:
                c.rpc("broker.shutdown", nodeid=0)
        except (ConnectError, RPCError):
            pass
    for sig, wait in ((None, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if sig is not None:
            for b in inst.brokers:
                if b.exit_code is None:
                    # say so: a broker that does not stop must not be hidden by the fallback
                    print(
                        f"fluxnode-start: broker {b.hostname} (rank {b.rank}, pid {b.pid}) did not "
                        "stop;"
                        f" sending {sig.name}",
                        file=sys.stderr,
                        flush=True,
                    )
                    try:
                        os.kill(b.pid, sig)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + wait
        left, progress = len(inst.brokers), time.monotonic()
        while time.monotonic() < deadline:
            reap(inst)
            running = len(inst.running)
            if not running:
                return
            if running < left:
                left, progress = running, time.monotonic()
            if (sig is None and inst.brokers[0].exit_code is not None
                    and time.monotonic() - progress > 1.0):
                # rank 0 finished the tree shutdown and for a second nobody else exited:
                # whoever is left was cut off from it. (Not a second after rank 0: 1,024
                # brokers on 2 loaded cores are still exiting then, one after the other.)
                break
            time.sleep(0.01)


def cleanup(inst: TestInstance) -> None:
    if not inst.keep_rundir:
        shutil.rmtree(inst.rundir, ignore_errors=True)
    if inst.lock_fd is not None:
        os.close(inst.lock_fd)
        inst.lock_fd = None
