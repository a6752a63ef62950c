"""nodeSelector, required node affinity and taints, end to end: the binder against the
Kubernetes API emulator and a real overlay instance."""

import pytest
from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for


@pytest.fixture
def cluster(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        yield c


def create(cluster, name: str, spec: dict, **kw) -> None:
    obj = cluster.pod(name, "1", **kw)
    obj["spec"].update(spec)
    cluster.kube.create("pods", obj, "default")


def test_node_selector_affinity_and_taints_decide_where_pods_go(cluster):
    b = cluster.start_binder()
    cluster.kube.patch("nodes", "node0", {"metadata": {"labels": {"disk": "ssd", "rack": "r1"}}})
    cluster.kube.patch("nodes", "node1", {"metadata": {"labels": {"rack": "r2"}},
                                          "spec": {"taints": [{"key": "dedicated", "value": "ml",
                                                               "effect": "NoSchedule"}]}})
    wait_for(
        lambda: (
            b.state.nodes["node0"].traits.labels.get("disk") == "ssd"
            and b.state.nodes["node1"].traits.taints
        ),
        10,
        what="binder sees the labels and the taint",
    )

    create(cluster, "on-ssd", {"nodeSelector": {"disk": "ssd"}})
    create(
        cluster,
        "not-r1",
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "rack", "operator": "NotIn", "values": ["r1"]}
                                ]
                            }
                        ]
                    }
                }
            }
        },
    )
    create(cluster, "ml", {"nodeSelector": {"rack": "r2"},
                           "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                            "effect": "NoSchedule"}]})
    nodes = cluster.wait_bound(["on-ssd", "not-r1", "ml"])
    assert nodes == {"on-ssd": "node0", "not-r1": "node2", "ml": "node1"}

    # untolerated taint: four plain pods never land on node1
    for i in range(4):
        create(cluster, f"plain-{i}", {})
    plain = cluster.wait_bound([f"plain-{i}" for i in range(4)])
    assert "node1" not in plain.values()
    cluster.assert_no_overcommit()


def test_a_group_no_node_admits_is_unschedulable_in_kube_schedulers_words(cluster):
    cluster.start_binder()
    for i in range(2):
        create(cluster, f"gpu-{i}", {"nodeSelector": {"accelerator": "h100"}}, group="gpu", size=2)
    cond = cluster.wait_condition("gpu-0", "Unschedulable")
    assert (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector"
        in cond["message"]
    )
    wait_for(lambda: cluster.events("gpu-0", "FailedScheduling"), 10, what="FailedScheduling event")
    # the cluster changes: a node gets the label, and the group is placed there
    cluster.kube.patch("nodes", "node2", {"metadata": {"labels": {"accelerator": "h100"}}})
    assert set(cluster.wait_bound(["gpu-0", "gpu-1"]).values()) == {"node2"}


def test_malformed_affinity_is_unschedulable_naming_the_field(cluster):
    cluster.start_binder()
    create(
        cluster,
        "bad",
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "rack", "operator": "Near", "values": ["r1"]}
                                ]
                            }
                        ]
                    }
                }
            }
        },
    )
    cond = cluster.wait_condition("bad", "Unschedulable")
    assert "matchExpressions[0].operator" in cond["message"] and "'Near'" in cond["message"]
    create(cluster, "good", {})
    cluster.wait_bound(["good"])  # the binder carried on
