"""A running Job whose parallelism is raised gets the slots it is short of, asked for as one
unit at the Job's place in the one queue (Kueue's elastic Jobs: the increase is admitted in
queue order, the running part keeps what it holds). Real brokers, the binder serving its
webhook, the API emulator with its Job controller (which makes the pods up to parallelism,
lowest missing index first).

Oracles from outside the binder: the Job controller's pods and their completion indexes;
the leader's record of the Job's allocations (``sched.list``: ids, slots in the service's
order, cores held); the pods' Bindings checked by ``assert_no_overcommit``; the queue's
order computed here from the declared PriorityClass values."""

from __future__ import annotations

from kubernetes import client
from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import (
    fluxjob_cluster,
    priority_class,
    queued_job,
    status,
)
from support.job_ledger import INDEX, allocations, bound, cores_held, live, slot, where
from support.kubectl import parse_table, plugin
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for


def growable_job(c: BinderCluster, name: str, pods: int, completions: int) -> dict:
    """An Indexed Job of `pods` pods of 1 core (`completions` in all, backoffLimit 2),
    Running: its one allocation as listed."""
    job = queued_job(name, pods)
    job["spec"]["completions"] = completions
    job["spec"]["backoffLimit"] = 2
    client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
    wait_for(lambda: status(c, name).get("phase") == "Running"
             and len(bound(c, name)) == pods, 60, what=f"{name} Running")
    (listed,) = allocations(c)
    return listed


def parallelism(c: BinderCluster, name: str, value: int) -> None:
    c.kube.patch("jobs.batch", name, {"spec": {"parallelism": value}}, "default",
                 patch_type="merge")


def pending(c: BinderCluster, name: str) -> list[dict]:
    """The Job's live pods not bound to a node."""
    return [p for p in live(c, name) if not (p.get("spec") or {}).get("nodeName")]


def assert_four_in_slots(c: BinderCluster, first: dict, grown: dict) -> None:
    """Once the Job's 4 pods are bound: the ledger's index i in slot i, the growth's slots
    numbered after the first allocation's."""
    wait_for(lambda: len(bound(c, "grow")) == 4, 60, what="indexes 0 to 3 bound")
    for i in range(2):
        (pod,) = bound(c, "grow", str(i))
        assert where(pod) == slot(first, i)
        (pod,) = bound(c, "grow", str(2 + i))
        assert where(pod) == slot(grown, i)


def ready(c: BinderCluster, pod: dict) -> None:
    """The pod Running and Ready, as its kubelet would say."""
    c.kube.patch("pods", pod["metadata"]["name"], {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}, "default", patch_type="merge")


def held_by(c: BinderCluster, first: dict) -> list[int]:
    """The ids of the allocations (not reservations) held for the Job of `first`."""
    return [a["id"] for a in allocations(c) if a["status"] == "ALLOCATED"
            and a["labels"]["group"] == first["labels"]["group"]]


def growth(c: BinderCluster, first: dict) -> dict:
    """The Job's second allocation (its growth) once the leader lists it."""
    wait_for(lambda: len(held_by(c, first)) == 2, 60, what="the growth allocated")
    (grown,) = [a for a in allocations(c) if a["id"] != first["id"]
                and a["status"] == "ALLOCATED"]
    assert grown["labels"]["group"] == first["labels"]["group"]
    return grown


def test_a_raised_parallelism_is_given_its_slots_when_they_fit(tmp_path):
    # 3 nodes of 2 cores, pods of 1 core; policy first packs the 2 running pods on one node
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        first = growable_job(c, "grow", 2, 6)
        parallelism(c, "grow", 4)
        grown = growth(c, first)
        assert grown["labels"]["kind"] == "fluxjob" and len(grown["slots"]) == 2
        assert_four_in_slots(c, first, grown)
        assert sum(map(len, cores_held(c).values())) == 4
        c.assert_no_overcommit()
        wait_for(lambda: status(c, "grow").get("pods") == "4/4", 30, what="PODS 4/4")
        st = status(c, "grow")
        assert st["phase"] == "Running" and "position" not in st and "reason" not in st
        # a pod of the growth fails: its replacement goes back into the growth's slot
        (two,) = bound(c, "grow", "2")
        assert c.kube.job_controller is not None
        # only the replacement matters here, not the Job controller's 10 s pod failure backoff
        c.kube.job_controller.backoff = 0.05
        c.finish(two["metadata"]["name"], "Failed")
        wait_for(lambda: [p for p in bound(c, "grow", "2")
                          if p["metadata"]["uid"] != two["metadata"]["uid"]], 60,
                 what="index 2 replaced")
        (again,) = bound(c, "grow", "2")
        assert where(again) == slot(grown, 0)
        assert sorted(a["id"] for a in allocations(c)) == sorted([first["id"], grown["id"]])
        c.assert_no_overcommit()
        # back to 2: the Job controller deletes the active pods beyond parallelism, not
        # Ready before Ready (manageJob; indexes 0 and 1 Ready, as a kubelet says). The
        # growth's slots are free and not needed: given back through the growth's
        # allocation, the first's kept
        for i in ("0", "1"):
            (pod,) = bound(c, "grow", i)
            ready(c, pod)
        parallelism(c, "grow", 2)
        wait_for(lambda: sorted(p["metadata"]["labels"][INDEX] for p in live(c, "grow")) ==
                 ["0", "1"], 60, what="indexes 2 and 3 deleted by the Job controller")
        wait_for(lambda: held_by(c, first) == [first["id"]], 30, what="the growth given back")
        want = {}
        for s in first["slots"]:
            want.setdefault(s["hostname"], set()).update(parse_idset(s["cores"]))
        assert cores_held(c) == want
        assert sorted(map(where, bound(c, "grow"))) == sorted(slot(first, i) for i in range(2))
        c.assert_no_overcommit()


def test_a_raise_with_no_room_waits_behind_a_higher_priority_job(tmp_path):
    """2 nodes of 2 cores: `grow` runs on one, `hold` on the other; `hi` (priority 1000)
    waits. The growth (priority 0) waits behind it, its running pods untouched; once `hold`
    ends `hi` runs there, and once `hi` ends the growth is admitted."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(2)}) as c:
        api = c.kube.api_client()
        batch = client.BatchV1Api(api)
        priority_class(api, "high", 1000)
        first = growable_job(c, "grow", 2, 4)
        batch.create_namespaced_job("default", queued_job("hold", 2))
        wait_for(lambda: status(c, "hold").get("phase") == "Running", 60, what="hold Running")
        batch.create_namespaced_job("default", queued_job("hi", 2, priority_class="high"))
        wait_for(lambda: status(c, "hi").get("position") == 1, 60, what="hi waiting")
        running = {p["metadata"]["uid"]: where(p) for p in bound(c, "grow")}
        parallelism(c, "grow", 4)
        wait_for(lambda: len(pending(c, "grow")) == 2 and status(c, "grow").get("position") == 2,
                 60, what="the growth waiting behind hi")
        st = status(c, "grow")
        assert st["phase"] == "Running" and st["pods"] == "2/4"
        assert st["reason"].startswith("scaling up: 2 more pods wait for their slots; busy:")
        assert status(c, "hi").get("phase") == "Reserved"  # the head, then the growth
        name = pending(c, "grow")[0]["metadata"]["name"]
        cond = c.wait_condition(name, "WaitingForResources")
        assert cond["message"].startswith("busy: Job default/grow grew by 2 pods")
        assert {p["metadata"]["uid"]: where(p) for p in bound(c, "grow")} == running
        # the plugin's queue lists the growth at its place among the waiting: after hi,
        # before a Job created after it (its POSITION 3), then what runs
        batch.create_namespaced_job("default", queued_job("lo", 1))
        wait_for(lambda: status(c, "lo").get("position") == 3, 60, what="lo third")
        rows = parse_table(plugin(c.kube, "queue").check().stdout)[0]
        assert [(r["POSITION"], r["NAMESPACE/NAME"], r["PHASE"]) for r in rows] == [
            ("1", "default/hi", "Reserved"), ("2", "default/grow", "Running"),
            ("3", "default/lo", "Queued"), ("-", "default/hold", "Running")]
        batch.delete_namespaced_job("lo", "default")
        wait_for(lambda: not status(c, "lo"), 30, what="lo's record gone")
        # hold ends: its node goes to hi (before the growth in the queue), not to the growth
        for p in bound(c, "hold"):
            c.finish(p["metadata"]["name"])
        wait_for(lambda: status(c, "hi").get("phase") == "Running", 60, what="hi Running")
        wait_for(lambda: status(c, "grow").get("position") == 1, 30,
                 what="the growth first in the queue")
        # now the head: reserved, START unknown (hi has no walltime); still Running
        wait_for(lambda: status(c, "grow").get("reason", "").startswith(
            "scaling up: 2 more pods wait for their slots; reserved:"), 30,
            what="the growth reserved")
        assert status(c, "grow")["phase"] == "Running"
        assert len(pending(c, "grow")) == 2
        assert held_by(c, first) == [first["id"]]
        c.assert_no_overcommit()
        # hi ends: the growth is admitted, its pods bound into its slots
        for p in bound(c, "hi"):
            c.finish(p["metadata"]["name"])
        wait_for(lambda: len(bound(c, "grow")) == 4, 60, what="the growth's pods bound")
        grown = growth(c, first)
        for i in range(2):
            (pod,) = bound(c, "grow", str(2 + i))
            assert where(pod) == slot(grown, i)
        assert {u: w for u, w in ((p["metadata"]["uid"], where(p)) for p in bound(c, "grow"))
                if u in running} == running
        wait_for(lambda: "position" not in status(c, "grow"), 30, what="POSITION cleared")
        c.assert_no_overcommit()


def test_lowering_parallelism_again_cancels_the_waiting_growth(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(2)}) as c:
        batch = client.BatchV1Api(c.kube.api_client())
        first = growable_job(c, "grow", 2, 4)
        batch.create_namespaced_job("default", queued_job("hold", 2))
        wait_for(lambda: status(c, "hold").get("phase") == "Running", 60, what="hold Running")
        parallelism(c, "grow", 4)
        # the first waiting workload: the growth is reserved (its START unknown: hold has no
        # walltime)
        wait_for(lambda: status(c, "grow").get("position") == 1
                 and "reserved:" in status(c, "grow").get("reason", ""), 60,
                 what="the growth reserved")
        # every pass cancels the reservation and makes it again: a single read may fall
        # between the two, so wait for a pass's, then name whose it is
        reservations = wait_for(lambda: [a for a in allocations(c) if a["status"] == "RESERVED"],
                                30, what="a pass's reservation")
        assert [a["labels"]["group"] for a in reservations] == [first["labels"]["group"]]
        waiting = {p["metadata"]["name"] for p in pending(c, "grow")}
        assert len(waiting) == 2
        parallelism(c, "grow", 2)
        # the Job controller deletes the active pods beyond parallelism, those on no node
        # first (manageJob): the two waiting for the growth
        wait_for(lambda: not waiting & {p["metadata"]["name"] for p in live(c, "grow")}, 60,
                 what="the waiting pods deleted by the Job controller")
        assert len(bound(c, "grow")) == 2
        wait_for(lambda: "position" not in status(c, "grow")
                 and status(c, "grow").get("pods") == "2/2", 60, what="the growth cancelled")
        assert "reason" not in status(c, "grow")
        wait_for(lambda: not [a for a in allocations(c) if a["status"] == "RESERVED"], 30,
                 what="its reservation given back")
        # hold ends; a new Job takes its node: the growth asks for nothing any more
        for p in bound(c, "hold"):
            c.finish(p["metadata"]["name"])
        batch.create_namespaced_job("default", queued_job("next", 2))
        wait_for(lambda: status(c, "next").get("phase") == "Running", 60, what="next Running")
        assert held_by(c, first) == [first["id"]]
        assert len(bound(c, "grow")) == 2
        c.assert_no_overcommit()


def test_a_restarted_binder_rebuilds_a_job_holding_two_allocations(tmp_path):
    """Both allocations are rebuilt into the Job's one ledger (each from the Bindings that
    name it): a replacement of index 0 goes back to the first's slot 0, of index 3 to the
    growth's slot 1, nothing is asked anew, and a give-back cancels through the right one."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        first = growable_job(c, "grow", 2, 4)
        parallelism(c, "grow", 4)
        grown = growth(c, first)
        wait_for(lambda: len(bound(c, "grow")) == 4, 60, what="indexes 2 and 3 bound")
        held = cores_held(c)
        (b,) = c.binders
        b2 = c.replace_binder(b)
        wait_for(lambda: b2.reconciled, 30, what="the new binder reconciled")
        assert c.kube.job_controller is not None
        # only the replacements matter here, not the Job controller's pod failure backoff
        # (10 s, then 20 s for the second failure)
        c.kube.job_controller.backoff = 0.05
        for i, (alloc, n) in {"0": (first, 0), "3": (grown, 1)}.items():
            (old,) = bound(c, "grow", i)
            c.finish(old["metadata"]["name"], "Failed")
            wait_for(lambda i=i, old=old: [p for p in bound(c, "grow", i)
                                           if p["metadata"]["uid"] != old["metadata"]["uid"]],
                     60, what=f"index {i} replaced")
            (again,) = bound(c, "grow", i)
            assert where(again) == slot(alloc, n)
        assert sorted(a["id"] for a in allocations(c)) == sorted([first["id"], grown["id"]])
        assert cores_held(c) == held
        c.assert_no_overcommit()
        # indexes 1 and 2 succeed, then 0 and 3: the Job is Complete, everything given back
        for i in ("1", "2", "0", "3"):
            (pod,) = bound(c, "grow", i)
            c.finish(pod["metadata"]["name"])
        wait_for(lambda: status(c, "grow").get("phase") == "Finished", 60, what="Finished")
        wait_for(lambda: allocations(c) == [], 30, what="both allocations freed")


def test_a_growth_no_pod_took_yet_is_given_back_at_a_restart_and_asked_again(tmp_path):
    """The growth is allocated before the Job controller makes its pods (stopped here, as a
    slow controller would be): a binder that restarts then cancels it as any FluxJob
    allocation no pod took, finds the Job short again and asks anew, and the pods, once
    made, bind into the new growth."""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        first = growable_job(c, "grow", 2, 4)
        c.kube.stop_job_controller()  # (a new one is started below)
        parallelism(c, "grow", 4)
        old = growth(c, first)
        assert len(pending(c, "grow")) == 0
        (b,) = c.binders
        b2 = c.replace_binder(b)
        wait_for(lambda: b2.reconciled, 30, what="the new binder reconciled")
        wait_for(lambda: old["id"] not in held_by(c, first) and len(held_by(c, first)) == 2,
                 60, what="the growth given back and allocated anew")
        new = growth(c, first)
        assert len(new["slots"]) == 2
        c.kube.start_job_controller()
        wait_for(lambda: len(bound(c, "grow")) == 4, 60, what="indexes 2 and 3 bound")
        for i in range(2):
            (pod,) = bound(c, "grow", str(2 + i))
            assert where(pod) == slot(new, i)
        assert sum(map(len, cores_held(c).values())) == 4
        c.assert_no_overcommit()


def test_a_raise_before_the_pods_exist_keeps_the_admitted_allocation_and_grows(tmp_path):
    """Parallelism raised after the Job was admitted but before its Job controller made its
    pods (stopped here, as a slow controller would be): the allocation it was admitted with
    takes the lowest indexes, slot i for index i, and the pods beyond it are the Job's
    growth, asked for and bound as after any raise. (Before, the pods did not fit the
    allocation: it was given back and the whole Job asked for again, its record naming the
    allocation given back.)"""
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(3)}) as c:
        c.kube.stop_job_controller()
        job = queued_job("grow", 2)
        job["spec"]["completions"] = 6
        client.BatchV1Api(c.kube.api_client()).create_namespaced_job("default", job)
        wait_for(lambda: status(c, "grow").get("phase") == "Admitted", 60, what="Admitted")
        (first,) = allocations(c)
        assert len(first["slots"]) == 2
        parallelism(c, "grow", 4)
        c.kube.start_job_controller()
        grown = growth(c, first)
        assert_four_in_slots(c, first, grown)
        wait_for(lambda: status(c, "grow").get("pods") == "4/4", 30, what="PODS 4/4")
        assert status(c, "grow")["allocation"] == first["id"]
        c.assert_no_overcommit()
