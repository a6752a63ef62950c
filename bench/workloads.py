"""Whole workloads admitted per second: Indexed Jobs from creation to every pod bound (issue 30).

Run: .venv/bin/python bench/workloads.py [--jobs 1000] [--pods 8] [--clients 4]
     [--nodes 5000] [--cores 8] [--single 20] [--seed 1] [--py-spy PREFIX | --py-spy-all PREFIX]
     [--profile-loop PATH]

Issue 30's targets, its defaults here: 1,000 Indexed Jobs of 8 pods against 5,000 simulated
nodes admitted at 200 workloads/s or more, and on an empty cluster a Job's creation to all
its pods bound p50 under 1 s (--single: Jobs created one at a time before the burst, each
deleted once bound; the burst's own p50 is mostly queueing behind the Jobs created first).

Setup, everything real but the cluster's nodes: the Kubernetes API emulator in this process
with its Job controller and daemonset/workloads/ applied (the FluxJob CRD and the mutating
webhook configuration, whose webhook it calls over HTTPS); a real 1-broker instance whose
scheduler service sees --nodes simulated nodes of --cores cores (bench/binder_sim_nodes.py);
`fluxnode binder` as its own process serving the webhook (its own CA, its caBundle written
into the configuration). --clients threads create the Jobs with the official client
(BatchV1Api; answers read as JSON, not models), each on its own connection, in a burst:
the webhook stores each suspended, the binder records its FluxJob, allocates its whole
set and unsuspends it, the Job controller creates its pods, the binder binds index i into
slot i.

Measured from the emulator's store (a listener sees every committed write, in order):
- admitted per second: jobs / (the first Job's creation -> the last Job's unsuspension), and
  the steady rate (between the 10th and the 90th percentile of the unsuspensions);
  Neither can exceed the rate the clients create Jobs at (printed too: each create waits
  for the webhook);
- per Job, its client's create call -> all its pods bound: p50, p90, p99, and the p50 of its
  steps: created -> unsuspended (the webhook, the FluxJob loop, the allocation: the
  binder's), -> all its pods stored (the Job controller's: the emulator's), -> all bound
  (the scheduling and binding cycles: the binder's);
- the admission webhook's latency as the API server sees it: the calls themselves (request
  written -> answer read, what a real API server's admission webhook metric times; made on
  the emulator's one event loop, so they include its delay to resume the call when busy),
  and each write's whole wait for admission (its decoding and matching too), one call per
  Job, p50 and p99; as the binder times it (its histogram, read -> answer ready); and as a
  probe sees it, a process of its own posting a Job's AdmissionReview --probe-rate times a
  second through the burst (bench/webhook.py --probe: the emulator's calls also wait for
  its own busy interpreter); and how late the emulator's event loop, where it makes the
  calls, runs a timer due every 5 ms (its share of the calls' time);
- CPU seconds (user + system, /proc) per workload of: the binder process (and by thread:
  its loop, informers, bind workers, webhook; names from `py-spy dump` when installed,
  threads that ended meanwhile in "other"); the scheduler
  service (the broker); the emulator, split into its HTTP server thread (the calls to the
  webhook too), its Job controller and any other thread of this process but the clients'
  and the bench's own - a test double, whose cost a real API
  server and controller manager would carry instead; and the clients creating the Jobs (the
  load). The API requests of the burst are counted by verb and resource (every client's:
  the binder's, the Job controller's and the Jobs' creators'). CPU is counted until every
  FluxJob says Running and every pod has its Scheduled event (the binder's last writes for
  a workload).

--held: issue 30's figure as it reads, "1,000 Indexed Jobs ... queued ...: admitted at 200
workloads/s": the Jobs are created while their queue is held (the binder's queue limits,
`--queue-limits`, give queue `batch` 0 cores, so each Job is stored suspended and its
FluxJob stays Queued saying the limit holds it), and once every FluxJob says so the limit
is lifted (one update of the ConfigMap, as an administrator would make it). The rates,
latencies and CPU are then counted from the lift: the queue's admission, without the
creations and their webhook calls (the burst without --held counts those too, and cannot
admit faster than the clients create).

Before the burst this process freezes what its setup left alive (`gc.freeze()`, as the
binder does once started; --no-gc-freeze: not): the cyclic GC's full collections walked the
emulator's 5,000 Nodes and their history in the burst, stopping its event loop up to 0.4 s.

Pod counts come from a seeded generator (printed); nothing waits a fixed time except the
probe's pace and py-spy to attach when asked to profile (--py-spy: the binder's threads on
a CPU, as folded stacks; --py-spy-idle: every thread, waiting included; --py-spy-all: the
broker and this process too). Results, the machine's load and what was changed for them:
docs/binder.md, "Whole workloads".
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

from binder import cpu_of, cpu_times, tear_down  # noqa: E402  (bench/binder.py)
from kubernetes import client  # noqa: E402

from fluxnode.testing.instance import Instance  # noqa: E402
from fluxnode.testing.kube_emulator import KubeEmulator  # noqa: E402
from fluxnode.testing.kube_store import Change  # noqa: E402
from fluxnode.testing.ports import free_port  # noqa: E402
from fluxnode.testing.waiting import wait_for  # noqa: E402

WORKLOADS = ROOT / "daemonset" / "workloads"
CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
FLUXJOBS = "fluxjobs.fluxnode.io"
NAMESPACE = "default"
WARM = "warm"  # the warm-up's and --single's queue: never held
LIMITS = ("fluxnode", "fluxnode-queues")  # --held: the binder's queue limits (ConfigMap)


class Recorder:
    """When each Job was stored, unsuspended and had all its pods bound, from the store's
    listener (called under the store's lock on the emulator's threads: it only notes)."""

    def __init__(self) -> None:
        self.pods_of: dict[str, int] = {}  # job uid -> completions
        self.stored: dict[str, float] = {}  # job uid -> first stored (suspended)
        self.unsuspended: dict[str, float] = {}  # job uid -> first seen with suspend false
        self.pods_created: dict[str, int] = {}  # job uid -> its pods stored
        self.all_created: dict[str, float] = {}  # job uid -> its last pod stored
        self.live_pods: dict[str, int] = {}  # job uid -> its pods not yet deleted
        self.bound: set[str] = set()  # pod uids with a nodeName
        self.bound_count: dict[str, int] = {}  # job uid -> its pods bound
        self.all_bound: dict[str, float] = {}  # job uid -> its last pod bound
        self.running: set[str] = set()  # FluxJob names whose status says Running
        self.held: set[str] = set()  # FluxJob names Queued by a queue's limit (--held)
        self.scheduled_events = 0
        self.not_suspended_at_creation = 0

    def __call__(self, change: Change) -> None:
        now = time.monotonic()
        obj = change.obj
        meta = obj.get("metadata") or {}
        if change.ref == "jobs.batch" and change.type != "DELETED":
            uid = meta.get("uid", "")
            suspended = (obj.get("spec") or {}).get("suspend")
            if change.type == "ADDED":
                self.stored[uid] = now
                self.pods_of[uid] = int((obj.get("spec") or {}).get("completions") or 1)
                if not suspended:
                    self.not_suspended_at_creation += 1
            if not suspended and uid not in self.unsuspended:
                self.unsuspended[uid] = now
        elif change.ref == "pods" and change.type == "DELETED":
            owner = next((r.get("uid") for r in meta.get("ownerReferences") or []
                          if r.get("kind") == "Job"), None)
            if owner is not None:
                self.live_pods[owner] = self.live_pods.get(owner, 0) - 1
        elif change.ref == "pods":
            uid = meta.get("uid", "")
            if change.type == "ADDED":
                owner = next((r.get("uid") for r in meta.get("ownerReferences") or []
                              if r.get("kind") == "Job"), None)
                if owner is not None:
                    self.live_pods[owner] = self.live_pods.get(owner, 0) + 1
                    count = self.pods_created[owner] = self.pods_created.get(owner, 0) + 1
                    if count == self.pods_of.get(owner):
                        self.all_created[owner] = now
            if (obj.get("spec") or {}).get("nodeName") and uid not in self.bound:
                self.bound.add(uid)
                owner = next((r.get("uid") for r in meta.get("ownerReferences") or []
                              if r.get("kind") == "Job"), None)
                if owner is not None:
                    count = self.bound_count[owner] = self.bound_count.get(owner, 0) + 1
                    if count == self.pods_of.get(owner):
                        self.all_bound[owner] = now
        elif change.ref == FLUXJOBS and change.type != "DELETED":
            status = obj.get("status") or {}
            if status.get("phase") == "Running":
                self.running.add(meta.get("name", ""))
            elif status.get("phase") == "Queued" and "limit" in (status.get("reason") or ""):
                self.held.add(meta.get("name", ""))
        elif change.ref == "events" and change.type == "ADDED":
            if obj.get("reason") == "Scheduled":
                self.scheduled_events += 1


class LoopLag:
    """How late the emulator's event loop runs a timer through the burst: a call due every
    `period` seconds notes how long after its due time it ran. A webhook call made on that
    loop waits as long for its answer to be read, whatever the webhook took: the emulator's
    share of the calls' latency, not the binder's."""

    def __init__(self, loop, period: float = 0.005):  # type: ignore[no-untyped-def]
        self.loop, self.period = loop, period
        self.lags: list[float] = []
        self._due = 0.0
        self._stopped = False

    def start(self) -> None:
        self.loop.call_soon_threadsafe(self._tick)

    def stop(self) -> None:
        self._stopped = True

    def _tick(self) -> None:
        now = self.loop.time()
        if self._due:
            self.lags.append(max(0.0, now - self._due))
        if not self._stopped:
            self._due = now + self.period
            self.loop.call_at(self._due, self._tick)


def indexed_job(name: str, pods: int, queue: str = "batch") -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"fluxnode.io/queue": queue}},
        "spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "worker", "image": "busybox:1.36",
                                "command": ["sh", "-c", "true"],
                                "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}},
        },
    }


def py_spy(args: argparse.Namespace, pid: int, out_path: str) -> subprocess.Popen:
    """py-spy on `pid`: samples of the threads on a CPU (by thread), or with --py-spy-idle
    every thread's stack, waiting included (where a thread's wall time goes)."""
    how = ["--idle", "--threads"] if args.py_spy_idle else ["--threads"]
    if args.py_spy_gil:
        how.append("--gil")
    return subprocess.Popen(
        [args.py_spy_cmd, "record", "--pid", str(pid), "--rate", str(args.py_spy_rate),
         "--nonblocking", *how, "--format", "raw", "--output", out_path],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ready(http_port: int) -> bool:
    """The binder's /readyz answers 200 (informers synced, its webhook serving)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def thread_cpu() -> dict[int, float]:
    """CPU seconds of every thread of this process, by native id."""
    out = {}
    for task in os.listdir("/proc/self/task"):
        try:
            out[int(task)] = cpu_of(os.getpid(), int(task))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def task_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of every thread of process `pid`, by native id."""
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(task)] = cpu_of(pid, int(task))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


THREAD_GROUPS = (("binder-loop", "loop"), ("informer-pods", "pod informer"),
                 ("informer-jobs", "Job informer"), ("informer-", "other informers"),
                 ("bind_", "bind workers"), ("process_request_thread", "webhook"),
                 ("webhook", "webhook"), ("events", "events"))


def thread_names(py_spy_cmd: str, pid: int) -> dict[int, str]:
    """Native thread id -> Python thread name of process `pid` (`py-spy dump`, which prints
    both); empty when py-spy is not installed or cannot read the process."""
    try:
        dump = subprocess.run([py_spy_cmd, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names = {}
    for line in dump.splitlines():
        if line.startswith("Thread ") and '"' in line:
            tid, _, rest = line[len("Thread "):].partition(" ")
            if tid.isdigit():
                names[int(tid)] = rest.split('"')[1]
    return names


def by_thread_group(spent: dict[int, float], names: dict[int, str]) -> dict[str, float]:
    """CPU seconds by part of the binder (its threads' names: THREAD_GROUPS), the rest
    (threads gone or unnamed, the main thread) as "other"."""
    out: dict[str, float] = {}
    for tid, seconds in spent.items():
        name = names.get(tid, "")
        group = next((g for prefix, g in THREAD_GROUPS if prefix in name), "other")
        out[group] = out.get(group, 0.0) + seconds
    return out


def webhook_buckets(port: int) -> dict[float, int]:
    """The binder's webhook duration histogram (its /metrics): upper bound in ms -> count
    of requests at most that long, every result summed."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    out: dict[float, int] = {}
    for line in text.decode().splitlines():
        if line.startswith("fluxnode_binder_webhook_duration_seconds_bucket{"):
            labels, _, value = line.rpartition(" ")
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else 1000 * float(le)
            out[bound] = out.get(bound, 0) + int(float(value))
    return out


def events_dropped(port: int) -> int:
    """Events the binder dropped because its queue of Events was full (its /metrics)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    for line in text.decode().splitlines():
        if line.startswith("fluxnode_binder_events_dropped_total "):
            return int(float(line.split()[1]))
    return 0


def bucket_quantile(buckets: dict[float, int], q: float) -> float:
    """The smallest bucket bound (ms) holding the `q` quantile of a cumulative histogram."""
    total = buckets.get(float("inf"), 0)
    for bound in sorted(buckets):
        if total and buckets[bound] >= q * total:
            return bound
    return float("nan")


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def parse_pods(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def one_at_a_time(args: argparse.Namespace, batch: client.BatchV1Api,
                  recorder: Recorder) -> dict:
    """Issue 30's latency on an empty cluster: --single Jobs of --pods pods created one at a
    time, each after the one before has all its pods bound (and is then deleted with them,
    so the next finds the cluster empty again): creation -> all bound p50, and its steps."""
    size = parse_pods(args.pods)[1]
    lat: list[float] = []
    steps: list[list[float]] = [[], [], []]
    for i in range(args.single):
        name = f"single{i:03d}"
        start = time.monotonic()
        uid = batch.create_namespaced_job(NAMESPACE, indexed_job(name, size, WARM)).metadata.uid
        wait_for(lambda uid=uid: uid in recorder.all_bound, 60, interval=0.005,
                 what=f"Job {name}'s pods bound")
        bound = recorder.all_bound[uid]
        lat.append(bound - start)
        steps[0].append(recorder.unsuspended[uid] - start)
        steps[1].append(recorder.all_created[uid] - recorder.unsuspended[uid])
        steps[2].append(bound - recorder.all_created[uid])
        batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")
        wait_for(lambda uid=uid: recorder.live_pods.get(uid, 0) == 0, 60, interval=0.005,
                 what=f"Job {name}'s pods gone")
    out = {"single_p50_s": quantile(lat, 0.5), "single_p90_s": quantile(lat, 0.9),
           "single_max_s": max(lat), "single_steps_p50_s": [quantile(x, 0.5) for x in steps]}
    print(f"{args.single} Jobs of {size} pods one at a time on the empty cluster: creation -> "
          f"all pods bound p50 {out['single_p50_s']:.3f} s, p90 {out['single_p90_s']:.3f} s, "
          f"max {out['single_max_s']:.3f} s; p50 of its steps: created -> unsuspended "
          "%.3f s, -> its pods stored %.3f s, -> all bound %.3f s"
          % tuple(out["single_steps_p50_s"]), flush=True)
    return out


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    low, high = parse_pods(args.pods)
    sizes = [rng.randint(low, high) for _ in range(args.jobs)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-workloads-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])
    os.environ["FLUXNODE_BENCH_NODES"] = str(args.nodes)
    os.environ["FLUXNODE_BENCH_CORES"] = str(args.cores)
    kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode"),
                        job_controller=True).start()
    recorder = Recorder()
    kube.store.listeners.append(recorder)
    inst = Instance(size=1, modules="binder_sim_nodes").start()
    broker_pid = inst.pids[0]
    binder = None
    binder_log = open(tmp / "binder.log", "wb")
    finished = False
    try:
        api = kube.api_client()
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load((WORKLOADS / "fluxjob-crd.yaml").read_text()))
        client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
            yaml.safe_load((WORKLOADS / "webhook.yaml").read_text()))
        for i in range(args.nodes):
            kube.add_node(f"sim{i}", cpu=str(args.cores), memory="64Gi")
        port, http_port = free_port(), free_port()
        core = client.CoreV1Api(api)
        if args.held:
            core.create_namespaced_config_map(LIMITS[0], {
                "metadata": {"name": LIMITS[1]}, "data": {"queues.yaml": "batch:\n  cores: 0\n"}})
        kube.service_endpoints[("fluxnode", "fluxnode-webhook")] = ("127.0.0.1", port)
        env = dict(os.environ)
        if args.profile_loop:
            env["FLUXNODE_BINDER_PROFILE"] = args.profile_loop
        binder = subprocess.Popen(
            [sys.executable, "-m", "fluxnode", "binder",
             "--kubeconfig", str(kube.kubeconfig_path), "--uri", inst.tcp_uri(0),
             "--curve-cert", inst.cert_path, "--no-leader-elect", "--http-port", str(http_port),
             "--webhook-port", str(port), "--webhook-host", "127.0.0.1",
             "--webhook-cert-dir", str(tmp / "certs"), "--log-level", args.binder_log_level,
             *(("--queue-limits", "/".join(LIMITS)) if args.held else ())],
            stderr=binder_log, env=env)
        wait_for(lambda: all(h["clientConfig"].get("caBundle")
                             for h in kube.get(CONFIG, "fluxnode")["webhooks"]),
                 60, what="the webhook's caBundle set by the binder")
        # the caBundle is patched before the pair it trusts is served: wait for Ready too
        wait_for(lambda: ready(http_port), 60, what="the binder ready (its webhook serving)")
        batch = client.BatchV1Api(api)
        # warm up: one Job through the whole path (a webhook call, an allocation, bindings),
        # so the binder's start and its first connections are not counted
        warm = batch.create_namespaced_job(NAMESPACE,
                                           indexed_job("warmup", 2, WARM)).metadata.uid
        wait_for(lambda: warm in recorder.all_bound and "warmup" in recorder.running, 120,
                 interval=0.05, what="the warm-up Job bound and Running")
        wait_for(lambda: recorder.scheduled_events >= 2, 60, interval=0.05,
                 what="the warm-up pods' Scheduled events")
        single = one_at_a_time(args, batch, recorder) if args.single else None
        events0 = recorder.scheduled_events
        if not args.no_gc_freeze:
            # What the setup left alive (the emulator's 5,000 Nodes, their history, the
            # client's model classes) out of the cyclic GC's sight, as the binder does once
            # started: a full collection walked it all in the burst, up to 0.4 s with the
            # emulator's loop stopped (a webhook call's p99) and ~0.9 ms of CPU a workload.
            # Frozen objects are still freed by reference counting.
            gc.collect()
            gc.freeze()

        clients = [client.BatchV1Api(kube.api_client()) for _ in range(args.clients)]
        for c in clients:  # each client's connection opened before the burst
            c.list_namespaced_job(NAMESPACE, limit=1, _preload_content=False)
        names = [f"w{i:05d}" for i in range(args.jobs)]
        created: dict[str, float] = {}  # job name -> its create call started
        uids: dict[str, str] = {}
        lock = threading.Lock()
        client_cpu: list[float] = []  # each client thread's CPU seconds, taken as it ends

        def submit(api: client.BatchV1Api, mine: list[int]) -> None:
            for i in mine:
                start = time.monotonic()
                # the answer read as JSON, not turned into the client's model objects (which
                # cost the clients more CPU than the request: the binder reads its own
                # answers this way too)
                reply = api.create_namespaced_job(NAMESPACE, indexed_job(names[i], sizes[i]),
                                                  _preload_content=False)
                uid = json.loads(reply.data)["metadata"]["uid"]
                reply.release_conn()
                with lock:
                    created[names[i]], uids[names[i]] = start, uid
            with lock:
                client_cpu.append(time.thread_time())

        spies = []
        if args.py_spy or args.py_spy_all:
            prefix = args.py_spy or args.py_spy_all
            spies.append(py_spy(args, binder.pid, f"{prefix}-binder.txt"))
            if args.py_spy_all:
                spies.append(py_spy(args, broker_pid, f"{prefix}-broker.txt"))
                spies.append(py_spy(args, os.getpid(), f"{prefix}-emulator.txt"))
            time.sleep(1.0)  # let py-spy attach before the burst (bench only, not a test)
        probe = None
        if args.probe_rate:
            ca = tmp / "webhook-ca.crt"
            ca.write_bytes(base64.b64decode(
                kube.get(CONFIG, "fluxnode")["webhooks"][0]["clientConfig"]["caBundle"]))
            probe = subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "webhook.py"), "--probe", str(port),
                 "--ca", str(ca), "--rate", str(args.probe_rate)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        threads = [threading.Thread(target=submit, args=(c, list(range(k, args.jobs,
                                                                      args.clients))))
                   for k, c in enumerate(clients)]
        main_tid = threading.get_native_id()
        emulator_tids = {"server": kube._thread.native_id,
                         "job controller": kube.job_controller._thread.native_id}

        def snapshot() -> tuple:
            return (len(kube.requests), len(kube.admission_seconds),
                    len(kube.admission_call_seconds), webhook_buckets(http_port),
                    cpu_times(binder.pid), cpu_of(broker_pid), thread_cpu(),
                    task_cpu(binder.pid))

        base = None if args.held else snapshot()  # --held: taken at the lift instead
        lag = LoopLag(kube._loop)
        lag.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        last_created = time.monotonic()
        total = sum(sizes)
        lifted = None
        if args.held:
            wait_for(lambda: len(recorder.held.intersection(names)) == args.jobs,
                     args.timeout, interval=0.05,
                     what=f"{args.jobs} FluxJobs Queued by queue batch's limit")
            if any(uids[n] in recorder.unsuspended for n in names):
                raise SystemExit("a held Job was unsuspended before the limit was lifted")
            base = snapshot()
            client_cpu.clear()  # the creations are not the queue's admission
            lifted = time.monotonic()
            core.replace_namespaced_config_map(LIMITS[1], LIMITS[0], {
                "metadata": {"name": LIMITS[1]}, "data": {"queues.yaml": "batch: {}\n"}})
        (requests0, admissions0, calls0, served0, binder0, broker0, threads0,
         binder_tasks0) = base

        def done() -> bool:
            if len(recorder.running.intersection(names)) < args.jobs:
                return False
            # every pod's Scheduled event, or the binder says it dropped some (queue full)
            return recorder.scheduled_events - events0 >= total or \
                recorder.scheduled_events - events0 + events_dropped(http_port) >= total

        wait_for(done, args.timeout, interval=0.05,
                 what=f"{args.jobs} FluxJobs Running and {total} Scheduled events")
        user, system = (b - a for a, b in zip(binder0, cpu_times(binder.pid), strict=True))
        lag.stop()
        binder_tasks = task_cpu(binder.pid)
        binder_parts = by_thread_group(
            {t: c - binder_tasks0.get(t, 0.0) for t, c in binder_tasks.items()},
            thread_names(args.py_spy_cmd, binder.pid))
        broker_cpu = cpu_of(broker_pid) - broker0
        threads1 = thread_cpu()
        probed: list[float] = []
        if probe is not None:
            out, _ = probe.communicate("", timeout=60)
            probed = json.loads(out or "[]")
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(60)
        requests = Counter(f"{r.verb} {r.resource_path}" for r in kube.requests[requests0:])
        webhook = kube.admission_seconds[admissions0:] or [0.0]
        webhook_calls = kube.admission_call_seconds[calls0:] or [0.0]
        served = {le: c - served0.get(le, 0) for le, c in webhook_buckets(http_port).items()}
        spent = {tid: threads1[tid] - threads0.get(tid, 0.0) for tid in threads1}
        # the client threads ended: they are in neither snapshot but counted as they ended
        clients_cpu = sum(client_cpu)
        main_cpu = spent.get(main_tid, 0.0)
        server_cpu = spent.get(emulator_tids["server"], 0.0)
        controller_cpu = sum(spent.get(t, 0.0) for t in
                             {emulator_tids["job controller"],
                              *getattr(kube.job_controller, "thread_ids", ())})
        # (the client threads ended before the second snapshot: not in `spent`)
        other_cpu = sum(spent.values()) - main_cpu - server_cpu - controller_cpu

        jobs = [uids[n] for n in names]
        first = min(created.values()) if lifted is None else lifted
        if lifted is not None:  # each Job's time counts from the lift
            created = dict.fromkeys(created, lifted)
        unsuspended = sorted(recorder.unsuspended[u] for u in jobs)
        last_admitted = unsuspended[-1]
        lo, hi = unsuspended[len(jobs) // 10], unsuspended[(9 * len(jobs)) // 10]
        lat = [recorder.all_bound[uids[n]] - created[n] for n in names]
        # where a Job's time goes: created -> unsuspended -> its pods stored -> all bound
        steps = [[recorder.unsuspended[uids[n]] - created[n] for n in names],
                 [recorder.all_created[uids[n]] - recorder.unsuspended[uids[n]] for n in names],
                 [recorder.all_bound[uids[n]] - recorder.all_created[uids[n]] for n in names]]
        n = args.jobs
        out = {
            "jobs": n, "pods": total,
            "admitted_per_s": n / (last_admitted - first),
            "steady_per_s": (9 * n // 10 - n // 10) / (hi - lo) if hi > lo else float("inf"),
            "creation_s": last_created - first,
            "last_bound_s": max(recorder.all_bound[u] for u in jobs) - first,
            "p50_s": quantile(lat, 0.50), "p90_s": quantile(lat, 0.90),
            "p99_s": quantile(lat, 0.99),
            "steps_p50_s": [quantile(x, 0.5) for x in steps],
            "binder_ms": 1000 * (user + system) / n,
            "binder_user_ms": 1000 * user / n, "binder_system_ms": 1000 * system / n,
            "binder_parts_ms": {k: 1000 * v / n for k, v in sorted(
                binder_parts.items(), key=lambda kv: -kv[1])},
            "broker_ms": 1000 * broker_cpu / n,
            "emulator_ms": 1000 * (server_cpu + controller_cpu + other_cpu) / n,
            "server_ms": 1000 * server_cpu / n, "controller_ms": 1000 * controller_cpu / n,
            "other_ms": 1000 * other_cpu / n,
            "clients_ms": 1000 * clients_cpu / n, "main_ms": 1000 * main_cpu / n,
            "not_suspended": recorder.not_suspended_at_creation,
            "webhook_calls": len(webhook), "webhook_p50_ms": 1000 * quantile(webhook, 0.5),
            "webhook_p99_ms": 1000 * quantile(webhook, 0.99),
            "call_p50_ms": 1000 * quantile(webhook_calls, 0.5),
            "call_p99_ms": 1000 * quantile(webhook_calls, 0.99),
            # the binder's own timing (its histogram: the bucket holding the quantile)
            "served_p50_ms": bucket_quantile(served, 0.5),
            "served_p99_ms": bucket_quantile(served, 0.99),
            "loop_lag_p50_ms": 1000 * quantile(lag.lags or [0.0], 0.5),
            "loop_lag_p99_ms": 1000 * quantile(lag.lags or [0.0], 0.99),
            "probe_calls": len(probed),
            "probe_p50_ms": 1000 * quantile(probed, 0.5) if probed else float("nan"),
            "probe_p99_ms": 1000 * quantile(probed, 0.99) if probed else float("nan"),
            "requests": dict(requests),
            "events_dropped": events_dropped(http_port),
        }
        print(f"{n} Indexed Jobs ({total} pods, {args.pods} each), {args.clients} clients"
              + (", created while queue batch was held, then its limit lifted: counted from "
                 "the lift" if lifted is not None else "") + ": "
              f"admitted {out['admitted_per_s']:.0f}/s (steady {out['steady_per_s']:.0f}/s); "
              + (f"creation took {out['creation_s']:.2f} s ({n / out['creation_s']:.0f}/s), "
                 if lifted is None else "") +
              "last Job bound at "
              f"{out['last_bound_s']:.2f} s\n"
              f"  creation -> all pods bound: p50 {out['p50_s']:.3f} s, p90 "
              f"{out['p90_s']:.3f} s, p99 {out['p99_s']:.3f} s; p50 of its steps: created -> "
              f"unsuspended %.3f s, -> its pods stored %.3f s, -> all bound %.3f s\n"
              % tuple(out["steps_p50_s"]) +
              f"  CPU ms per workload: binder {out['binder_ms']:.2f} (user "
              f"{out['binder_user_ms']:.2f}, system {out['binder_system_ms']:.2f}; by thread: "
              + ", ".join(f"{k} {v:.2f}" for k, v in out["binder_parts_ms"].items()) +
              "), scheduler "
              f"service (broker) {out['broker_ms']:.2f}; API emulator {out['emulator_ms']:.2f} "
              f"(test double: server {out['server_ms']:.2f}, Job controller "
              f"{out['controller_ms']:.2f}, other threads {out['other_ms']:.2f}); "
              f"clients {out['clients_ms']:.2f} (load); bench {out['main_ms']:.2f}\n"
              f"  admission webhook calls as the emulator made them: {len(webhook)}, "
              f"p50 {out['call_p50_ms']:.1f} ms, p99 {out['call_p99_ms']:.1f} ms (its writes "
              f"waited p50 {out['webhook_p50_ms']:.1f} ms, p99 {out['webhook_p99_ms']:.1f} ms, "
              f"its loop's resumption included); as "
              f"the binder timed them (request read -> answer ready to write, its histogram's "
              f"buckets): p50 <= {out['served_p50_ms']:g} ms, p99 <= "
              f"{out['served_p99_ms']:g} ms"
              + (f"; a probe in a process of its own ({out['probe_calls']} calls, "
                 f"{args.probe_rate:g}/s through the burst): p50 {out['probe_p50_ms']:.1f} "
                 f"ms, p99 {out['probe_p99_ms']:.1f} ms" if probed else "") + "\n"
              f"  the emulator's event loop (where it makes those calls) ran a 5 ms timer late "
              f"by p50 {out['loop_lag_p50_ms']:.1f} ms, p99 {out['loop_lag_p99_ms']:.1f} ms "
              f"({len(lag.lags)} ticks): its share of a call's time\n"
              "  API requests per workload (every client): "
              + ", ".join(f"{k} {v / n:.2f}" for k, v in requests.most_common()) + "\n"
              + (f"  Scheduled events the binder dropped (its queue full): "
                 f"{out['events_dropped']}\n" if out["events_dropped"] else "") +
              f"  load average after: {os.getloadavg()[0]:.2f}", flush=True)
        if single is not None:
            out.update(single)
        if out["not_suspended"]:
            print(f"  WARNING: {out['not_suspended']} Jobs were stored unsuspended (the "
                  "webhook did not suspend them)", flush=True)
        finished = True
        return out
    finally:
        tear_down(binder, inst, kube, binder_log, tmp, finished)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000, help="Indexed Jobs in the burst")
    p.add_argument("--pods", default="8",
                   help="pods per Job: N, or LOW-HIGH drawn per Job from the seeded generator")
    p.add_argument("--clients", type=int, default=4,
                   help="concurrent clients creating the Jobs (one connection each)")
    p.add_argument("--nodes", type=int, default=5000, help="simulated nodes")
    p.add_argument("--cores", type=int, default=8, help="cores per simulated node")
    p.add_argument("--single", type=int, default=20,
                   help="before the burst, Jobs of the largest --pods size created one at a "
                   "time on the empty cluster, for the latency p50 (0: none)")
    p.add_argument("--seed", type=int, default=1, help="seed of the pod counts")
    p.add_argument("--repeat", type=int, default=1, help="runs, each on a fresh setup")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--binder-log-level", default="warning")
    p.add_argument("--py-spy", metavar="PREFIX",
                   help="profile the binder with py-spy during the burst (raw folded stacks in "
                   "PREFIX-binder.txt)")
    p.add_argument("--py-spy-all", metavar="PREFIX",
                   help="as --py-spy, and the broker and this process (emulator + clients) too")
    p.add_argument("--py-spy-idle", action="store_true",
                   help="py-spy samples every thread, waiting included (wall time), not only "
                   "the one holding the GIL")
    p.add_argument("--py-spy-gil", action="store_true",
                   help="py-spy samples only the thread holding the GIL (where a process's "
                   "CPU goes; without it a thread waiting in a C call can count as running)")
    p.add_argument("--probe-rate", type=float, default=0.0,
                   help="admission reviews per second a probe process sends the binder's "
                   "webhook through the burst (bench/webhook.py --probe; 0: no probe; its "
                   "calls are counted in the binder's CPU)")
    p.add_argument("--profile-loop", metavar="PATH",
                   help="run the binder's loop thread under cProfile, its statistics written "
                   "to PATH when the binder stops (pstats; read with python -m pstats PATH)")
    p.add_argument("--no-gc-freeze", action="store_true",
                   help="leave the setup's objects to the cyclic GC in the burst (by default "
                   "they are frozen before it, as the binder freezes its own)")
    p.add_argument("--held", action="store_true",
                   help="create the Jobs with their queue held (a queue limit of 0 cores), "
                   "then lift the limit and count from there: the queue's admission alone")
    p.add_argument("--py-spy-rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--py-spy-cmd", default=str(Path(sys.executable).parent / "py-spy"))
    args = p.parse_args()
    low, high = parse_pods(args.pods)
    if args.jobs < 10 or low < 1 or high < low:
        p.error("--jobs at least 10, --pods N or LOW-HIGH with 1 <= LOW <= HIGH")
    print(f"workloads bench: seed {args.seed}, {args.nodes} simulated nodes x {args.cores} "
          f"cores, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
    for _ in range(args.repeat):
        run(args)


if __name__ == "__main__":
    main()
