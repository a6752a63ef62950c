"""The FluxJob queue's order, reservation and backfill end to end (issue 30): real brokers,
the binder with daemonset/binder.yaml's RBAC, the API emulator's Job controller and
Priority admission plugin, three PriorityClasses and 20 Jobs.

Oracles from outside the binder: the order is computed here from the declared class values,
the Jobs' stored creationTimestamps and the order the test created them in; the head's
START from the blocker's declared activeDeadlineSeconds and the wall-clock bounds of its
admission as this test observed them; which Jobs may backfill from their declared sizes and
walltimes (a Job may start beside a reserved head only if it ends before the head's START:
the head needs every core, so there is nothing it does not need). Admission is read from
the Job objects (spec.suspend), not from the binder.

Cluster: 4 nodes of 2 cores. A blocker Job B (8 pods, walltime 1000 s) holds every core;
then 20 Jobs arrive, lowest priority first (a FIFO queue would get them all wrong):
the high Job H0 needs all 8 cores (the head), the rest need 1 or 2 cores for a short
walltime S (60 s: ends long before B's) or a long one L (3000 s: after it). Cores come
free when all pods of an allocation on a node end: B's frees them two at a time, a
1-pod Job one at a time; every short Job is a 1-pod Job, so which short Jobs run after each
step does not depend on how the binder's passes group the events."""

from __future__ import annotations

from datetime import datetime

import pytest
from faults.workloads import JobWatch
from kubernetes import client
from support.fluxjob_cluster import (
    finish_job,
    fluxjob_cluster,
    job_pods,
    priority_class,
    queued_job,
    resumed,
    start_webhook_binder,
    status,
)
from support.kubectl import parse_table, plugin

from fluxnode.testing.waiting import wait_for

CLASSES = {"high": 1000, "mid": 100, "low": 10}
S, L = 60, 3000  # walltimes, seconds
B_WALLTIME, H0_WALLTIME = 1000, 100
NODES, CORES = 4, 2
# name -> (class, pods, walltime), in the order they are created: lowest priority first
JOBS = {
    "l0": ("low", 1, S), "l1": ("low", 2, L), "l2": ("low", 1, S), "l3": ("low", 1, L),
    "l4": ("low", 1, S), "l5": ("low", 2, L),
    "m0": ("mid", 1, S), "m1": ("mid", 2, L), "m2": ("mid", 1, L), "m3": ("mid", 1, S),
    "m4": ("mid", 2, L), "m5": ("mid", 1, S), "m6": ("mid", 1, S),
    "h0": ("high", NODES * CORES, H0_WALLTIME), "h1": ("high", 2, L), "h2": ("high", 1, S),
    "h3": ("high", 1, L), "h4": ("high", 1, S), "h5": ("high", 2, L), "h6": ("high", 1, S),
}
TIMEOUT = 180


def epoch(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp())


@pytest.fixture
def cluster(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": CORES for i in range(NODES)}) as c:
        api = c.kube.api_client()
        for name, value in CLASSES.items():
            priority_class(api, name, value)
        yield c


def run_blocker(c, batch: client.BatchV1Api, pods: int) -> None:
    """A mid-priority Job of `pods` one-core pods, walltime B_WALLTIME, Running."""
    batch.create_namespaced_job("default", queued_job(
        "blocker", pods, priority_class="mid", deadline=B_WALLTIME))
    wait_for(lambda: status(c, "blocker").get("phase") == "Running", TIMEOUT,
             what="the blocker Running")


def queue_order(c) -> list[str]:
    """Priority (the class's declared value) then creation: creationTimestamp, and within
    one of its whole seconds the order this test created them in."""
    stamps = {n: c.kube.get("jobs.batch", n, "default")["metadata"]["creationTimestamp"]
              for n in JOBS}
    created = list(JOBS)
    return sorted(JOBS, key=lambda n: (-CLASSES[JOBS[n][0]], stamps[n], created.index(n)))


def settled(c, order: list[str], admitted: set[str], done: set[str]) -> bool:
    """Exactly `admitted` of the 20 run (`done` have finished); the others wait with their
    place among the waiting as POSITION."""
    if resumed(c) - {"blocker"} != admitted:
        return False
    waiting = [n for n in order if n not in admitted | done]
    return all(status(c, n).get("position") == i for i, n in enumerate(waiting, 1))


def settle(c, order: list[str], admitted: set[str], what: str,
           done: frozenset[str] | set[str] = frozenset()) -> None:
    """Wait until `settled`; on a timeout say where every Job stands."""
    try:
        wait_for(lambda: settled(c, order, admitted, set(done)), TIMEOUT, what=what)
    except TimeoutError as exc:
        seen = {n: (status(c, n).get("phase"), status(c, n).get("position"),
                    status(c, n).get("reason")) for n in order}
        raise AssertionError(f"{exc}; resumed {sorted(resumed(c))}; {seen}") from None


def test_priority_order_a_reserved_head_and_backfill_that_never_delays_it(cluster):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    watch = JobWatch(c.kube.api_client()).start()
    try:
        reserved_head_then_the_rest(c, batch, watch)
    finally:
        watch.stop()


def reserved_head_then_the_rest(c, batch: client.BatchV1Api, watch: JobWatch) -> None:
    t0 = int(datetime.now().timestamp())
    run_blocker(c, batch, NODES * CORES)
    t1 = int(datetime.now().timestamp()) + 1
    for name, (klass, pods, walltime) in JOBS.items():
        batch.create_namespaced_job("default", queued_job(
            name, pods, priority_class=klass, deadline=walltime))
    order = queue_order(c)
    assert order[0] == "h0"  # the declared sizes make it the head: it needs every core
    short = [n for n in order if JOBS[n][2] == S]
    assert all(JOBS[n][1] == 1 for n in short)  # the premise of the module's docstring

    # nothing is free: the head is reserved from the blocker's end, the rest wait in order
    settle(c, order, set(), "20 Jobs waiting in priority order")
    wait_for(lambda: status(c, "h0").get("phase") == "Reserved", TIMEOUT, what="h0 Reserved")
    head = status(c, "h0")
    start = epoch(head["start"])
    assert t0 + B_WALLTIME <= start <= t1 + B_WALLTIME, (t0, head, t1)
    assert head["reason"] == (f"reserved: its resources are booked for it from "
                              f"{head['start']}; workloads after it may use them only if "
                              "they end by then")
    for n in order[1:]:
        assert status(c, n)["phase"] == "Queued", (n, status(c, n))
    # the plugin's queue: the same order, the head's START
    table = plugin(c.kube, "queue").check().stdout
    rows = parse_table(table)[0]
    assert [r["NAMESPACE/NAME"] for r in rows[:len(order)]] == [f"default/{n}" for n in order]
    assert (rows[0]["PHASE"], rows[0]["START"]) == ("Reserved", head["start"])
    assert {j["metadata"]["labels"]["batch.kubernetes.io/job-name"]
            for j in c.kube.list("pods", "default")} == {"blocker"}  # none of theirs exists
    starts = {start}

    # the blocker's nodes come free two cores at a time: the next short Jobs in order take
    # them (they end before the head's START); long ones, of any priority, wait
    blocker_nodes = sorted({p["spec"]["nodeName"] for p in job_pods(c, "blocker")})
    assert len(blocker_nodes) == NODES
    admitted: list[str] = []
    for node in blocker_nodes[:-1]:
        for p in job_pods(c, "blocker"):
            if p["spec"]["nodeName"] == node:
                c.finish(p["metadata"]["name"])
        admitted = short[:len(admitted) + CORES]
        settle(c, order, set(admitted), f"after {node} came free: {admitted} admitted")
        starts.add(epoch(status(c, "h0")["start"]))
    # short Jobs ending free one core each: the next short one in order takes it
    done: list[str] = []
    while len(done) < len(short):
        finish_job(c, admitted[len(done)])
        done.append(admitted[len(done)])
        admitted = short[:min(len(short), len(done) + CORES * (NODES - 1))]
        settle(c, order, set(admitted) - set(done),
               f"after {done[-1]} ended: {sorted(set(admitted) - set(done))} running", done)
        assert status(c, "h0")["phase"] == "Reserved"
        starts.add(epoch(status(c, "h0")["start"]))
    assert starts == {start}  # the blocker's end decided it all along
    c.assert_no_overcommit()

    # the blocker ends (long before its walltime): the head starts, no later than its START
    before_h0 = int(datetime.now().timestamp())  # h0 can be admitted once the pods end
    finish_job(c, "blocker")
    settle(c, order, {"h0"}, "h0 admitted", set(done))
    after_h0 = int(datetime.now().timestamp()) + 1
    assert after_h0 <= start
    wait_for(lambda: status(c, "h0").get("phase") == "Running", TIMEOUT, what="h0 Running")

    # the next head waits for h0's walltime: its START says so
    wait_for(lambda: status(c, "h1").get("phase") == "Reserved", TIMEOUT, what="h1 Reserved")
    h1_start = epoch(status(c, "h1")["start"])
    assert before_h0 + H0_WALLTIME <= h1_start <= after_h0 + H0_WALLTIME
    finish_job(c, "h0")
    wait_for(lambda: status(c, "h1").get("phase") == "Running", TIMEOUT, what="h1 Running")
    assert datetime.now().timestamp() <= h1_start
    c.assert_no_overcommit()

    # the rest (all long) are admitted as the Jobs before them end, in priority order: the
    # leader numbers allocations in the order it makes them (sched.list, its own record)
    done.append("h0")
    rest = [n for n in order if n not in done]
    waves = fill(rest, NODES * CORES)
    assert len(waves) == 2, waves  # with the declared sizes: 8 cores, then the other 7
    allocated: dict[str, int] = {}
    for wave in waves:
        settle(c, order, set(wave), f"{wave} admitted", set(done))
        allocated |= fluxjob_allocations(c)
        c.assert_no_overcommit()
        for name in wave:
            finish_job(c, name)
        done += wave
    for k, a in enumerate(rest):
        for b in rest[k + 1:]:
            # b, after a in the queue and asking no less, cannot fit where a did not: a
            # smaller Job may backfill where the head does not need (EASY), a larger may not
            if JOBS[a][1] <= JOBS[b][1]:
                assert allocated[a] < allocated[b], (
                    f"{b} admitted before {a}, which is before it in the queue and asks no "
                    f"more; allocated in the order {sorted(rest, key=allocated.__getitem__)}")
    admissions = watch.snapshot()
    uids = {j["metadata"]["name"]: j["metadata"]["uid"]
            for j in c.kube.list("jobs.batch", "default")}
    assert {n: admissions[uids[n]].resumes for n in order} == dict.fromkeys(order, 1)


def fluxjob_allocations(c) -> dict[str, int]:
    """Job name -> the id of its live allocation, from the leader's record (its ``group``
    label: NAMESPACE/job/NAME.UID)."""
    out = {}
    for a in c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]:
        if a["status"] == "ALLOCATED":
            name = a["labels"]["group"].split("/job/", 1)[1].rsplit(".", 1)[0]
            out[name] = a["id"]
    return out


def fill(order: list[str], cores: int) -> list[list[str]]:
    """The Jobs in `order` as a queue without backfill admits them when all it holds ends at
    once, wave after wave: each wave the longest prefix that fits in `cores` (every pod one
    core, so a Job fits where as many cores are free)."""
    waves, left = [], list(order)
    while left:
        wave, free = [], cores
        while left and JOBS[left[0]][1] <= free:
            free -= JOBS[left[0]][1]
            wave.append(left.pop(0))
        assert wave, f"{left[0]} can never fit"
        waves.append(wave)
    return waves


def reservations(c) -> list[dict]:
    """The leader's reservations for FluxJobs (sched.list: the service's own record)."""
    return [a for a in c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})["allocations"]
            if a["status"] == "RESERVED"]


def reserved_for(c) -> list[str]:
    """The Jobs the leader holds a reservation for, once a pass has made one. A pass
    replaces last pass's reservation in one step only when the head is in its first round
    trip (queue.py); a binder that takes over cancels it first, so a single read can still
    see none; wait for a pass's, then name whose it is: the ``group`` label a Job's request
    carries is default/job/NAME.UID, the uid the API server gave the Job."""
    held = wait_for(lambda: reservations(c), TIMEOUT, what="a pass's reservation")
    uids = {f"{job['metadata']['name']}.{job['metadata']['uid']}": job["metadata"]["name"]
            for job in c.kube.list("jobs.batch", "default")}
    return [uids.get(r["labels"]["group"].removeprefix("default/job/"), r["labels"]["group"])
            for r in held]


def test_a_restarted_binder_cancels_the_held_reservation_keeps_the_order_and_admits_nothing_twice(
        cluster, tmp_path):
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    run_blocker(c, batch, 6)  # 2 of 8 cores free
    mine = {"h0": ("high", NODES * CORES, H0_WALLTIME), "l0": ("low", 1, S),
            "m1": ("mid", 2, L), "m0": ("mid", 1, S)}
    for name, (klass, pods, walltime) in mine.items():
        batch.create_namespaced_job("default", queued_job(
            name, pods, priority_class=klass, deadline=walltime))
    stamps = {n: c.kube.get("jobs.batch", n, "default")["metadata"]["creationTimestamp"]
              for n in mine}
    order = sorted(mine, key=lambda n: (-CLASSES[mine[n][0]], stamps[n], list(mine).index(n)))
    # h0 reserved; of the two free cores, the short Jobs take one each, in order
    shorts = {n for n in order if mine[n][2] == S}
    settle(c, order, shorts, "the short Jobs backfilled")
    wait_for(lambda: status(c, "h0").get("phase") == "Reserved", TIMEOUT, what="h0 Reserved")
    before = {n: status(c, n) for n in order}
    wait_for(lambda: all(len(job_pods(c, n)) == mine[n][1] for n in shorts), TIMEOUT,
             what="the short Jobs' pods")
    c.wait_bound([p["metadata"]["name"] for n in shorts for p in job_pods(c, n)], TIMEOUT)

    def admissions() -> dict:
        """Each admitted Job's spec generation (a suspend or resume bumps it) and its pods."""
        return {n: (c.kube.get("jobs.batch", n, "default")["metadata"]["generation"],
                    sorted(p["metadata"]["uid"] for p in job_pods(c, n))) for n in shorts}

    admitted = admissions()
    assert all(len(pods) == 1 for _, pods in admitted.values())
    allocations = {a["id"] for a in c.inst.rpc(
        "sched.list", {"labels": {"kind": "fluxjob"}})["allocations"] if a["status"] == "ALLOCATED"}

    [old] = c.binders
    c.stop_binder(old)
    # the stopped binder's last reservation is still the leader's: nobody cancelled it
    [held] = reservations(c)
    start_webhook_binder(c, tmp_path)
    # the new leader's binder cancels it (reconcile) and reserves the head again, from the
    # same walltimes: the same START
    wait_for(lambda: [r["id"] for r in reservations(c)] not in ([], [held["id"]]), TIMEOUT,
             what="the held reservation replaced")
    assert held["id"] not in [a["id"] for a in c.inst.rpc("sched.list", {})["allocations"]]
    settle(c, order, shorts, "the same Jobs admitted, the others in the same order")
    assert status(c, "h0")["start"] == before["h0"]["start"]
    # admitted nothing twice: the admitted Jobs untouched, their allocations the same
    assert admissions() == admitted
    assert {a["id"] for a in c.inst.rpc("sched.list", {"labels": {"kind": "fluxjob"}})[
        "allocations"] if a["status"] == "ALLOCATED"} == allocations
    c.assert_no_overcommit()


def test_a_pods_deadline_is_its_walltime_and_gives_the_head_its_start(cluster):
    c = cluster
    deadline = 700
    t0 = int(datetime.now().timestamp())
    pod = c.pod("blocker", cpu=str(CORES))  # a whole node, for at most `deadline` seconds
    pod["spec"]["activeDeadlineSeconds"] = deadline
    c.kube.create("pods", pod, "default")
    c.wait_bound(["blocker"], TIMEOUT)
    t1 = int(datetime.now().timestamp()) + 1
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job(
        "default", queued_job("h0", NODES * CORES, priority_class="high"))
    wait_for(lambda: status(c, "h0").get("start"), TIMEOUT, what="h0 Reserved with a START")
    assert status(c, "h0")["phase"] == "Reserved"
    assert t0 + deadline <= epoch(status(c, "h0")["start"]) <= t1 + deadline


def test_jobs_equal_to_a_refused_one_before_them_are_not_asked_again_in_that_pass(cluster):
    """Three Jobs of one shape, class and walltime behind a full cluster: the first in
    order is the head (Reserved); the two after it ask exactly what it asks, so in the same
    state of the cluster they cannot fit either and are not asked (a pod ending between two
    asks must not admit one of them ahead of the head: the workload fault checker's
    `order`). Their REASON names the Job before them that was refused."""
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    run_blocker(c, batch, NODES * CORES)
    names = ["e1", "e2", "e3"]
    for name in names:
        batch.create_namespaced_job("default", queued_job(
            name, 2, priority_class="mid", deadline=L))
    stamps = {n: c.kube.get("jobs.batch", n, "default")["metadata"]["creationTimestamp"]
              for n in names}
    order = sorted(names, key=lambda n: (stamps[n], names.index(n)))
    settle(c, order, set(), "three equal Jobs waiting")
    wait_for(lambda: status(c, order[0]).get("phase") == "Reserved", TIMEOUT,
             what=f"{order[0]} Reserved")
    for n in order[1:]:
        wait_for(lambda n=n: f"Job default/{order[0]}," in (status(c, n).get("reason") or ""),
                 TIMEOUT, what=f"{n}'s REASON naming {order[0]}")
        assert status(c, n)["phase"] == "Queued"
    assert reserved_for(c) == [order[0]]
    finish_job(c, "blocker")  # 8 cores free: all three fit
    settle(c, order, set(names), "the three admitted")
    c.assert_no_overcommit()


def test_jobs_created_in_one_second_are_admitted_in_the_order_they_were_created(cluster):
    """creationTimestamp has whole seconds; Jobs named against their creation order and
    created back to back (most often within one second) behind a full cluster are admitted
    in creation order, by the webhook's stamp, not by name. The oracle is the order this
    test created them in."""
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    run_blocker(c, batch, NODES * CORES)
    names = ["job-c", "job-b", "job-a"]  # each needs every core: one at a time
    wait_for(lambda: datetime.now().timestamp() % 1 < 0.5, 30, interval=0.01,
             what="the start of a second")
    for name in names:
        batch.create_namespaced_job("default", queued_job(
            name, NODES * CORES, priority_class="mid", deadline=L))
    settle(c, names, set(), "three Jobs waiting in creation order")
    admitted = []
    for blocker in ["blocker", *names[:-1]]:
        finish_job(c, blocker)
        admitted.append(names[len(admitted)])
        settle(c, names, {admitted[-1]}, f"{admitted[-1]} admitted", set(admitted[:-1]))
    c.assert_no_overcommit()


def test_jobs_admitted_together_are_resumed_in_queue_order(cluster):
    """Eight one-pod Jobs wait behind a blocker holding every core; when it ends they are
    admitted together, and the API server (a watch through the official client: the
    resourceVersion of each Job's first version not suspended) sees them resumed in queue
    order, the order this test created them in (named against it). Resume patches sent
    by several bind workers at once landed in any order."""
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    watch = JobWatch(c.kube.api_client()).start()
    try:
        run_blocker(c, batch, NODES * CORES)
        names = [f"q{i}" for i in range(8, 0, -1)]
        for name in names:
            batch.create_namespaced_job("default", queued_job(name, 1, priority_class="mid",
                                                              deadline=L))
        settle(c, names, set(), "eight Jobs waiting")
        finish_job(c, "blocker")
        settle(c, names, set(names), "all eight admitted")
        uids = {j["metadata"]["name"]: j["metadata"]["uid"]
                for j in c.kube.list("jobs.batch", "default")}
        wait_for(lambda: all(watch.snapshot().get(uids[n]) for n in names), TIMEOUT,
                 what="the watch seeing all eight resumed")
        first = {n: watch.snapshot()[uids[n]].first for n in names}
        assert sorted(names, key=first.__getitem__) == names, first
    finally:
        watch.stop()


# the words pods are told (scheduling_cycle.py; tests/scheduler/binder/test_binder_capacity)
TOO_WIDE = ("unsatisfiable: the group needs 9 cores in 9 pods but the 4 usable nodes have 8 "
            "in total; will not fit until the cluster changes")
TOO_FAT = ("unsatisfiable: a pod needs 3 cores but the largest usable node has 2; will not "
           "fit until the cluster changes")


def test_unsatisfiable_jobs_before_the_head_block_neither_its_reservation_nor_the_backfill(
        cluster):
    """Two high-priority Jobs that can never fit on this cluster (a pod of 3 cores where
    nodes have 2; 9 pods of one core where there are 8) are first in the queue, before the
    head h0 (every core) and two mid-priority one-pod Jobs, one short and one long, behind a
    blocker holding 6 of the 8 cores for B_WALLTIME. The two stay Queued saying why and
    reserve nothing; h0, the first that could fit, is Reserved from the blocker's end; the
    short Job backfills one of the two free cores and the long one (it would delay h0) waits.
    When the blocker and the short Job end, h0 is admitted past the two, which keep waiting.
    Oracles: the classes' declared values and creation order, the blocker's declared
    walltime and the wall-clock bounds of its start, the pods' unsatisfiable wording."""
    c = cluster
    batch = client.BatchV1Api(c.kube.api_client())
    t0 = int(datetime.now().timestamp())
    run_blocker(c, batch, 6)  # 2 of 8 cores free until t0 + B_WALLTIME
    t1 = int(datetime.now().timestamp()) + 1
    mine = {"fat": ("high", 1, S, "3"), "wide": ("high", 9, S, "1"),
            "h0": ("high", NODES * CORES, H0_WALLTIME, "1"), "s0": ("mid", 1, S, "1"),
            "l0": ("mid", 1, L, "1")}
    for name, (klass, pods, walltime, cpu) in mine.items():
        batch.create_namespaced_job("default", queued_job(
            name, pods, priority_class=klass, deadline=walltime, cpu=cpu))
    stamps = {n: c.kube.get("jobs.batch", n, "default")["metadata"]["creationTimestamp"]
              for n in mine}
    order = sorted(mine, key=lambda n: (-CLASSES[mine[n][0]], stamps[n], list(mine).index(n)))
    assert order[:2] == ["fat", "wide"]  # first in the queue: the premise
    settle(c, order, {"s0"}, "s0 backfilled, the others waiting in order")
    wait_for(lambda: status(c, "h0").get("phase") == "Reserved", TIMEOUT, what="h0 Reserved")
    start = epoch(status(c, "h0")["start"])
    assert t0 + B_WALLTIME <= start <= t1 + B_WALLTIME, (t0, status(c, "h0"), t1)
    for name, reason in (("fat", TOO_FAT), ("wide", TOO_WIDE)):
        wait_for(lambda name=name: status(c, name).get("reason"), TIMEOUT,
                 what=f"{name}'s REASON")
        assert (status(c, name)["phase"], status(c, name)["reason"]) == ("Queued", reason)
        assert "start" not in status(c, name)
    assert status(c, "l0")["phase"] == "Queued"
    assert reserved_for(c) == ["h0"]  # h0's alone
    c.assert_no_overcommit()

    finish_job(c, "s0")
    finish_job(c, "blocker")
    settle(c, order, {"h0"}, "h0 admitted past the two that never fit", {"s0"})
    for name, reason in (("fat", TOO_FAT), ("wide", TOO_WIDE)):
        assert (status(c, name)["phase"], status(c, name)["reason"]) == ("Queued", reason)
    assert "fat" not in resumed(c) and "wide" not in resumed(c)
    c.assert_no_overcommit()
