"""The binder against the Kubernetes API emulator and a real overlay instance."""

import datetime
import re

import pytest
from support.binder_cluster import BinderCluster
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for


@pytest.fixture
def cluster(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        yield c


def test_single_pod_is_bound_annotated_and_reported(cluster):
    cluster.start_binder()
    before = datetime.datetime.now(datetime.UTC)
    cluster.create_pod("solo", cpu="1500m")
    node = cluster.wait_bound(["solo"])["solo"]
    pod = cluster.get_pod("solo")
    ann = pod["metadata"]["annotations"]
    assert ann["fluxnode.io/allocation"].isdigit()
    cores = parse_idset(ann["fluxnode.io/cores"])
    assert len(cores) == 2, f"1500m must get 2 whole cores, got {sorted(cores)}"
    assert cores <= set(range(4))  # every node has cores 0-3
    assert parse_idset(ann["fluxnode.io/gpus"]) == set()
    wait_for(lambda: cluster.events("solo", "Scheduled"), 10, what="Scheduled event")
    after = datetime.datetime.now(datetime.UTC)
    (event,) = cluster.events("solo", "Scheduled")
    # Time to the second, MicroTime to the microsecond (k8s API conventions), one instant
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["firstTimestamp"]), event
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"]), event
    assert event["lastTimestamp"] == event["firstTimestamp"] == event["eventTime"][:19] + "Z"
    at = datetime.datetime.fromisoformat(event["eventTime"])
    assert before <= at <= after, (before, at, after)
    assert node in ("node0", "node1", "node2")
    allocs = cluster.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
    assert [a["id"] for a in allocs] == [int(ann["fluxnode.io/allocation"])]
    cluster.assert_no_overcommit()


def test_group_of_8_waits_for_its_8th_pod_then_binds_at_once(cluster):
    cluster.start_binder()
    for i in range(7):
        cluster.create_pod(f"g-{i}", cpu="1", group="g", size=8)
    cond = cluster.wait_condition("g-0", "WaitingForGroup")
    assert "8 pods required" in cond["message"]
    assert all(cluster.node_of(f"g-{i}") is None for i in range(7))
    cluster.create_pod("g-7", cpu="1", group="g", size=8)
    nodes = cluster.wait_bound([f"g-{i}" for i in range(8)])
    allocs = {
        cluster.get_pod(f"g-{i}")["metadata"]["annotations"]["fluxnode.io/allocation"]
        for i in range(8)
    }
    assert len(allocs) == 1, "one allocation for the whole group"
    assert len(set(nodes.values())) >= 2  # 8 cores do not fit one 4-core node
    cluster.assert_no_overcommit()


def test_group_too_big_is_unschedulable_with_the_reason(cluster):
    cluster.start_binder()
    for i in range(4):
        cluster.create_pod(f"big-{i}", cpu="4", group="big", size=4)
    cond = cluster.wait_condition("big-0", "Unschedulable")
    assert "16 cores" in cond["message"] and "12" in cond["message"], cond["message"]
    wait_for(lambda: cluster.events("big-0", "FailedScheduling"), 10, what="FailedScheduling event")
    cluster.create_pod("huge", cpu="6")
    cond = cluster.wait_condition("huge", "Unschedulable")
    assert "6 cores" in cond["message"] and "largest usable node has 4" in cond["message"]


def test_finished_pods_free_resources_and_a_waiting_group_binds(cluster):
    cluster.start_binder()
    for i in range(3):
        cluster.create_pod(f"a-{i}", cpu="4", group="a", size=3)
    cluster.wait_bound([f"a-{i}" for i in range(3)])
    for i in range(2):
        cluster.create_pod(f"b-{i}", cpu="4", group="b", size=2)
    cond = cluster.wait_condition("b-0", "WaitingForResources")
    assert "will" in cond["message"]
    cluster.finish("a-0")
    cluster.kube.delete("pods", "a-1", "default")
    cluster.wait_bound(["b-0", "b-1"])
    cluster.assert_no_overcommit()
    cluster.finish("a-2", "Failed")
    wait_for(
        lambda: (
            len(cluster.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]) == 1
        ),
        10,
        what="group a's allocation gone",
    )


def test_pods_of_other_schedulers_reduce_what_fluxnode_places(cluster):
    cluster.start_binder()
    for n in ("node0", "node1"):
        cluster.create_pod(f"kube-{n}", cpu="3", scheduler="default-scheduler", node=n)
    for i in range(3):
        cluster.create_pod(f"f-{i}", cpu="2", group="f", size=3)
    # 2 cores of each pod; node2 has 4, node0/node1 1 each: 3 pods cannot fit
    cond = cluster.wait_condition("f-0", "WaitingForResources")
    assert cond
    cluster.finish("kube-node0")
    cluster.wait_bound([f"f-{i}" for i in range(3)])
    cluster.assert_no_overcommit()


def test_cordoned_and_notready_nodes_are_skipped(cluster):
    b = cluster.start_binder()
    cluster.kube.patch("nodes", "node0", {"spec": {"unschedulable": True}})
    cluster.kube.set_node_ready("node1", False)
    # the node and pod watches are separate streams: let the binder see the nodes first
    wait_for(
        lambda: (
            b.state.nodes["node0"].reason == "cordoned"
            and b.state.nodes["node1"].reason == "NotReady"
        ),
        10,
        what="binder sees node0 cordoned and node1 NotReady",
    )
    for i in range(4):
        cluster.create_pod(f"c-{i}", cpu="1")
    nodes = cluster.wait_bound([f"c-{i}" for i in range(4)])
    assert set(nodes.values()) == {"node2"}
    cluster.create_pod("c-4", cpu="1")
    cluster.wait_condition("c-4", "WaitingForResources")
    cluster.kube.set_node_ready("node1", True)
    assert cluster.wait_bound(["c-4"])["c-4"] == "node1"
