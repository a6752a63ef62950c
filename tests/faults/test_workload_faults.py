"""Issue 30's promise under faults: a restart of either binder replica or of the leader loses
no workload, admits nothing twice and keeps the order.

Opted-in Indexed Jobs (the emulator's Job controller, the binder's webhook, the FluxJob
CRD: daemonset/workloads/) are submitted and finished while a seeded schedule
(fluxnode.testing.fault_schedule) kill -9s the lead binder replica (a real process; the
other replica takes over through the Lease, a new one starts in its place), the standby
replica (it was serving webhook requests; the lead one keeps the Lease, a new one starts in
its place and serves them) and rank 0 (it restarts and replays its journal), mid-queue: the
cluster holds two Jobs at a time, the others wait. After every step, from outside the
binder: THE checker of invariants.py (no core twice, the leader consistent with its journal
and the pods), and workload_invariants.py's (every Job has its FluxJob, none Failed, none
holding two allocations or resumed twice, one Job's pods in one allocation, equal Jobs
admitted in creation order as the API server's watch saw them), and no Job left suspended
while it would fit (a lost wake-up). At the end every Job is finished in turn and must
reach Finished. A schedule the budget cuts short (a loaded machine) is topped up at its end
to MIN_JOBS Jobs and one fault of each kind it did not reach. Seed fixed and printed
($FLUXNODE_FAULT_SEED replays); the schedule's wall time is bounded by
$FLUXNODE_FAULT_WORKLOAD_BUDGET (seconds, default 40).

Whether the random schedule starts a replica while Jobs queue and later hands it the Lease
depends on timing; the second test does exactly that, every time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest
from faults.workloads import BinderReplicas, JobWatch, WorkloadOps
from kubernetes import client
from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import install_workloads

from fluxnode.testing.fault_schedule import FaultRunner, Planned, StepFailed, choose_seed, plan
from fluxnode.testing.invariants import check, gather
from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.waiting import wait_for
from fluxnode.testing.workload_invariants import check_workloads

CONFIG = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
NODES = {f"node{i}": 2 for i in range(4)}  # 8 cores: two Jobs of 3 pods at a time
WEIGHTS = {"job-submit": 40, "job-finish": 25, "binder-kill": 12, "binder-standby-kill": 8,
           "kill-leader": 10, "kill-leader-outage": 4}
BUDGET = float(os.environ.get("FLUXNODE_FAULT_WORKLOAD_BUDGET", "40"))
MAX_STEPS = 200
MIN_JOBS = 5  # more than the two that fit: some wait through the faults
DRAIN = 180.0  # seconds for the Jobs left at the end to run and finish, one after another


@dataclass
class Setup:
    c: BinderCluster
    api: client.ApiClient
    replicas: BinderReplicas
    jobs_watch: JobWatch


@pytest.fixture
def setup(tmp_path):
    kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode"),
                        job_controller=True).start()
    replicas: BinderReplicas | None = None
    jobs_watch: JobWatch | None = None
    try:
        api = kube.api_client()
        install_workloads(api)
        with BinderCluster(tmp_path, NODES, emulator=kube) as c:
            replicas = BinderReplicas(c, tmp_path)
            jobs_watch = JobWatch(api).start()
            yield Setup(c, api, replicas, jobs_watch)
            jobs_watch.stop()
            replicas.stop()
    finally:
        if jobs_watch is not None:
            jobs_watch.stop()
        if replicas is not None:
            replicas.stop()
        kube.stop()


def webhook_ready(s: Setup) -> None:
    wait_for(lambda: all(h["clientConfig"].get("caBundle")
                         for h in s.c.kube.get(CONFIG, "fluxnode")["webhooks"]),
             60, what="the webhook's caBundle set by the binder")


def drain(ops: WorkloadOps, seed: int, replay: str) -> None:
    """The Jobs left run and finish in turn: each must reach Finished."""
    def drained() -> bool:
        for name in ops.running():
            ops.finish_job(name)
        return not ops.unfinished()

    try:
        wait_for(drained, DRAIN, interval=0.2, what="every Job Finished")
    except TimeoutError as exc:
        raise AssertionError(
            f"seed {seed}: {exc}: {[(n, ops.phase(n)) for n in ops.unfinished()]}; "
            f"{check_workloads(ops.snapshot(all_due=True))}\n{replay}") from None


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_restarts_of_binders_and_leader_lose_no_job_admit_none_twice_keep_order(setup):
    s, c = setup, setup.c
    seed = choose_seed(default=3030)
    print(f"workload fault schedule seed {seed} (FLUXNODE_FAULT_SEED={seed} replays it)")
    s.replicas.up()
    webhook_ready(s)
    ops = WorkloadOps(c, s.replicas, s.jobs_watch, seed, cores=sum(NODES.values()))
    core = client.CoreV1Api(s.api)
    runner = FaultRunner(
        c.inst, seed, recovery_timeout=60, core_api=core, exhaustive=False, log=print,
        alloc_at_restart=False,
        extra_ops={"job-submit": ops.submit, "job-finish": ops.finish,
                   "binder-kill": s.replicas.kill_leader,
                   "binder-standby-kill": s.replicas.kill_standby},
        extra_checks=[ops.check])
    ops.runner = runner
    report = runner.run(plan(seed, MAX_STEPS, WEIGHTS), deadline=time.monotonic() + BUDGET)
    # a schedule the budget cut short (a loaded machine) is topped up: Jobs to MIN_JOBS,
    # then a fault of each kind it did not reach, still mid-queue; each step checked
    top_up = ["job-submit"] * max(0, MIN_JOBS - len(ops.created))
    top_up += [] if s.replicas.kills else ["binder-kill"]
    top_up += [] if s.replicas.standby_kills else ["binder-standby-kill"]
    top_up += [] if report.faults["kill-leader"] + report.faults["kill-leader-outage"] \
        else ["kill-leader"]
    for kind in top_up:
        if not report.ok:
            break
        try:
            runner.step(Planned(len(report.steps), kind, 0.0, 0.0))
        except StepFailed:
            pass
    print(report.summary(), f"Jobs submitted: {len(ops.created)}, finished by the "
          f"schedule: {len(ops.finished)}, binder kills: {s.replicas.kills} lead, "
          f"{s.replicas.standby_kills} standby", sep="\n")
    assert report.ok, report.replay_text()
    drain(ops, seed, report.replay_text())
    final = check_workloads(ops.snapshot(all_due=True))
    final += check(gather(c.inst.rpc, runner.journal_path, core_api=core))
    assert final == [], f"seed {seed}: {final}\n{report.replay_text()}"
    assert len(s.jobs_watch.snapshot()) == len(ops.created) >= MIN_JOBS, ops.created
    assert s.replicas.kills >= 1 and s.replicas.standby_kills >= 1, report.summary()
    assert report.faults["kill-leader"] + report.faults["kill-leader-outage"] >= 1, \
        report.summary()


def next_second() -> None:
    """Until the clock is in the next whole second: creationTimestamp has whole seconds, and
    Jobs of one second have no order to keep."""
    now = int(time.time())
    wait_for(lambda: int(time.time()) > now, 5, interval=0.01, what="the next second")


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_replica_started_with_jobs_queued_takes_over_and_keeps_their_order(setup):
    """Jobs queued behind a full cluster, named against their creation order; a new replica
    starts (its informer's first list comes by name), the leader is kill -9'd, the new one
    takes over, the cluster frees up: the Jobs are admitted in creation order."""
    s, c = setup, setup.c
    first = s.replicas.up(standby=False)
    webhook_ready(s)
    ops = WorkloadOps(c, s.replicas, s.jobs_watch, seed=0)
    for i in range(3):  # 6 of 8 cores held by pods of 2: no Job of 3 fits
        c.create_pod(f"blocker-{i}", cpu="2")
    c.wait_bound([f"blocker-{i}" for i in range(3)], 60)
    names = ["job-z", "job-m", "job-a"]
    for name in names:
        next_second()
        ops.batch.create_namespaced_job("default", ops.job(name))
        ops.created[name] = time.monotonic()
    # waiting: the head Reserved (its resources booked behind the blockers), the rest Queued
    wait_for(lambda: all(ops.phase(n) in ("Queued", "Reserved") for n in names), 60,
             what="the three FluxJobs waiting (Queued or Reserved)")
    new = s.replicas.start()
    wait_for(lambda: s.replicas.ready(new), 90, what=f"{new} ready (its informers synced)")
    said = s.replicas.kill_leader(restart=False)
    assert said.startswith(f"kill -9 lead binder {first}: {new} took the Lease"), said
    for i in range(3):
        c.kube.delete("pods", f"blocker-{i}", "default")
    drain(ops, 0, said)
    admitted = s.jobs_watch.snapshot()
    jobs = {j["metadata"]["name"]: j["metadata"]["uid"]
            for j in c.kube.list("jobs.batch", "default")}
    order = sorted(names, key=lambda n: admitted[jobs[n]].first)
    assert order == names, f"admitted in the order {order}, created as {names}"
    assert check_workloads(ops.snapshot(all_due=True)) == []
