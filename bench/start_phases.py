"""Where `fluxnode start --test-size N` spends its CPU: each broker's by phase (issue 32).

    .venv/bin/python bench/start_phases.py [--size 256] [--topo kary:2]

Runs `fluxnode start --test-size N -S broker.modules= true` in this process (the launcher)
with marks around the broker's steps, read in each forked broker with getrusage: user and
system CPU and minor page faults from the fork to `broker.main`, to the end of
`Broker.__init__`, of `Broker.start` (sockets bound, connected), until the shutdown begins
(joined, quorum, the command, waiting), until `_close`, to the end of `run`; what is left of
the children's total (getrusage of the reaped children) is the exit. Each row is a mean per
broker in milliseconds; then the launcher's own CPU, in all and by step (prepare, the forks,
the quorum wait, the shutdown, the cleanup). A forked broker pays in page
faults for every page of the launcher's heap it writes to (copy on write) and for every new
one, so the faults column says as much as the CPU.

`--floor` measures instead what no broker of this design can go below: children forked
one after the other from the same launcher (after the same imports and `gc.freeze()`) that
exit at once, that also make a ZeroMQ context and a socket (libzmq starts its I/O and reaper
threads), and that also connect with CURVE to a listening ROUTER and exchange one message
(the handshake a broker's join costs), as `fluxnode start`'s brokers would, with the CPU
otherwise idle. Each row is the mean per child (getrusage of the reaped child).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import sys
import tempfile
import time

PHASES = ["fork", "main", "init", "started", "shutdown", "close", "ran"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256, help="brokers (default 256)")
    ap.add_argument("--topo", default="kary:2", help="TBON topology (default kary:2)")
    ap.add_argument("--floor", action="store_true",
                    help="the cost of a forked child that only forks, starts ZeroMQ, joins")
    args = ap.parse_args()
    if args.floor:
        floor(args.size)
        return

    from fluxnode.agent.broker import broker as broker_mod
    from fluxnode.agent.broker import launcher
    from fluxnode.agent.broker import shutdown as shutdown_mod

    from fluxnode.commands.start import start

    out = tempfile.mkdtemp(prefix="start-phases-")
    marks: list[tuple[str, float, float, int]] = []

    def mark(what: str) -> None:
        if not any(m[0] == what for m in marks):
            r = resource.getrusage(resource.RUSAGE_SELF)
            marks.append((what, r.ru_utime, r.ru_stime, r.ru_minflt))

    def wrap(cls: type, name: str, before: str | None = None, after: str | None = None):
        inner = getattr(cls, name)

        def wrapped(*a, **k):
            if before:
                mark(before)
            try:
                return inner(*a, **k)
            finally:
                if after:
                    mark(after)

        setattr(cls, name, wrapped)

    wrap(broker_mod.Broker, "start", before="init", after="started")
    wrap(broker_mod.Broker, "run", after="ran")
    wrap(broker_mod.Broker, "_close", before="close")
    wrap(shutdown_mod.Shutdown, "begin", before="shutdown")
    inner_main = broker_mod.main

    def broker_main(*a, **k):
        mark("main")
        try:
            return inner_main(*a, **k)
        finally:
            with open(f"{out}/{os.getpid()}.json", "w") as f:
                json.dump(marks, f)

    broker_mod.main = broker_main
    steps: dict[str, tuple[float, int, float]] = {}  # the launcher's CPU, faults, wall by step

    def launcher_step(name: str) -> None:
        inner = getattr(launcher, name)

        def timed(*a, **k):
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            try:
                return inner(*a, **k)
            finally:
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                steps[name] = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                               r1.ru_minflt - r0.ru_minflt, time.monotonic() - t0)

        setattr(launcher, name, timed)

    for step in ("prepare", "fork_brokers", "wait_quorum", "shutdown", "cleanup"):
        launcher_step(step)
    began = time.monotonic()
    before_c, before_s = (resource.getrusage(w) for w in (resource.RUSAGE_CHILDREN,
                                                          resource.RUSAGE_SELF))
    try:
        start.main(["--test-size", str(args.size), "--topo", args.topo, "-q",
                    "-S", "broker.modules=", "--", "true"], standalone_mode=False)
    except SystemExit:
        pass
    after_c, after_s = (resource.getrusage(w) for w in (resource.RUSAGE_CHILDREN,
                                                        resource.RUSAGE_SELF))
    rows = [json.load(open(f)) for f in glob.glob(f"{out}/*.json")]
    n = len(rows)
    sums: dict[str, list[float]] = {}
    for r in rows:
        points = [("fork", 0.0, 0.0, 0), *r]
        for (a, u0, s0, f0), (b, u1, s1, f1) in zip(points, points[1:], strict=False):
            acc = sums.setdefault(f"{a} -> {b}", [0.0, 0.0, 0.0])
            acc[0] += u1 - u0
            acc[1] += s1 - s0
            acc[2] += f1 - f0
    tracked = [sum(r[-1][i] for r in rows) for i in (1, 2, 3)]
    sums["exit (rest of the children's total)"] = [
        after_c.ru_utime - before_c.ru_utime - tracked[0],
        after_c.ru_stime - before_c.ru_stime - tracked[1],
        after_c.ru_minflt - before_c.ru_minflt - tracked[2]]
    print(f"{n} brokers ({args.topo}), per broker: {'user ms':>8} {'sys ms':>7} {'faults':>7}")
    for what, (u, s, f) in sums.items():
        print(f"  {what:36} {u / n * 1000:8.2f} {s / n * 1000:7.2f} {f / n:7.0f}")
    total = (after_c.ru_utime - before_c.ru_utime) + (after_c.ru_stime - before_c.ru_stime)
    mine = (after_s.ru_utime - before_s.ru_utime) + (after_s.ru_stime - before_s.ru_stime)
    print(f"brokers {total:.2f} s CPU ({total / n * 1000:.1f} ms each), launcher {mine:.2f} s; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("launcher by step: " + ", ".join(f"{k} {cpu:.2f} s ({faults} faults)"
                                           for k, (cpu, faults, _) in steps.items()))
    print("wall by step: " + ", ".join(f"{k} {wall:.2f} s" for k, (_, _, wall) in steps.items())
          + f"; in all {time.monotonic() - began:.2f} s")
    for f in glob.glob(f"{out}/*.json"):
        os.unlink(f)
    os.rmdir(out)


def floor(n: int) -> None:
    """Mean CPU and faults of `n` forked children per kind, one child at a time."""
    import gc
    import signal

    import zmq
    from fluxnode.broker_conf import certificate

    from fluxnode.commands.start import start  # noqa: F401 -- the launcher's imports

    cert = certificate.generate()
    assert cert.secret_key is not None
    gc.collect()
    gc.freeze()
    ready_r, ready_w = os.pipe()
    server = os.fork()
    if server == 0:  # the parent every joining child talks to: a CURVE ROUTER that echoes
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.curve_server = True
        router.curve_secretkey, router.curve_publickey = cert.secret_key, cert.public_key
        port = router.bind_to_random_port("tcp://127.0.0.1")
        os.write(ready_w, str(port).encode())
        while True:
            router.send_multipart(router.recv_multipart())
    port = int(os.read(ready_r, 16))

    def context() -> None:
        ctx = zmq.Context(io_threads=1)
        ctx.socket(zmq.DEALER).close()
        ctx.term()

    def join() -> None:
        ctx = zmq.Context(io_threads=1)
        dealer = ctx.socket(zmq.DEALER)
        dealer.curve_serverkey = dealer.curve_publickey = cert.public_key
        dealer.curve_secretkey = cert.secret_key
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send(b"hello")
        dealer.recv()
        dealer.close()
        ctx.term()

    kinds = [("exit at once", lambda: None), ("and a ZeroMQ context and socket", context),
             ("and a CURVE connect, one message each way", join)]
    try:
        print(f"{n} children forked one at a time, per child: {'user ms':>8} {'sys ms':>7} "
              f"{'faults':>7}")
        for what, body in kinds:
            user = system = faults = 0.0
            for _ in range(n):
                pid = os.fork()
                if pid == 0:
                    try:
                        body()
                    finally:
                        os._exit(0)
                _, _, usage = os.wait4(pid, 0)
                user, system = user + usage.ru_utime, system + usage.ru_stime
                faults += usage.ru_minflt
            print(f"  {what:44} {user / n * 1000:8.2f} {system / n * 1000:7.2f} "
                  f"{faults / n:7.0f}")
    finally:
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
