"""The binder against the Kubernetes API emulator and a real overlay instance."""

import pytest
from support.binder_cluster import BinderCluster
from support.waiting import wait_for


@pytest.fixture
def cluster(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        yield c


def test_single_pod_is_bound_annotated_and_reported(cluster):
    cluster.start_binder()
    cluster.create_pod("solo", cpu="1500m")
    node = cluster.wait_bound(["solo"])["solo"]
    pod = cluster.get_pod("solo")
    ann = pod["metadata"]["annotations"]
    assert ann["fluxnode.io/allocation"].isdigit()
    assert len(ann["fluxnode.io/cores"].replace("-", ",").split(",")) >= 1
    wait_for(lambda: cluster.events("solo", "Scheduled"), 10, what="Scheduled event")
    assert node in ("node0", "node1", "node2")
    allocs = cluster.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
    assert [a["id"] for a in allocs] == [int(ann["fluxnode.io/allocation"])]
    cluster.assert_no_overcommit()
