"""The emulator deletes pods as the API server does (graceful deletion), and the binder keeps a
terminating pod's cores held until the pod is really gone, as kube-scheduler does.

The rules (pod strategy CheckGracefulDelete, registry BeforeDelete): a bound, running pod is
not removed by a DELETE but marked (deletionTimestamp, deletionGracePeriodSeconds from the
request or the pod's terminationGracePeriodSeconds, default 30) until the kubelet has stopped
it; a pod never bound, or Succeeded/Failed, or a DELETE with gracePeriodSeconds=0 removes it
at once; a second DELETE may shorten the grace period, never lengthen it."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for


def pod(name: str, node: str | None = None, grace: int | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def gone(core, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "default")
    except ApiException as exc:
        return exc.status == 404
    return False


@pytest.fixture
def core(kube):
    kube.hold_terminations = True
    return client.CoreV1Api(kube.api_client())


def test_a_bound_pod_terminates_for_its_grace_period(kube, core):
    core.create_namespaced_pod("default", pod("bound", node="n1"))
    core.delete_namespaced_pod("bound", "default")
    p = core.read_namespaced_pod("bound", "default")
    assert p.metadata.deletion_timestamp is not None
    assert p.metadata.deletion_grace_period_seconds == 30  # the pod spec default
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=10)  # shortens
    assert core.read_namespaced_pod("bound", "default").metadata.deletion_grace_period_seconds == 10
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=60)  # cannot lengthen
    assert core.read_namespaced_pod("bound", "default").metadata.deletion_grace_period_seconds == 10
    assert kube.finish_terminations() >= 1
    assert gone(core, "bound")


def test_the_pods_own_grace_period_and_immediate_cases(kube, core):
    core.create_namespaced_pod("default", pod("own", node="n1", grace=5))
    core.delete_namespaced_pod("own", "default")
    assert core.read_namespaced_pod("own", "default").metadata.deletion_grace_period_seconds == 5
    core.create_namespaced_pod("default", pod("unbound"))
    core.delete_namespaced_pod("unbound", "default")
    assert gone(core, "unbound")  # never bound: nothing to stop
    core.create_namespaced_pod("default", pod("done", node="n1"))
    kube.set_pod_phase("done", "Succeeded")
    core.delete_namespaced_pod("done", "default")
    assert gone(core, "done")
    core.create_namespaced_pod("default", pod("forced", node="n1"))
    core.delete_namespaced_pod("forced", "default", grace_period_seconds=0)
    assert gone(core, "forced")
    forced = client.V1DeleteOptions(grace_period_seconds=0)
    core.delete_namespaced_pod("own", "default", body=forced)
    assert gone(core, "own")  # a forced delete of a terminating pod removes it


def test_the_kubelet_finishes_by_itself_when_not_held(kube, core):
    kube.hold_terminations = False
    core.create_namespaced_pod("default", pod("p", node="n1"))
    core.delete_namespaced_pod("p", "default")
    wait_for(lambda: gone(core, "p"), 10, what="the emulated kubelet to finish the deletion")


def test_a_terminating_pod_keeps_its_core_until_it_is_gone(tmp_path, kube):
    with BinderCluster(tmp_path, {"node0": 1}, emulator=kube) as c:
        b = c.start_binder()
        core = client.CoreV1Api(kube.api_client())
        c.create_pod("old", cpu="1")
        c.wait_bound(["old"])
        kube.set_pod_phase("old", "Running")
        c.create_pod("new", cpu="1")
        c.wait_condition("new", "WaitingForResources")
        kube.hold_terminations = True
        core.delete_namespaced_pod("old", "default")  # `kubectl delete pod old`: 30 s to stop
        wait_for(lambda: b.state.pods.get(c.get_pod("old")["metadata"]["uid"]) is not None
                 and b.state.pods[c.get_pod("old")["metadata"]["uid"]].deleting, 10,
                 what="the binder to see the pod terminating")
        c.create_pod("nudge", cpu="1")  # a cycle runs after the binder saw the termination
        c.wait_condition("nudge", "WaitingForResources")
        assert not c.node_of("new") and not c.node_of("nudge")
        c.assert_no_overcommit()
        assert kube.finish_terminations() == 1  # the kubelet has stopped the containers
        wait_for(lambda: sum(1 for n in ("new", "nudge") if c.node_of(n)) == 1, 20,
                 what="one waiting pod bound on the freed core")
        c.assert_no_overcommit()
