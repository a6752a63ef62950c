"""Pod groups as workloads end to end (issue 30): real brokers, the binder with exactly
daemonset/binder.yaml's RBAC serving its webhook, the API emulator calling that webhook
(daemonset/workloads/ applied), the PodGroup CRDs of scheduler-plugins and Volcano as those
projects ship them (support/podgroup_crds.py), kubectl and the official client.

Oracles from outside the binder: the PodGroup objects the test creates (their uid is the
owner a record must name; their minMember the size), the leader's record of allocations
(``sched.list``), the pods' Bindings checked by ``assert_no_overcommit``, the FluxJob CRD's
printer columns as kubectl prints them, and the words docs/workloads.md promises."""

from __future__ import annotations

import json

import pytest
from fluxnode.scheduler.binder.podgroup import SCHEDULER_PLUGINS, VOLCANO, GroupKey
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import fluxjob_cluster
from support.kubectl import kubectl, parse_table, plugin
from support.podgroup_crds import podgroup, scheduler_plugins_crd, volcano_crd

from fluxnode.testing.waiting import wait_for

FLUXJOBS = "fluxjobs.fluxnode.io"
QUEUE = {"fluxnode.io/queue": "batch"}


@pytest.fixture
def cluster(tmp_path):
    with fluxjob_cluster(tmp_path, {f"node{i}": 2 for i in range(2)}, job_controller=False,
                         podgroup_discovery=0.5) as c:
        yield c


def member(name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    """A plain pod opted in with the queue label, as a user writes it (no scheduler name,
    no gate: the webhook adds both)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {**QUEUE, **(labels or {})},
                         "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}}


def record(c: BinderCluster, name: str) -> dict | None:
    try:
        return c.kube.get(FLUXJOBS, name, "default")
    except Exception:
        return None


def status(c: BinderCluster, name: str) -> dict:
    return (record(c, name) or {}).get("status") or {}


def test_a_scheduler_plugins_group_waits_for_its_podgroup_then_runs_with_its_record(cluster):
    c = cluster
    b = c.binders[0]
    api = c.kube.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    # the CRD is installed after the binder started: discovery finds it
    client.ApiextensionsV1Api(api).create_custom_resource_definition(scheduler_plugins_crd())
    wait_for(lambda: b.podgroups.installed(SCHEDULER_PLUGINS), 30,
             what="the scheduler-plugins PodGroup CRD discovered")
    for name in ("a", "b"):
        made = core.create_namespaced_pod("default", member(
            name, {"scheduling.x-k8s.io/pod-group": "g"}))
        assert [g.name for g in made.spec.scheduling_gates] == ["fluxnode.io/admission"]
    waiting = ("waiting for PodGroup default/g (scheduling.x-k8s.io/v1alpha1): it does not "
               "exist yet; create it with spec.minMember, the group's size")
    for name in ("a", "b"):
        cond = c.wait_condition(name, "WaitingForGroup", timeout=30)
        assert cond["message"] == waiting
    wait_for(lambda: status(c, "group-g").get("reason") == waiting, 30,
             what="the group's record saying it waits for its PodGroup")
    queued = record(c, "group-g")
    assert queued["status"]["phase"] == "Queued" and queued["status"]["pods"] == "0/1"
    assert queued["spec"]["workload"] == {"apiVersion": "fluxnode.io/v1alpha1",
                                          "kind": "PodGroup", "name": "g"}
    assert c.node_of("a") is None and c.node_of("b") is None
    # the PodGroup appears: its minMember (2) is the size, the group is placed as one
    made = custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups",
        podgroup("scheduling.x-k8s.io/v1alpha1", "g", 2))
    nodes = c.wait_bound(["a", "b"], timeout=60)
    c.assert_no_overcommit()
    (listed,) = [a for a in c.inst.rpc("sched.list", {})["allocations"]
                 if (a.get("labels") or {}).get("group") == "default/group/g"]
    assert sorted(s["hostname"] for s in listed["slots"]) == sorted(nodes.values())
    wait_for(lambda: status(c, "group-g").get("phase") == "Running", 30,
             what="the group's record Running")
    assert status(c, "group-g")["pods"] == "2/2"
    sized = record(c, "group-g")
    assert sized["spec"]["pods"] == 2
    # from now on the record is the PodGroup's (collected with it)
    assert sized["metadata"]["ownerReferences"] == [{
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "name": "g",
        "uid": made["metadata"]["uid"], "blockOwnerDeletion": False}]
    [[row]] = parse_table(kubectl(c.kube, "get", "fluxjobs", "-A").check().stdout)
    assert (row["NAME"], row["QUEUE"], row["PHASE"], row["PODS"]) == (
        "group-g", "batch", "Running", "2/2")
    [[entry]] = parse_table(plugin(c.kube, "queue", "-A").check().stdout)
    assert (entry["NAMESPACE/NAME"], entry["PHASE"], entry["PODS"]) == (
        "default/group-g", "Running", "2/2")
    why = plugin(c.kube, "why", "a").check().stdout
    assert "in pod group default/g: FluxJob group-g is Running, pods bound 2/2" in why
    # the binder deletes the record once the group's pods are all gone
    for name in ("a", "b"):
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    wait_for(lambda: record(c, "group-g") is None, 30, what="the record deleted with its pods")


def test_a_volcano_group_is_sized_by_its_podgroup_and_its_record_is_owned_by_it(cluster):
    c = cluster
    b = c.binders[0]
    api = c.kube.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    client.ApiextensionsV1Api(api).create_custom_resource_definition(volcano_crd())
    wait_for(lambda: b.podgroups.installed(VOLCANO), 30, what="Volcano's CRD discovered")
    made = custom.create_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", "default", "podgroups",
        podgroup("scheduling.volcano.sh/v1beta1", "vg", 2))
    wait_for(lambda: b.podgroups.get(VOLCANO, "default", "vg"), 30, what="the PodGroup listed")
    annotation = {"scheduling.k8s.io/group-name": "vg"}
    core.create_namespaced_pod("default", member("v0", annotations=annotation))
    wait_for(lambda: status(c, "volcano-vg").get("reason") ==
             "waiting for group default/vg: 1 of 2 pods exist", 30,
             what="the record of an incomplete group")
    core.create_namespaced_pod("default", member("v1", annotations=annotation))
    c.wait_bound(["v0", "v1"], timeout=60)
    # a third member is refused by the webhook: the group has its minMember already
    wait_for(lambda: b.members.live_count(GroupKey("default", "volcano", "vg")) == 2, 30,
             what="both members in the pod cache")
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", member("v2", annotations=annotation))
    assert "group default/vg is full: its size is 2 (PodGroup default/vg spec.minMember) " \
           "and it has 2 members already" in json.loads(refused.value.body)["message"]
    owned = record(c, "volcano-vg")
    assert owned["metadata"]["ownerReferences"] == [{
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "name": "vg",
        "uid": made["metadata"]["uid"], "blockOwnerDeletion": False}]
    assert owned["spec"]["workload"]["uid"] == made["metadata"]["uid"]
    wait_for(lambda: status(c, "volcano-vg").get("phase") == "Running", 30,
             what="the Volcano group's record Running")


def test_a_group_with_more_members_than_its_size_is_not_placed_and_says_so(cluster):
    """Two webhook replicas may admit two pods at once (each counts from its own cache):
    the pods below are stored as if so, gated and named for fluxnode, straight into the
    emulator's store (no webhook). The binder places none of them while there are too many."""
    c = cluster
    for name in ("x0", "x1", "x2"):
        pod = c.pod(name, group="big", size=2, labels=QUEUE)
        pod["spec"]["schedulingGates"] = [{"name": "fluxnode.io/admission"}]
        c.kube.create("pods", pod, "default")
    message = ("group default/big has 3 pods but its size is 2: none is placed until 1 of "
               "them are deleted")
    for name in ("x0", "x1", "x2"):
        assert c.wait_condition(name, "Unschedulable", timeout=30)["message"] == message
    wait_for(lambda: status(c, "group-big").get("reason") ==
             "group default/big has 3 pods but its size is 2", 30,
             what="the record saying the group is too large")
    assert all(c.node_of(n) is None for n in ("x0", "x1", "x2"))
    c.kube.delete("pods", "x2", "default")
    c.wait_bound(["x0", "x1"], timeout=60)
    c.assert_no_overcommit()


def test_a_new_binder_deletes_the_records_of_groups_that_went_while_none_led(cluster, tmp_path):
    c = cluster
    core = client.CoreV1Api(c.kube.api_client())
    for name in ("s0", "s1"):
        core.create_namespaced_pod("default", member(
            name, {"fluence.flux-framework.org/pod-group": "gone",
                   "fluence.flux-framework.org/group-size": "2"}))
    c.wait_bound(["s0", "s1"], timeout=60)
    wait_for(lambda: status(c, "group-gone").get("phase") == "Running", 30,
             what="the record Running")
    c.stop_binder(c.binders[0])
    for name in ("s0", "s1"):
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert record(c, "group-gone") is not None  # no binder to see the pods go
    c.start_binder(webhook_port=0, webhook_host="127.0.0.1",
                   webhook_cert_dir=str(tmp_path / "certs2"), podgroup_discovery=0.5)
    wait_for(lambda: record(c, "group-gone") is None, 60,
             what="the new leader deleting the record of a group with no pods")


def test_a_group_whose_pods_all_succeeded_is_finished_and_one_with_a_failure_failed(cluster):
    """The emulator runs no kubelet: the test ends the pods as a kubelet would, through their
    status (phase Succeeded or Failed)."""
    c = cluster
    core = client.CoreV1Api(c.kube.api_client())
    for group, names in (("done", ("d0", "d1")), ("broke", ("f0", "f1"))):
        for name in names:
            core.create_namespaced_pod("default", member(
                name, {"fluence.flux-framework.org/pod-group": group,
                       "fluence.flux-framework.org/group-size": "2"}))
    c.wait_bound(["d0", "d1"], timeout=60)
    for name, phase in (("d0", "Succeeded"), ("d1", "Succeeded")):
        core.patch_namespaced_pod_status(name, "default", {"status": {"phase": phase}})
    wait_for(lambda: status(c, "group-done").get("phase") == "Finished", 30,
             what="the group Finished")
    c.wait_bound(["f0", "f1"], timeout=60)
    for name, phase in (("f0", "Succeeded"), ("f1", "Failed")):
        core.patch_namespaced_pod_status(name, "default", {"status": {"phase": phase}})
    wait_for(lambda: status(c, "group-broke").get("phase") == "Failed", 30,
             what="the group Failed")
    assert status(c, "group-done")["pods"] == "0/2"
