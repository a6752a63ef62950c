"""Binder recovery: from a leader restart (kill -9, then started again on its statedir) to the
next pod bound, under a steady stream of pods.

Run: .venv/bin/python bench/binder_recovery.py [--nodes 100] [--cores 8] [--rate 20]
     [--lifetime 5] [--restarts 5] [--rpc-timeout 10]

Setup as bench/binder.py: the Kubernetes API emulator (its store records when each
Binding arrives), a real 1-broker instance whose scheduler service sees --nodes
simulated nodes (bench/binder_sim_nodes.py), and a binder (here in this process,
so --rpc-timeout can be set; the CLI's is 10 s) talking to both with the real
clients. Pods are created at --rate per second and each ends --lifetime seconds
after it was bound, so the stream never runs out of cores. Each round kills rank
0 with SIGKILL, starts it again at once on the same statedir (journal kept) and
measures, from the restart:
- leader: until `sched.resource-status` answers again (the broker's own start);
- next bound: until the first pod created after the kill is bound (it needed an
  allocation from the restarted leader: the binder noticed, re-synced, placed);
- the worst creation-to-binding latency of the pods created during the round.
At the end every running pod's cores are checked: no core in two running pods, and
the leader holds each running pod's cores in the allocation its labels name.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from binder import TimedEmulator, pod  # noqa: E402
from fluxnode.agent.broker.client import ConnectError, RPCError  # noqa: E402
from fluxnode.broker_conf import idset  # noqa: E402
from fluxnode.scheduler.binder.binder import Binder  # noqa: E402
from fluxnode.scheduler.binder.config import BinderConfig  # noqa: E402

from fluxnode.testing.instance import Instance  # noqa: E402
from fluxnode.testing.waiting import wait_for  # noqa: E402


class Stream:
    """Creates pods at a steady rate; ends each `lifetime` seconds after its binding."""

    def __init__(self, kube: TimedEmulator, rate: float, lifetime: float):
        self.kube, self.rate, self.lifetime = kube, rate, lifetime
        self.created: dict[str, float] = {}
        self.ended: set[str] = set()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._create, daemon=True),
                         threading.Thread(target=self._end, daemon=True)]

    def start(self) -> Stream:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(10)

    def _create(self) -> None:
        i = 0
        start = time.monotonic()
        while not self.stop.is_set():
            name = f"s-{i}"
            self.kube.create("pods", pod(name, None, None), "default")
            self.created[name] = time.monotonic()
            i += 1
            self.stop.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def _end(self) -> None:
        bound_at = self.kube.store.bound_at
        while not self.stop.wait(0.05):
            now = time.monotonic()
            for name, at in list(bound_at.items()):
                if name not in self.ended and name in self.created and now - at >= self.lifetime:
                    try:
                        self.kube.set_pod_phase(name, "Succeeded")
                    except Exception as exc:  # a bench keeps going; reported at the end
                        self.errors.append(f"{name}: {exc}")
                    self.ended.add(name)


def leader_answers(inst: Instance) -> bool:
    try:
        inst.rpc("sched.resource-status", timeout=1.0)
        return True
    except (ConnectError, RPCError, OSError):
        return False


def check_running(kube: TimedEmulator, inst: Instance) -> int:
    """No core in two running pods, and the leader holds each one's cores; returns how
    many pods run."""
    owner: dict[tuple[str, int], str] = {}
    held: dict[str, set[tuple[int, int]]] = {}
    for a in inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]:
        pairs = {(n["rank"], c) for n in a["nodes"] for c in idset.decode(n["cores"])}
        for uid in (a.get("labels") or {}).get("pods") or []:
            held.setdefault(uid, set()).update(pairs)
    running = 0
    for p in kube.list("pods", "default"):
        if not p["spec"].get("nodeName") or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        running += 1
        ann = p["metadata"]["annotations"]
        rank = int(ann["fluxnode.io/rank"])
        cores = {(rank, c) for c in idset.decode(ann["fluxnode.io/cores"])}
        for core in cores:
            other = owner.setdefault((p["spec"]["nodeName"], core[1]), p["metadata"]["name"])
            if other != p["metadata"]["name"]:
                raise AssertionError(f"core {core} given to {other} and {p['metadata']['name']}")
        if not cores <= held.get(p["metadata"]["uid"], set()):
            raise AssertionError(f"{p['metadata']['name']} runs on {sorted(cores)}, not held")
    return running


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--cores", type=int, default=8)
    p.add_argument("--rate", type=float, default=20.0, help="pods created per second")
    p.add_argument("--lifetime", type=float, default=5.0, help="seconds a pod runs once bound")
    p.add_argument("--restarts", type=int, default=5)
    p.add_argument("--gap", type=float, default=5.0, help="seconds of stream between rounds")
    p.add_argument("--rpc-timeout", type=float, default=10.0)
    p.add_argument("--resync", type=float, default=5.0)
    args = p.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]
    )
    os.environ["FLUXNODE_BENCH_NODES"] = str(args.nodes)
    os.environ["FLUXNODE_BENCH_CORES"] = str(args.cores)
    print(f"binder recovery bench: {args.nodes} simulated nodes x {args.cores} cores, "
          f"{args.rate:g} pods/s living {args.lifetime:g} s, rpc timeout {args.rpc_timeout:g} s, "
          f"resync {args.resync:g} s, {os.cpu_count()} CPUs", flush=True)
    kube = TimedEmulator().start()
    inst = Instance(size=1, modules="binder_sim_nodes").start()
    binder = stream = None
    try:
        for i in range(args.nodes):
            kube.add_node(f"sim{i}", cpu=str(args.cores), memory="64Gi")
        config = BinderConfig(uri=inst.tcp_uri(0), curve_cert=inst.cert_path, http_port=None,
                              leader_elect=False, resync=args.resync,
                              rpc_timeout=args.rpc_timeout)
        binder = Binder(kube.api_client(), config).start()
        stream = Stream(kube, args.rate, args.lifetime).start()
        time.sleep(args.gap)  # a bench: let the stream reach its steady state
        rounds = []
        for r in range(args.restarts):
            inst.kill(0)
            t_restart = time.monotonic()
            inst.restart(0)
            wait_for(lambda: leader_answers(inst), 60, interval=0.02, what="the leader back")
            t_leader = time.monotonic()
            after = {n for n, at in list(stream.created.items()) if at >= t_restart}

            def next_bound(after=after, t_restart=t_restart):
                bound = kube.store.bound_at
                return min((bound[n] for n, at in list(stream.created.items())
                            if at >= t_restart and n in bound), default=None)

            t_bound = wait_for(next_bound, 120, interval=0.02, what="a pod bound after restart")
            time.sleep(args.gap)
            made = [n for n, at in list(stream.created.items()) if at >= t_restart - args.gap / 2]
            lat = [kube.store.bound_at[n] - stream.created[n] for n in made
                   if n in kube.store.bound_at]
            rounds.append((t_leader - t_restart, t_bound - t_restart, max(lat, default=0.0)))
            print(f"round {r + 1}: leader answers after {rounds[-1][0]:.2f} s, next pod bound "
                  f"after {rounds[-1][1]:.2f} s, worst pod latency around it "
                  f"{rounds[-1][2]:.2f} s", flush=True)
            del after
        stream.close()
        names = list(stream.created)
        wait_for(lambda: all(n in kube.store.bound_at or n in stream.ended for n in names), 120,
                 what="every pod of the stream bound")
        running = check_running(kube, inst)
        leader_s = [x[0] for x in rounds]
        bound_s = [x[1] for x in rounds]
        print(f"{args.restarts} restarts: leader answers after median "
              f"{statistics.median(leader_s):.2f} s (max {max(leader_s):.2f}); next pod bound "
              f"after median {statistics.median(bound_s):.2f} s (max {max(bound_s):.2f}); "
              f"{len(names)} pods created, all bound; {running} running, no core twice, "
              f"all held by the leader; stream errors {len(stream.errors)}", flush=True)
    finally:
        if stream is not None:
            stream.close()
        if binder is not None:
            binder.stop()
        inst.stop(check=False)
        kube.stop()


if __name__ == "__main__":
    main()
