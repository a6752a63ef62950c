"""Binder throughput and latency: pods placed per second from creation to binding.

Run: .venv/bin/python bench/binder.py [--nodes 1000] [--cores 8] [--singles 5000] [--mixed]
     [--groups 500] [--group-size 16] [--big-group 256] [--policy first] [--not-ready 0]
     [--placements PATH]
Issue 14's case: --nodes 5000 --big-group 1000, once with --policy first and once
with --policy lonode.

Setup: the Kubernetes API emulator (tests/support, in this process), a real
1-broker instance whose scheduler service sees --nodes simulated nodes
(bench/binder_sim_nodes.py), and `fluxnode binder` as a separate process
talking to both (kubeconfig; tcp:// with CURVE). Pods are created in a burst;
the shared emulator's store, subclassed here, records when each
Binding arrives. Prints per scenario: pods/s
(creation of the first pod to binding of the last), p50/p99 latency, binder
CPU ms per pod (utime+stime of the binder process), and for the big group the
time from its last pod's creation to its last binding.

CPU is split by process, because on a 2-core machine the three compete: the binder,
the broker (the scheduler service), and this process, itself split into the
emulator's thread (the API server: a test tool, not part of the product) and the
main thread creating the pods (the load). --py-spy profiles the binder,
--py-spy-all the broker and this process too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from fluxnode.testing.exits import stop_process  # noqa: E402
from fluxnode.testing.instance import Instance  # noqa: E402
from fluxnode.testing.kube_emulator import KubeEmulator  # noqa: E402
from fluxnode.testing.kube_store import DEFAULT_NAMESPACES, KubeStore  # noqa: E402
from fluxnode.testing.waiting import wait_for  # noqa: E402


class TimedStore(KubeStore):
    """The shared emulator's store, also recording when each pod's Binding arrived (monotonic)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.bound_at: dict[str, float] = {}
        self.scheduled_events: set[str] = set()  # pods with a Scheduled event

    def create(self, resource, namespace, obj, *a, **kw):
        out = super().create(resource, namespace, obj, *a, **kw)
        if resource == "events" and obj.get("reason") == "Scheduled":
            self.scheduled_events.add((obj.get("involvedObject") or {}).get("name"))
        return out

    def bind(self, namespace, pod_name, binding):
        out = super().bind(namespace, pod_name, binding)
        self.bound_at[pod_name] = time.monotonic()
        return out


class TimedEmulator(KubeEmulator):
    def __init__(self, *, namespaces: tuple[str, ...] = DEFAULT_NAMESPACES, **kw):
        super().__init__(namespaces=namespaces, **kw)
        self.store = TimedStore(namespaces)


def cpu_times(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all threads (or of its thread `tid`)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_of(pid: int, tid: int | None = None) -> float:
    return sum(cpu_times(pid, tid))


def py_spy(args, pid: int, out_path: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            args.py_spy_cmd,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(args.py_spy_rate),
            "--nonblocking",
            "--gil",
            "--format",
            "raw",
            "--output",
            out_path,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pod(name: str, group: str | None, size: int | None, cpu: str = "1") -> dict:
    labels = (
        {"scheduling.x-k8s.io/pod-group": group, "fluence.flux-framework.org/group-size": str(size)}
        if group
        else {}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "schedulerName": "fluxnode",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Pending"},
    }


def record_placements(path: str, title: str, kube, names: list[str]) -> None:
    """Add where each pod of `title` went (node, cores, GPUs: its Binding's annotations)
    to the JSON file `path`, to compare two versions of the product on the same burst."""
    ann = "fluxnode.io/"
    out = json.loads(Path(path).read_text()) if Path(path).exists() else {}
    placed = {}
    for name in names:
        obj = kube.get("pods", name, "default")
        a = obj["metadata"].get("annotations") or {}
        placed[name] = [obj["spec"].get("nodeName"), a.get(ann + "cores"), a.get(ann + "gpus")]
    out[title] = placed
    Path(path).write_text(json.dumps(out, indent=0, sort_keys=True))


def scenario(title: str, args, groups: list[tuple[str | None, int]]) -> dict:
    """groups: (group name or None, pods); creates all pods in a burst and waits for all
    bindings."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-binder-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]
    )
    os.environ["FLUXNODE_BENCH_NODES"] = str(args.nodes)
    os.environ["FLUXNODE_BENCH_CORES"] = str(args.cores)
    kube = TimedEmulator().start()
    inst = Instance(size=1, modules="binder_sim_nodes").start()
    broker_pid = inst.pids[0]
    binder = None
    binder_log = open(tmp / "binder.log", "wb")
    finished = False
    try:
        for i in range(args.nodes):
            kube.add_node(f"sim{i}", cpu=str(args.cores), memory="64Gi")
        for i in range(args.not_ready):  # spread over the range: the hostlist has holes
            kube.set_node_ready(f"sim{(i * args.nodes) // args.not_ready}", False)
        binder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fluxnode",
                "binder",
                "--kubeconfig",
                str(kube.kubeconfig_path),
                "--uri",
                inst.tcp_uri(0),
                "--curve-cert",
                inst.cert_path,
                "--no-leader-elect",
                "--http-port",
                "0",
                "--bind-workers",
                str(args.bind_workers),
                "--alloc-batch",
                str(args.alloc_batch),
                "--policy",
                args.policy,
                "--log-level",
                args.binder_log_level,
            ],
            stderr=binder_log,
        )
        # warm up: one pod through the whole path, so startup/sync is not counted
        kube.create("pods", pod("warmup", None, None), "default")
        wait_for(lambda: "warmup" in kube.store.bound_at, 120, what="warm-up pod bound")
        kube.delete("pods", "warmup", "default")  # give its core back before the burst
        wait_for(
            lambda: not inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"],
            30,
            what="warm-up allocation freed",
        )
        spies = []
        if args.py_spy or args.py_spy_all:
            prefix = f"{args.py_spy or args.py_spy_all}-{title.replace(' ', '_')}"
            spies.append(py_spy(args, binder.pid, f"{prefix}-binder.txt"))
            if args.py_spy_all:
                spies.append(py_spy(args, broker_pid, f"{prefix}-broker.txt"))
                spies.append(py_spy(args, os.getpid(), f"{prefix}-emulator.txt"))
            time.sleep(1.0)  # let py-spy attach before the burst (bench only, not a test)
        me, emu_tid, main_tid = os.getpid(), kube._thread.native_id, threading.get_native_id()
        cpu0 = cpu_times(binder.pid)
        other0 = (cpu_of(broker_pid), cpu_of(me, emu_tid), cpu_of(me, main_tid), cpu_of(me))
        created: dict[str, float] = {}
        names: list[str] = []
        for g, (group, n) in enumerate(groups):
            for i in range(n):
                name = f"{group or 'p'}-{g}-{i}"
                # --mixed: 1, 2 or 3 cores a pod, so a group has several slot kinds
                cpu = str(1 + (g + i) % 3) if args.mixed else "1"
                kube.create("pods", pod(name, group, n if group else None, cpu), "default")
                created[name] = time.monotonic()
                names.append(name)
        last_created = time.monotonic()
        main_cpu = cpu_of(me, main_tid) - other0[2]  # creating the pods (before the waiting)
        def all_in(seen) -> bool:  # checked every 50 ms: count before walking the names
            return len(seen) >= len(names) and all(n in seen for n in names)

        wait_for(lambda: all_in(kube.store.bound_at), args.timeout, interval=0.05,
                 what=f"{len(names)} pods bound")
        # the binder's work for the burst ends with the pods' Scheduled events: CPU is
        # counted until then (events may be written after the last Binding)
        wait_for(lambda: all_in(kube.store.scheduled_events), args.timeout,
                 interval=0.05, what=f"{len(names)} Scheduled events")
        events_done = time.monotonic()
        user, system = (b - a for a, b in zip(cpu0, cpu_times(binder.pid), strict=True))
        cpu = user + system
        broker_cpu = cpu_of(broker_pid) - other0[0]
        emu_cpu = cpu_of(me, emu_tid) - other0[1]
        bench_cpu = cpu_of(me) - other0[3]
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(60)
        lat = sorted(kube.store.bound_at[n] - created[n] for n in names)
        first = min(created.values())
        last_bind = max(kube.store.bound_at[n] for n in names)
        out = {
            "scenario": title,
            "pods": len(names),
            "pods_per_s": len(names) / (last_bind - first),
            "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "binder_cpu_ms_per_pod": 1000 * cpu / len(names),
            "binder_user_ms_per_pod": 1000 * user / len(names),
            "binder_system_ms_per_pod": 1000 * system / len(names),
            "last_created_to_last_bound_ms": 1000 * (last_bind - last_created),
            "creation_s": last_created - first,
            "last_event_after_last_bind_ms": 1000 * (events_done - last_bind),
            "broker_cpu_ms_per_pod": 1000 * broker_cpu / len(names),
            "emulator_cpu_ms_per_pod": 1000 * emu_cpu / len(names),
            "creator_cpu_ms_per_pod": 1000 * main_cpu / len(names),
            "bench_other_cpu_ms_per_pod": 1000 * (bench_cpu - emu_cpu - main_cpu) / len(names),
        }
        print(
            f"{title}: {out['pods']} pods, {out['pods_per_s']:.0f} pods/s, p50 {out['p50_ms']:.0f} "
            "ms, "
            f"p99 {out['p99_ms']:.0f} ms, binder CPU {out['binder_cpu_ms_per_pod']:.2f} ms/pod "
            f"(user {out['binder_user_ms_per_pod']:.2f}, system "
            f"{out['binder_system_ms_per_pod']:.2f}), "
            f"last creation -> last binding {out['last_created_to_last_bound_ms']:.0f} ms\n"
            f"  CPU ms/pod: binder {out['binder_cpu_ms_per_pod']:.2f}, scheduler service "
            f"(broker) {out['broker_cpu_ms_per_pod']:.2f}, API emulator "
            f"{out['emulator_cpu_ms_per_pod']:.2f} (test tool), pod creation "
            f"{out['creator_cpu_ms_per_pod']:.2f} (load; {out['creation_s']:.2f} s), bench "
            f"other {out['bench_other_cpu_ms_per_pod']:.2f}; all Scheduled events "
            f"{out['last_event_after_last_bind_ms']:.0f} ms after the last binding (CPU "
            "counted until then)",
            flush=True,
        )
        if args.placements:
            record_placements(args.placements, title, kube, names)
        finished = True
        return out
    finally:
        tear_down(binder, inst, kube, binder_log, tmp, finished, f"{title}: ")


def tear_down(binder: subprocess.Popen | None, inst: Instance, kube: KubeEmulator,
              binder_log, tmp: Path, finished: bool, what: str = "") -> None:
    """A bench run's end, finished or not: the binder, the brokers and the emulator
    stopped; the scratch folder removed, or kept for its binder log when the run failed
    (`what` names the run in that line). bench/workloads.py ends its runs here too."""
    if binder is not None:
        stop_process(binder, 15)
    inst.stop()
    kube.stop()
    binder_log.close()
    if finished:
        shutil.rmtree(tmp, ignore_errors=True)
    else:  # keep the binder's log of a failed run for the reader
        print(f"{what}binder log kept in {tmp / 'binder.log'}", file=sys.stderr, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--cores", type=int, default=8)
    p.add_argument("--singles", type=int, default=5000)
    p.add_argument("--groups", type=int, default=500)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--big-group", type=int, default=256)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--binder-log-level", default="warning")
    p.add_argument("--policy", default="first", help="the binder's match policy (first, lonode)")
    p.add_argument(
        "--not-ready",
        type=int,
        default=0,
        help="nodes marked NotReady before the bursts (every group's hostlist leaves them out)",
    )
    p.add_argument("--bind-workers", type=int, default=16)
    p.add_argument("--mixed", action="store_true",
                   help="pods ask for 1, 2 or 3 cores in turn (groups of several slot kinds)")
    p.add_argument("--placements", metavar="PATH",
                   help="write each pod's node, cores and GPUs per scenario (JSON) to PATH")
    p.add_argument(
        "--alloc-batch",
        type=int,
        default=64,
        help="groups per sched.alloc round trip (1: one per group)",
    )
    p.add_argument(
        "--py-spy",
        metavar="PREFIX",
        help="profile the binder with py-spy during each burst "
        "(raw folded stacks in PREFIX-<scenario>.txt; py-spy is not a dependency: pip install it "
        "to measure)",
    )
    p.add_argument(
        "--py-spy-all",
        metavar="PREFIX",
        help="as --py-spy, and the broker and this process (emulator + load) too",
    )
    p.add_argument("--py-spy-rate", type=int, default=500, help="py-spy samples per second")
    p.add_argument("--py-spy-cmd", default=str(Path(sys.executable).parent / "py-spy"))
    args = p.parse_args()
    print(
        f"binder bench: {args.nodes} simulated nodes x {args.cores} cores ({args.not_ready} "
        f"NotReady), policy {args.policy}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    if args.singles:
        scenario(f"{args.singles} single pods", args, [(None, 1)] * args.singles)
    if args.groups:
        scenario(f"{args.groups} groups of {args.group_size}", args,
                 [(f"g{i}", args.group_size) for i in range(args.groups)])
    if args.big_group:
        scenario(f"one group of {args.big_group}", args, [("big", args.big_group)])


if __name__ == "__main__":
    main()
