"""Binder restarts, watch expiry, leader election, bursts, queue order, probes and metrics."""

import json
import urllib.request
from collections import Counter

from fluxnode.broker_conf import idset
from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for


def group_allocs(cluster):
    return cluster.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]


def held_cores(cluster):
    return sum(
        len(idset.decode(n["cores"]))
        for a in group_allocs(cluster)
        if a["status"] == "ALLOCATED"
        for n in a["nodes"]
    )


def test_binder_restart_mid_run_binds_nothing_twice(tmp_path):
    with BinderCluster(tmp_path, {f"node{i}": 8 for i in range(4)}) as c:
        a = c.start_binder(bind_workers=1)
        names = [f"s-{i}" for i in range(12)] + [f"g{g}-{i}" for g in range(4) for i in range(4)]
        for i in range(12):
            c.create_pod(f"s-{i}", cpu="1")
        for g in range(4):
            for i in range(4):
                c.create_pod(f"g{g}-{i}", cpu="1", group=f"g{g}", size=4)
        wait_for(lambda: sum(1 for n in names if c.node_of(n)) >= 4, 20, what="some pods bound")
        c.stop_binder(a)
        c.start_binder()
        c.wait_bound(names)
        c.assert_no_overcommit()
        ids = Counter(
            c.get_pod(n)["metadata"]["annotations"]["fluxnode.io/allocation"] for n in names
        )
        assert len(ids) == 12 + 4 and sorted(ids.values()) == [1] * 12 + [4] * 4
        assert {str(x["id"]) for x in group_allocs(c)} == set(ids)
        assert held_cores(c) == len(names)  # every pod holds exactly its one core in the graph


def test_watch_ending_with_410_gone_recovers(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder()
        c.create_pod("before", cpu="1")
        c.wait_bound(["before"])
        pods = next(i for i in b.informers if i.name == "pods")
        relists = pods.relists
        c.kube.compact()
        assert c.kube.expire_watches("pods") >= 1
        wait_for(lambda: pods.relists > relists, 10, what="pods informer to list again")
        c.create_pod("after", cpu="1")
        c.wait_bound(["after"])


def test_two_replicas_only_the_lease_holder_binds(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        opts = dict(
            leader_elect=True,
            lease_namespace="fluxnode",
            lease_duration=3.0,
            renew_deadline=2.0,
            retry_period=0.2,
        )
        one = c.start_binder(identity="replica-1", **opts)
        two = c.start_binder(identity="replica-2", **opts)
        leader = wait_for(
            lambda: [b for b in (one, two) if b.leading.is_set()], 10, what="a leader"
        )
        assert len(leader) == 1
        leader, standby = leader[0], (two if leader[0] is one else one)
        for i in range(4):
            c.create_pod(f"p-{i}", cpu="1")
        c.wait_bound([f"p-{i}" for i in range(4)])

        def scheduled_events():
            return [e for e in c.kube.list("events", "default") if e["reason"] == "Scheduled"]

        # the binder posts a pod's Scheduled event after its binding: the pod can be seen
        # bound before its event is in (a loaded CI machine showed it once)
        wait_for(lambda: len(scheduled_events()) >= 4, 10, what="4 Scheduled events")
        reporters = {e["reportingInstance"] for e in scheduled_events()}
        assert reporters == {leader.identity}
        assert not standby.leading.is_set()
        c.stop_binder(leader)  # releases the lease
        wait_for(standby.leading.is_set, 10, what="the standby to take over")
        c.create_pod("p-4", cpu="1")
        c.wait_bound(["p-4"])
        c.assert_no_overcommit()
        lease = c.kube.get("leases.coordination.k8s.io", "fluxnode-binder", "fluxnode")
        assert lease["spec"]["holderIdentity"] == standby.identity


def test_burst_of_2000_pods_in_250_groups(tmp_path):
    with BinderCluster(tmp_path, {f"node{i}": 256 for i in range(8)}) as c:
        c.start_binder()
        names = []
        for g in range(250):
            for i in range(8):
                name = f"b{g}-{i}"
                names.append(name)
                c.create_pod(name, cpu="500m", group=f"b{g}", size=8)
        c.wait_bound(names, timeout=120)
        used = c.assert_no_overcommit()
        assert sum(used.values()) == 2000 * 500
        assert len(group_allocs(c)) == 250


def test_priority_first_and_the_blocked_head_keeps_its_reservation(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        c.start_binder()
        for i in range(2):
            c.create_pod(f"run-{i}", cpu="3", group="run", size=2)
        c.wait_bound(["run-0", "run-1"])
        # head: needs two whole nodes; later small pods may only use what is not reserved for it
        for i in range(2):
            c.create_pod(f"head-{i}", cpu="4", group="head", size=2, priority=10)
        c.wait_condition("head-0", "WaitingForResources")
        c.create_pod("small", cpu="1", priority=0)
        cond = c.wait_condition("small", "WaitingForResources")
        assert cond
        c.finish("run-0")
        c.finish("run-1")
        c.wait_bound(["head-0", "head-1"])
        assert c.node_of("small") is None
        c.assert_no_overcommit()


def test_a_reservation_in_a_batch_keeps_later_groups_off_its_nodes(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        # all ready before the binder starts: one cycle, one batch (A, B, C in priority order)
        c.create_pod("a", cpu="3", priority=30)
        for i in range(3):
            c.create_pod(f"b-{i}", cpu="4", group="b", size=3, priority=20)
        c.create_pod("c", cpu="1", priority=10)
        c.start_binder()
        c.wait_bound(["a"])
        c.wait_condition("b-0", "WaitingForResources")
        # B is reserved every node: C (which would fit next to A) must not take B's cores
        c.wait_condition("c", "WaitingForResources")
        # each pass cancels the reservation and makes it again, so a single read may fall
        # between the two: wait for a pass's
        wait_for(lambda: [r["status"] for r in c.inst.rpc(
            "sched.list", {"labels": {"group": "default/group/b"}})["allocations"]]
            == ["RESERVED"], 30, what="B's reservation")
        c.finish("a")
        c.wait_bound([f"b-{i}" for i in range(3)])
        assert c.node_of("c") is None
        c.assert_no_overcommit()


def test_indexed_job_pods_form_one_group_sized_by_the_job(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        c.start_binder()
        job = c.kube.create(
            "jobs.batch",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "train", "namespace": "default"},
                "spec": {
                    "completions": 3,
                    "parallelism": 3,
                    "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "x"}]}},
                },
            },
            "default",
        )
        uid = job["metadata"]["uid"]
        # as kube's Job controller makes them: its labels and its controller reference
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
                 "controller": True, "blockOwnerDeletion": True}

        def member(name: str, index: int, owners: list) -> None:
            obj = c.pod(name, cpu="2", labels={
                "batch.kubernetes.io/job-completion-index": str(index),
                "job-name": "train", "controller-uid": uid})
            obj["metadata"]["ownerReferences"] = owners
            c.kube.create("pods", obj, "default")

        for i in range(2):
            member(f"train-{i}", i, [owner])
        c.wait_condition("train-0", "WaitingForGroup")
        # the Job's labels without its controller reference: a pod of its own, placed
        # alone, and not the member the group waits for (podgroup.py job_owner)
        member("lookalike", 2, [])
        c.wait_bound(["lookalike"])
        assert c.node_of("train-0") is None and c.node_of("train-1") is None
        c.wait_condition("train-0", "WaitingForGroup")
        member("train-2", 2, [owner])
        c.wait_bound(["train-0", "train-1", "train-2"])


def test_heterogeneous_group_gets_exactly_its_pods_shapes_and_gpus_are_assigned(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 8}, gpus={"node1": 4}) as c:
        c.start_binder()
        # 2 pods of 3 cores and 3 pods of 1 core + 1 GPU: one group, one allocation of
        # exactly 9 cores and 3 GPUs (at its largest shape it would need 15 cores and 5 GPUs)
        shapes = {
            "h-big-0": (3, 0),
            "h-big-1": (3, 0),
            "h-gpu-0": (1, 1),
            "h-gpu-1": (1, 1),
            "h-gpu-2": (1, 1),
        }
        for name, (cores, gpus) in shapes.items():
            c.create_pod(name, cpu=str(cores), gpus=gpus, group="h", size=len(shapes))
        nodes = c.wait_bound(list(shapes))
        allocs = set()
        for name, (cores, gpus) in shapes.items():
            ann = c.get_pod(name)["metadata"]["annotations"]
            assert len(idset.decode(ann["fluxnode.io/cores"])) == cores, (name, ann)
            assert len(idset.decode(ann["fluxnode.io/gpus"])) == gpus, (name, ann)
            allocs.add(int(ann["fluxnode.io/allocation"]))
            if gpus:
                assert nodes[name] == "node1"
        listed = c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
        assert [a["id"] for a in listed] == list(allocs)
        held = listed[0]["nodes"]
        assert sum(len(idset.decode(n["cores"])) for n in held) == 9
        assert sum(len(idset.decode(n["gpus"])) for n in held) == 3
        c.create_pod("gpu", cpu="1", gpus=1)
        assert c.wait_bound(["gpu"])["gpu"] == "node1"
        c.create_pod("gpu2", cpu="1", gpus=1)
        c.wait_condition("gpu2", "WaitingForResources")
        c.assert_no_overcommit()


def test_heterogeneous_group_that_fits_only_at_its_exact_shapes_is_placed(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        c.start_binder()
        # 4 + 4 x 1 cores fill both nodes exactly; 5 slots of the largest (4 cores) never would
        c.create_pod("x-big", cpu="4", group="x", size=5)
        for i in range(4):
            c.create_pod(f"x-{i}", cpu="1", group="x", size=5)
        nodes = c.wait_bound(["x-big"] + [f"x-{i}" for i in range(4)])
        assert {nodes[f"x-{i}"] for i in range(4)} == {"node0", "node1"} - {nodes["x-big"]}
        assert (
            len(idset.decode(c.get_pod("x-big")["metadata"]["annotations"]["fluxnode.io/cores"]))
            == 4
        )
        c.assert_no_overcommit()


def test_allocatable_below_capacity_bounds_placement(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        c.kube.patch("nodes", "node0", {"status": {"allocatable": {"cpu": "2500m"}}})
        c.start_binder()
        for i in range(3):
            c.create_pod(f"q-{i}", cpu="1")
        c.wait_bound(["q-0", "q-1"])
        c.wait_condition("q-2", "WaitingForResources")
        c.assert_no_overcommit()


def test_health_ready_and_metrics_endpoints(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder()
        c.create_pod("m", cpu="1")
        c.wait_bound(["m"])
        base = f"http://127.0.0.1:{b.health.port}"
        assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
        wait_for(lambda: urllib.request.urlopen(base + "/readyz").status == 200, 10, what="ready")
        # the latency is observed when the loop hears the Binding back from its bind worker,
        # which may be just after the API server shows the pod bound
        def observed() -> str | None:
            text = urllib.request.urlopen(base + "/metrics").read().decode()
            return text if "fluxnode_binder_pod_scheduling_duration_seconds_count 1.0" in text \
                else None

        text = wait_for(observed, 10, what="the pod's scheduling latency observed")
        assert 'fluxnode_binder_schedule_attempts_total{result="scheduled"} 1.0' in text
        assert "fluxnode_binder_pending_groups" in text
        json.dumps(text)  # plain text exposition


def test_leader_restart_loses_nothing_and_places_nothing_twice(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        c.start_binder(rpc_timeout=2.0)
        for i in range(2):
            c.create_pod(f"a-{i}", cpu="2", group="a", size=2)
        c.wait_bound(["a-0", "a-1"])
        c.inst.kill(0)
        c.inst.restart(0)
        for i in range(2):
            c.create_pod(f"b-{i}", cpu="2", group="b", size=2)
        c.wait_bound(["b-0", "b-1"], timeout=60)
        c.create_pod("c", cpu="1")
        c.wait_condition("c", "WaitingForResources", timeout=30)
        c.assert_no_overcommit()
        assert held_cores(c) == 8
        c.finish("a-0")
        c.finish("a-1")
        c.wait_bound(["c"], timeout=30)


def test_memory_requests_never_overcommit_a_node(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        for n in ("node0", "node1"):
            c.kube.patch("nodes", n, {"status": {"allocatable": {"memory": "4Gi"}}})
        c.create_pod(
            "kube-mem", cpu="100m", memory="2Gi", scheduler="default-scheduler", node="node0"
        )
        c.start_binder()
        for i in range(3):
            c.create_pod(f"m-{i}", cpu="1", memory="2Gi")
        c.create_pod("huge", cpu="1", memory="10Gi")
        cond = c.wait_condition("huge", "Unschedulable")
        assert "10240 MiB" in cond["message"] and "4096 MiB" in cond["message"]
        nodes = wait_for(
            lambda: (
                (b := [n for n in (f"m-{i}" for i in range(3)) if c.node_of(n)])
                and len(b) == 3
                and b
            ),
            20,
            what="3 pods bound",
        )
        assert nodes
        assert Counter(c.node_of(f"m-{i}") for i in range(3)) == {"node1": 2, "node0": 1}
        # the graph holds the memory (2 GiB is whole 512 MiB granules of a 64 GiB node)
        wait_for(
            lambda: sum(n["memory_mib"] for a in group_allocs(c) for n in a["nodes"]) == 3 * 2048,
            10,
            what="3 x 2048 MiB held in the graph",
        )
        c.create_pod("m-3", cpu="1", memory="2Gi")
        c.wait_condition("m-3", "WaitingForResources")
        c.assert_no_overcommit()


def test_a_failed_binding_frees_that_pods_share_and_retries_it(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        rule = c.kube.forbid("create", "pods/binding", "default", "f-1")
        c.start_binder()
        for i in range(2):
            c.create_pod(f"f-{i}", cpu="4", group="f", size=2)
        c.wait_bound(["f-0"])
        cond = c.wait_condition("f-1", "WaitingForResources")
        assert "binding failed" in cond["message"]
        # the bound pod keeps its share (Kubernetes cannot unbind); the failed pod's is freed
        wait_for(lambda: held_cores(c) == 4, 10, what="only f-0's cores held")
        tries = c.kube.count_requests("create", "pods")
        assert tries < 20, f"{tries} binding attempts: failed bindings must back off"
        c.kube.allow(rule)
        c.wait_bound(["f-1"])
        assert held_cores(c) == 8
        c.assert_no_overcommit()
