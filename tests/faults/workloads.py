"""The workload fault scenario's parts: two binder replicas as real processes (so kill -9
is a real kill -9: no Lease released, no answer finished), a watch that records when each
Job was admitted in the API server's own write order, and the scenario's steps.

Why processes: a binder in the test's process can only be stopped politely (its elector
steps down, its threads finish), which is not the fault the promise is about. Each replica is
``fluxnode binder`` as the Deployment runs it (leader election on the Lease
fluxnode/fluxnode-binder, the webhook served, exactly daemonset/binder.yaml's RBAC), with a
short Lease so a takeover fits the test's budget. The Service fluxnode-webhook is pointed at
a live replica, as its endpoints would be (only Ready pods).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from support.binder_cluster import BINDER_MANIFEST, BINDER_USER, BinderCluster
from support.binder_log import HEALTH, WEBHOOK, served_port
from support.paths import REPO

from fluxnode.testing.fault_schedule import FaultRunner, Planned
from fluxnode.testing.invariants import Violation, parse_idset
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for
from fluxnode.testing.workload_invariants import Admission, WorkloadSnapshot, check_workloads

LEASE = ("fluxnode", "fluxnode-binder")
QUEUE_LABEL = "fluxnode.io/queue"
FLUXJOBS = "fluxjobs.fluxnode.io"
EXAMPLE = REPO / "example" / "queued-indexed-job.yaml"
LEASE_ARGS = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5")


def served_ports(log_path: Path, identity: str) -> tuple[int, int] | None:
    """The ports `fluxnode binder` says it serves /readyz and the webhook on (both bound when
    it says so); None until it has said both."""
    health, webhook = (served_port(log_path, identity, what) for what in (HEALTH, WEBHOOK))
    return (health, webhook) if health is not None and webhook is not None else None


class BinderReplicas:
    """`fluxnode binder` processes; `kill_leader` kill -9s the one holding the Lease, waits
    for the other to take it over, then starts a new replica (a new pod) in its place;
    `kill_standby` kill -9s the other one (it serves webhook requests too: the Service
    spreads them over every Ready replica), and starts a new one in its place."""

    def __init__(self, c: BinderCluster, tmp_path: Path) -> None:
        self.c = c
        self.tmp_path = tmp_path
        self.kubeconfig = c.kube.add_identity(
            BINDER_USER,
            RbacAuthorizer.from_manifests([BINDER_MANIFEST], "fluxnode", "fluxnode-binder"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}  # identity -> its webhook port
        self.http_ports: dict[str, int] = {}  # identity -> its /readyz port
        self.started = 0
        self.kills = 0
        self.standby_kills = 0
        self.settled = time.monotonic()  # when the last takeover was seen done

    def start(self) -> str:
        """A new replica, once it serves /readyz and the webhook. It binds both to port 0 and
        logs the ports it got, read back here: no port is picked before the replica binds it,
        so none can be taken by another test's process in between (a port picked by binding
        0 and closing could be, and the replica then exited "Address already in use"; three
        attempts on fresh ports were the workaround). An exit before it serves fails here,
        with its log."""
        identity = f"binder-{self.started}"
        self.started += 1
        log_path = self.tmp_path / f"{identity}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fluxnode", "binder",
                 "--kubeconfig", str(self.kubeconfig),
                 "--uri", self.c.inst.tcp_uri(0), "--curve-cert", self.c.inst.cert_path,
                 "--lease-namespace", LEASE[0], "--lease-name", LEASE[1], *LEASE_ARGS,
                 "--identity", identity, "--resync", "1", "--http-host", "127.0.0.1",
                 "--http-port", "0", "--webhook-port", "0", "--webhook-host", "127.0.0.1",
                 "--webhook-cert-dir", str(self.tmp_path / f"{identity}-certs"),
                 "--resources-configmap", ""],
                stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: proc.poll() is not None or served_ports(log_path, identity), 60,
                 what=f"{identity} logging the ports it serves on, or exiting")
        ports = served_ports(log_path, identity)
        if ports is None:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{identity} exited with {proc.returncode} before serving: "
                               f"{log_path.read_text(errors='replace')[-2000:]}")
        http_port, port = ports
        self.procs[identity] = proc
        self.ports[identity] = port
        self.http_ports[identity] = http_port
        return identity

    def ready(self, identity: str) -> bool:
        """Its /readyz says 200: informers synced (Jobs, pods, nodes listed), webhook serving."""
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.http_ports[identity]}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def holder(self) -> str | None:
        try:
            lease = self.c.kube.get("leases.coordination.k8s.io", LEASE[1], LEASE[0])
        except Exception:
            return None
        return (lease.get("spec") or {}).get("holderIdentity")

    def serve_webhook(self, identity: str) -> None:
        """The Service's endpoints: this replica, once it is Ready as a Service requires (its
        /readyz: informers synced, the webhook serving with its certificate; its webhook port
        accepts before it has a certificate, and its caBundle is patched before that)."""
        port = self.ports[identity]
        wait_for(lambda: self.ready(identity), 90, what=f"{identity} ready")
        self.c.kube.service_endpoints[("fluxnode", "fluxnode-webhook")] = ("127.0.0.1", port)

    def up(self, standby: bool = True) -> str:
        """The first replica, holding the Lease and serving the webhook; a standby too."""
        first = self.start()
        wait_for(lambda: self.holder() == first, 60, what=f"{first} holding the Lease")
        self.serve_webhook(first)
        if standby:
            self.start()
        return first

    def lead_and_standby(self) -> tuple[str, str | None]:
        """The live replica holding the Lease, and another live one (None: there is none)."""
        lead = wait_for(lambda: (h := self.holder()) in self.procs and h, 60,
                        what="a live replica holding the Lease")
        return lead, next((i for i in self.procs if i != lead), None)

    def kill(self, identity: str) -> None:
        """kill -9 one replica's process and reap it."""
        proc = self.procs.pop(identity)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def kill_leader(self, _step: Planned | None = None, *, restart: bool = True) -> str:
        lead, other = self.lead_and_standby()
        assert other is not None, "no other replica to take the Lease over"
        self.serve_webhook(other)
        self.kill(lead)
        self.kills += 1
        t0 = time.monotonic()
        wait_for(lambda: self.holder() == other, 60, what=f"{other} taking the Lease over")
        took = time.monotonic() - t0
        new = self.start() if restart else None
        self.settled = time.monotonic()
        return (f"kill -9 lead binder {lead}: {other} took the Lease in {took:.1f}s"
                + (f"; {new} started" if new else ""))

    def kill_standby(self, _step: Planned | None = None) -> str:
        """kill -9 the replica not holding the Lease; the lead one keeps the Lease and
        serves the webhook meanwhile (the Service's endpoints lose the dead pod); the new
        replica in its place serves it once it is Ready."""
        lead, standby = self.lead_and_standby()
        if standby is None:
            return "binder-standby-kill: no standby replica; skipped"
        self.serve_webhook(lead)
        self.kill(standby)
        self.standby_kills += 1
        new = self.start()
        self.serve_webhook(new)
        held = self.holder()
        assert held == lead, f"killing the standby {standby} moved the Lease to {held}"
        self.settled = time.monotonic()
        return f"kill -9 standby binder {standby}: {lead} kept the Lease; {new} started"

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


class JobWatch:
    """Every version of the opted-in Jobs in the API server's order (a watch through the
    official client): per Job uid the resourceVersion of its first version not suspended and
    how many times it went from suspended to not."""

    def __init__(self, api: client.ApiClient, namespace: str = "default") -> None:
        self.batch = client.BatchV1Api(api)
        self.namespace = namespace
        self.admissions: dict[str, Admission] = {}
        self._suspended: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="job-watch")
        self.error: BaseException | None = None

    def start(self) -> JobWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def snapshot(self) -> dict[str, Admission]:
        with self._lock:
            return dict(self.admissions)

    def _see(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid"), int(meta.get("resourceVersion") or 0)
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        with self._lock:
            before = self._suspended.get(uid)
            self._suspended[uid] = suspended
            if not suspended and before is not False:
                seen = self.admissions.get(uid, Admission())
                self.admissions[uid] = Admission(seen.first if seen.first is not None else rv,
                                                 seen.resumes + 1)

    def _run(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:  # the start (no Job yet), or a 410: list, then watch on
                    got = self.batch.list_namespaced_job(self.namespace,
                                                         label_selector=QUEUE_LABEL,
                                                         _preload_content=False)
                    body = yaml.safe_load(got.data)
                    for item in body.get("items") or []:
                        self._see(item)
                    rv = body["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                        self.batch.list_namespaced_job, self.namespace,
                        label_selector=QUEUE_LABEL, resource_version=rv, timeout_seconds=2):
                    obj = event["raw_object"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._see(obj)
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                    continue
                self.error = exc
                return
            except Exception:  # the connection dropped: watch again from rv
                self._stop.wait(0.2)


@dataclass
class WorkloadOps:
    """The scenario's own steps. Every Job has one shape (PODS pods of one core) and one
    priority, so one that fits would fit in place of any other: their admission order must be
    their creation order. At most MAX_LIVE Jobs are unfinished at once."""

    c: BinderCluster
    replicas: BinderReplicas
    jobs_watch: JobWatch
    seed: int
    pods: int = 3
    max_live: int = 6
    # seconds a record may lag behind its Job after the last upheaval (generous: a new
    # replica's process starts slowly on a loaded machine)
    settle: float = 40.0
    runner: FaultRunner | None = None
    created: dict[str, float] = field(default_factory=dict)  # Job name -> when (monotonic)
    finished: dict[str, float] = field(default_factory=dict)  # Job name -> when we ended it
    cores: int = 0  # the cluster's, for the stall check (0: not checked)

    def __post_init__(self) -> None:
        self.batch = client.BatchV1Api(self.c.kube.api_client())

    def job(self, name: str) -> dict:
        job = yaml.safe_load(EXAMPLE.read_text())
        job["metadata"]["name"] = name
        job["spec"]["completions"] = job["spec"]["parallelism"] = self.pods
        job["spec"]["template"]["spec"]["containers"][0]["command"] = ["true"]
        return job

    def submit(self, step: Planned) -> str:
        if len(self.created) - len(self.finished) >= self.max_live:
            return "job-submit: the queue is full; skipped"
        # a name drawn from the seed: the API lists by name, so it is not the creation order
        name = f"job-{random.Random(f'{self.seed}/{step.index}').getrandbits(24):06x}"
        self.batch.create_namespaced_job("default", self.job(name))
        self.created[name] = time.monotonic()
        return f"job-submit {name}"

    def phase(self, name: str) -> str | None:
        try:
            return (self.c.kube.get(FLUXJOBS, name, "default").get("status") or {}).get("phase")
        except Exception:
            return None

    def running(self) -> list[str]:
        return sorted(n for n in self.created if n not in self.finished
                      and self.phase(n) == "Running")

    def finish_job(self, name: str) -> None:
        for pod in self.c.kube.list("pods", "default",
                                    label_selector=f"batch.kubernetes.io/job-name={name}"):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.c.finish(pod["metadata"]["name"])
        self.finished[name] = time.monotonic()

    def finish(self, step: Planned) -> str:
        running = self.running()
        if not running:
            return "job-finish: no Job running"
        name = running[int(step.pick * len(running))]
        self.finish_job(name)
        return f"job-finish {name}"

    def snapshot(self, now: float | None = None, all_due: bool = False) -> WorkloadSnapshot:
        """The API objects and the leader's allocations, read until sched.list is the same
        before and after (the binder acts meanwhile)."""
        now = time.monotonic() if now is None else now
        settled = max(self.replicas.settled,
                      self.runner.last_recovered if self.runner else 0.0)
        for _ in range(20):
            before = self.c.inst.rpc("sched.list", {})["allocations"]
            jobs = self.c.kube.list("jobs.batch", "default", label_selector=QUEUE_LABEL)
            fluxjobs = self.c.kube.list(FLUXJOBS, "default")
            pods = self.c.kube.list("pods", "default")
            after = self.c.inst.rpc("sched.list", {})["allocations"]
            if before == after:
                break
        due = set()
        for job in jobs:
            name = job["metadata"]["name"]
            last = max(self.created.get(name, now), self.finished.get(name, 0.0), settled)
            if all_due or now - last > self.settle:
                due.add(job["metadata"]["uid"])
        return WorkloadSnapshot(jobs, fluxjobs, after, pods, self.jobs_watch.snapshot(),
                                frozenset(due), tuple(self.created))

    def check(self) -> list[Violation]:
        snap = self.snapshot()
        return check_workloads(snap) + self.stalled(snap)

    def stalled(self, snap: WorkloadSnapshot) -> list[Violation]:
        """No lost wake-up: a Job still suspended, due, while the leader holds so few cores
        that it would fit (its pods take one core each, any node will do), settle seconds
        after the last Job was finished."""
        if not self.cores or self.finished and \
                time.monotonic() - max(self.finished.values()) <= self.settle:
            return []
        held = sum(len(parse_idset(n.get("cores"))) for a in snap.allocations
                   if a.get("status") == "ALLOCATED" for n in a.get("nodes") or [])
        if self.cores - held < self.pods:
            return []
        waiting = [j["metadata"]["name"] for j in snap.jobs
                   if j["metadata"]["uid"] in snap.due and (j.get("spec") or {}).get("suspend")]
        return [Violation("job-stalled", f"Jobs {waiting} still suspended while the leader "
                          f"holds {held} of {self.cores} cores and each needs {self.pods}")
                ] if waiting else []

    def unfinished(self) -> list[str]:
        return sorted(n for n in self.created if self.phase(n) != "Finished")
