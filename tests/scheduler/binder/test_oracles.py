"""The binder tests' oracle can fail: pods written straight into the API emulator, as a
broken binder would leave them, must be caught by BinderCluster.assert_no_overcommit.

No broker and no binder here: the cluster object is used only for its view of the
nodes (node0/node1 with 4 cores, node1 with 2 GPUs) and its check of the API objects.
"""

import re

import pytest
from support.binder_cluster import BinderCluster
from support.oracles import parse_idset, spec_requests

from fluxnode.testing.kube_emulator import KubeEmulator


@pytest.fixture
def cluster(tmp_path):
    with KubeEmulator() as kube:
        c = BinderCluster(tmp_path, {"node0": 4, "node1": 4}, gpus={"node1": 2}, emulator=kube)
        c.add_node("node0", 4)
        c.add_node("node1", 4, gpus=2)
        yield c


def bound(c, name, node, cpu, *, cores=None, gpus="", gpu_request=0, rank=None):
    """A running pod on `node`; with `cores` it carries the annotations of a fluxnode Binding."""
    obj = c.pod(name, cpu, gpus=gpu_request, node=node, scheduler="fluxnode" if cores is not None else "default-scheduler")
    if cores is not None:
        obj["metadata"]["annotations"] = {
            "fluxnode.io/allocation": "1", "fluxnode.io/rank": str(node[-1] if rank is None else rank),
            "fluxnode.io/cores": cores, "fluxnode.io/gpus": gpus, "fluxnode.io/group": "",
        }
    obj["status"]["phase"] = "Running"
    return c.kube.create("pods", obj, "default")


def test_a_correct_placement_passes(cluster):
    bound(cluster, "a", "node0", "1500m", cores="0-1")
    bound(cluster, "b", "node0", "2", cores="2-3")
    bound(cluster, "g", "node1", "1", cores="0", gpus="0-1", gpu_request=2)
    bound(cluster, "k", "node1", "3")  # another scheduler's pod: 3 cores of node1's 4
    assert cluster.assert_no_overcommit() == {"node0": 3500, "node1": 4000}


@pytest.mark.parametrize("pods, message", [
    ([("a", "node0", "1500m", "0")], "1500m CPU (= 2 whole cores) but was given cores [0]"),  # rounded down
    ([("a", "node0", "1", "0-1")], "1000m CPU (= 1 whole cores) but was given cores [0, 1]"),  # one too many
    ([("a", "node0", "1", "0"), ("b", "node0", "1", "0")], "core 0 of node0 given to a and b"),
    ([("a", "node0", "2", "3-4")], "cores [3, 4] not all on node0"),
    ([("a", "node0", "2", "0-1"), ("k", "node0", "3", None)], "node0: pods hold 5000m CPU > 4000m allocatable"),
])
def test_what_a_broken_binder_would_leave_fails(cluster, pods, message):
    for name, node, cpu, cores in pods:
        bound(cluster, name, node, cpu, cores=cores)
    with pytest.raises(AssertionError, match=re.escape(message)):
        cluster.assert_no_overcommit()


def test_gpus_and_rank_are_checked(cluster):
    bound(cluster, "g", "node1", "1", cores="0", gpus="0", gpu_request=2)
    with pytest.raises(AssertionError, match="asks for 2 GPUs but was given"):
        cluster.assert_no_overcommit()
    cluster.kube.delete("pods", "g", "default")
    bound(cluster, "r", "node1", "1", cores="0", rank=0)
    with pytest.raises(AssertionError, match="fluxnode.io/rank is '0'"):
        cluster.assert_no_overcommit()


def test_the_oracles_parse_on_their_own():
    assert parse_idset("") == set() and parse_idset("0-3,7") == {0, 1, 2, 3, 7}
    for bad in ("3-1", "0-2,2", "x"):
        with pytest.raises((AssertionError, ValueError)):
            parse_idset(bad)
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}},
                                   {"resources": {"limits": {"cpu": "250m", "nvidia.com/gpu": "1"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
                    "overhead": {"cpu": "100m"}}}
    # max(1.5 + 0.25, 3 for the init container) + 0.1 overhead
    assert spec_requests(pod) == (3100, 1 << 30, 1)
