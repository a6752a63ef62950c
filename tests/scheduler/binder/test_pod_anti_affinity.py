"""Required pod anti-affinity honoured, every other required rule between pods refused by
name, end to end: the binder against the Kubernetes API emulator and a real overlay
instance. The oracle is the pods' nodeName from the emulator, checked against the rule here
(`assert_anti_affinity`), never through the binder's code."""

import pytest
from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for

HOST = "kubernetes.io/hostname"


@pytest.fixture
def cluster(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        yield c


def anti(selector: dict, key: str = HOST, **extra) -> dict:
    term = {"labelSelector": {"matchLabels": selector}, "topologyKey": key, **extra}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def create(cluster, name: str, *, affinity: dict | None = None, spec: dict | None = None,
           **kw) -> dict:
    obj = cluster.pod(name, "1", **kw)
    if affinity is not None:
        obj["spec"]["affinity"] = affinity
    obj["spec"].update(spec or {})
    return cluster.kube.create("pods", obj, obj["metadata"]["namespace"])


def assert_anti_affinity(cluster) -> None:
    """No bound pod shares a node with a pod one of its required hostname anti-affinity
    terms (matchLabels, own namespace or the listed ones) matches: from the API objects.
    Pods that ended hold no node (kube-scheduler's view too)."""
    pods = [p for p in cluster.kube.list("pods") if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    for a in pods:
        terms = (((a["spec"].get("affinity") or {}).get("podAntiAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        for t in terms:
            spaces = t.get("namespaces") or [a["metadata"]["namespace"]]
            want = t["labelSelector"]["matchLabels"]
            for b in pods:
                if b is a or b["spec"]["nodeName"] != a["spec"]["nodeName"]:
                    continue
                labels = b["metadata"].get("labels") or {}
                assert not (b["metadata"]["namespace"] in spaces and all(
                    labels.get(k) == v for k, v in want.items())), (
                    f"{a['metadata']['name']} and {b['metadata']['name']} share "
                    f"{a['spec']['nodeName']} against {t}")


def test_a_group_keeping_apart_goes_one_per_node_and_one_too_many_waits(cluster):
    cluster.start_binder()
    for i in range(3):
        create(cluster, f"web-{i}", group="web", size=3, labels={"app": "web"},
               affinity=anti({"app": "web"}))
    nodes = cluster.wait_bound([f"web-{i}" for i in range(3)])
    assert sorted(nodes.values()) == ["node0", "node1", "node2"]  # 3 cores fit one node
    assert_anti_affinity(cluster)
    # a group of 4 that keeps apart cannot have 4 of 3 nodes: Unschedulable, saying why
    for i in range(4):
        create(cluster, f"big-{i}", group="big", size=4, labels={"app": "big"},
               affinity=anti({"app": "big"}))
    cond = cluster.wait_condition("big-0", "Unschedulable")
    assert "4 pods must each run on a node of their own" in cond["message"]
    assert "3 nodes may run them" in cond["message"]
    assert not any(cluster.node_of(f"big-{i}") for i in range(4))
    cluster.assert_no_overcommit()


def test_pods_already_on_nodes_keep_a_pod_off_both_ways(cluster):
    # another scheduler's pods (the binder's one watch sees them before ours): a database
    # on node0; on node1 one that keeps noisy pods away
    create(cluster, "db", scheduler="default-scheduler", node="node0", labels={"app": "db"})
    create(cluster, "quiet", scheduler="default-scheduler", node="node1",
           affinity=anti({"role": "noisy"}))
    cluster.start_binder()
    # not next to the database (its own term), not next to `quiet` (quiet's term)
    create(cluster, "noisy-db-hater", labels={"role": "noisy"}, affinity=anti({"app": "db"}))
    assert cluster.wait_bound(["noisy-db-hater"]) == {"noisy-db-hater": "node2"}
    # each way on its own, on the one node each may use
    create(cluster, "near-db", affinity=anti({"app": "db"}), spec={"nodeSelector": {
        HOST: "node0"}})
    create(cluster, "near-quiet", labels={"role": "noisy"}, spec={"nodeSelector": {
        HOST: "node1"}})
    assert "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules" in \
        cluster.wait_condition("near-db", "WaitingForResources")["message"]
    assert "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity " \
        "rules" in cluster.wait_condition("near-quiet", "WaitingForResources")["message"]
    cluster.kube.delete("pods", "quiet", "default")  # its rule goes with it
    assert cluster.wait_bound(["near-quiet"]) == {"near-quiet": "node1"}
    assert cluster.node_of("near-db") is None
    # the database is relabelled: it no longer matches, and near-db goes to node0
    cluster.kube.patch("pods", "db", {"metadata": {"labels": {"app": "olddb"}}}, "default")
    assert cluster.wait_bound(["near-db"]) == {"near-db": "node0"}
    # its term looks in its own namespace only: a database elsewhere does not count...
    cluster.kube.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "other"}})
    create(cluster, "other-db", scheduler="default-scheduler", node="node2",
           labels={"app": "db"}, namespace="other")
    create(cluster, "plain-hater", affinity=anti({"app": "db"}), spec={"nodeSelector": {
        HOST: "node2"}})
    assert cluster.wait_bound(["plain-hater"]) == {"plain-hater": "node2"}
    # ...unless it names that namespace: node2 is then closed too, and node0 by db
    create(cluster, "wide-hater", affinity=anti({"app": "db"}, namespaces=["default", "other"]),
           spec={"nodeSelector": {HOST: "node2"}})
    cond = cluster.wait_condition("wide-hater", "WaitingForResources")
    assert "didn't match pod anti-affinity rules" in cond["message"]
    assert cluster.node_of("wide-hater") is None
    # the database in `other` goes away: the pod is placed where it was waiting to go
    cluster.kube.delete("pods", "other-db", "other")
    assert cluster.wait_bound(["wide-hater"]) == {"wide-hater": "node2"}
    assert_anti_affinity(cluster)


def test_replicas_created_at_once_each_get_a_node_and_the_fourth_waits(cluster):
    """Pods of one template, each its own group (a Deployment's), asked in one pass: each
    sees where the ones before it went, though none is bound yet."""
    cluster.start_binder()
    for i in range(4):
        create(cluster, f"r-{i}", labels={"app": "r"}, affinity=anti({"app": "r"}))
    bound = wait_for(lambda: (n := {f"r-{i}": cluster.node_of(f"r-{i}") for i in range(4)})
                     and sum(1 for v in n.values() if v) == 3 and n, 30, what="3 replicas bound")
    assert len({v for v in bound.values() if v}) == 3
    waiting = next(k for k, v in bound.items() if not v)
    cond = cluster.wait_condition(waiting, "WaitingForResources")
    assert "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules" \
        in cond["message"]
    assert_anti_affinity(cluster)
    gone = next(k for k, v in bound.items() if v)
    cluster.finish(gone)
    assert cluster.wait_bound([waiting]) == {waiting: bound[gone]}
    assert_anti_affinity(cluster)


@pytest.mark.parametrize("field,spec,words", [
    ("podAffinity", {"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST}]}}},
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution is not "
     "evaluated by fluxnode"),
    ("spread", {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "x"}}}]},
     "spec.topologySpreadConstraints[0]: whenUnsatisfiable DoNotSchedule is not evaluated "
     "by fluxnode; use ScheduleAnyway or the default scheduler"),
    ("namespaceSelector", {"affinity": anti({"app": "x"}, namespaceSelector={
        "matchLabels": {"team": "a"}})},
     "requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector: a non-empty "
     "selector is not evaluated by fluxnode"),
    ("operator", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Gt",
                                                     "values": ["1"]}]},
             "topologyKey": HOST}]}}},
     "labelSelector.matchExpressions[0].operator: 'Gt' is not one of In, NotIn, Exists, "
     "DoesNotExist"),
    ("topologyKey", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}}]}}},
     "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: required"),
])
def test_required_rules_fluxnode_does_not_place_by_are_refused_by_name(cluster, field, spec,
                                                                       words):
    cluster.start_binder()
    create(cluster, "refused", spec=spec, labels={"app": "x"})
    create(cluster, "fine", labels={"app": "x"}, spec={"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "x"}}}]})
    cond = cluster.wait_condition("refused", "Unschedulable")
    assert words in cond["message"], cond["message"]
    assert "pod default/refused" in cond["message"]
    cluster.wait_bound(["fine"])  # ScheduleAnyway is a preference: placed
    assert cluster.node_of("refused") is None


def test_a_group_keeping_apart_by_zone_is_refused_not_packed(cluster):
    cluster.start_binder()
    for i in range(2):
        create(cluster, f"z-{i}", group="z", size=2, labels={"app": "z"},
               affinity=anti({"app": "z"}, key="topology.kubernetes.io/zone"))
    cond = cluster.wait_condition("z-0", "Unschedulable")
    assert "keep apart by required pod anti-affinity on topology.kubernetes.io/zone" \
        in cond["message"]
    assert cluster.node_of("z-0") is None and cluster.node_of("z-1") is None


def test_groups_asked_one_per_node_in_one_pass_are_each_asked(cluster):
    """A group refused in a pass tells an identical request after it the same; two groups
    asked one per node are different requests (their shapes, counts and nodes differ) and
    each gets its own answer."""
    for i in range(2):  # first in the queue (higher priority): 5 cores, no node has them
        obj = cluster.pod(f"huge-{i}", "5", group="huge", size=2, labels={"app": "huge"},
                          priority=10)
        obj["spec"]["affinity"] = anti({"app": "huge"})
        cluster.kube.create("pods", obj, "default")
        create(cluster, f"small-{i}", group="small", size=2, labels={"app": "small"},
               affinity=anti({"app": "small"}))
    cluster.start_binder()
    nodes = cluster.wait_bound(["small-0", "small-1"])
    assert nodes["small-0"] != nodes["small-1"]
    assert cluster.wait_condition("huge-0", "Unschedulable")
    assert_anti_affinity(cluster)


def test_a_restarted_binder_keeps_a_one_per_node_group_where_it_is(cluster):
    """The allocation of a group asked one per node has no per-slot record (a jobspec's):
    a restarted binder adopts it from the bound pods, frees a rank when its pod ends, and
    keeps the rule for pods that come after."""
    b = cluster.start_binder()
    for i in range(3):
        create(cluster, f"w-{i}", group="w", size=3, labels={"app": "w"},
               affinity=anti({"app": "w"}))
    nodes = cluster.wait_bound([f"w-{i}" for i in range(3)])
    assert len(set(nodes.values())) == 3
    b = cluster.replace_binder(b)
    wait_for(lambda: len(cluster.group_allocations()) == 1
             and len(b.state.allocations) == 1, 20, what="the group's allocation adopted")
    create(cluster, "w-late", labels={"app": "w"}, affinity=anti({"app": "w"}))
    assert "3 node(s) didn't match pod anti-affinity rules" in \
        cluster.wait_condition("w-late", "WaitingForResources")["message"]
    cluster.finish("w-1")
    assert cluster.wait_bound(["w-late"]) == {"w-late": nodes["w-1"]}
    held = wait_for(lambda: (a := cluster.group_allocations()) and len(a) == 2 and a, 20,
                    what="w-1's rank freed, w-late's allocation made")
    ranks = sorted(len(a["nodes"]) for a in held)
    assert ranks == [1, 2]  # the group keeps its two live ranks, w-late has one
    assert_anti_affinity(cluster)
    cluster.assert_no_overcommit()
