"""`kubectl cordon` is a drain: the binder drains the node in the leader's scheduler (running
pods and their allocations stay, nothing new goes there, whoever asks), uncordon undrains it,
an operator's own drain is never lifted, and a leader that lost its journal gets the drains
back from the Nodes. Real overlay, real client, the API emulator."""

from __future__ import annotations

import errno

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for

CORDON = {"spec": {"unschedulable": True,
                   "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}
UNCORDON = {"spec": {"unschedulable": None, "taints": None}}


def drains(c: BinderCluster) -> dict[str, dict]:
    return {d["hostname"]: d for d in c.inst.rpc("sched.resource-status")["drain"]}


def one_core_on(host: str) -> dict:
    return build_jobspec([SlotKind(1, 0, 0, 1)], constraints={"hostlist": [host]})


def test_cordon_drains_the_node_and_uncordon_undrains_it(tmp_path):
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2, "node2": 2}) as c:
        c.start_binder()
        c.create_pod("running", cpu="1")
        node = c.wait_bound(["running"])["running"]
        c.kube.set_pod_phase("running", "Running")
        held = {a["id"] for a in c.group_allocations()}
        c.kube.patch("nodes", node, CORDON)
        d = wait_for(lambda: drains(c).get(node), 20, what=f"{node} drained")
        assert d["source"] == "kubernetes" and d["state"] == "draining", d
        # What runs stays: the pod, its node, its allocation.
        assert c.node_of("running") == node and {a["id"] for a in c.group_allocations()} == held
        # The service itself refuses new work there, whoever asks.
        with pytest.raises(RPCError) as info:
            c.inst.rpc("sched.alloc", {"jobspec": one_core_on(node)})
        assert info.value.errnum == errno.EBUSY
        # New pods go elsewhere: fill every other core; the next one waits.
        others = [f"new-{i}" for i in range(4)]
        for name in others:
            c.create_pod(name, cpu="1")
        assert node not in set(c.wait_bound(others).values())
        c.create_pod("waits", cpu="1")
        c.wait_condition("waits", "WaitingForResources")
        # The running pod ends: the node is drained (empty), still nothing new goes there.
        c.kube.delete("pods", "running", "default")
        wait_for(lambda: drains(c)[node]["state"] == "drained", 20, what=f"{node} drained, empty")
        assert not c.node_of("waits")
        # Uncordon: the drain is lifted and the waiting pod lands there.
        c.kube.patch("nodes", node, UNCORDON)
        wait_for(lambda: node not in drains(c), 20, what=f"{node} undrained")
        assert c.wait_bound(["waits"])["waits"] == node
        c.assert_no_overcommit()


def test_an_operators_drain_is_not_lifted_by_an_uncordon(tmp_path):
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2}) as c:
        c.start_binder()
        c.inst.rpc("sched.drain", {"targets": "node1", "reason": "bad DIMM"})
        c.kube.patch("nodes", "node1", CORDON)
        c.create_pod("p", cpu="1")
        c.wait_bound(["p"])
        c.kube.patch("nodes", "node1", UNCORDON)
        c.create_pod("q", cpu="1")
        c.wait_bound(["q"])  # the binder has seen the uncordon and run cycles since
        d = drains(c)["node1"]
        assert d["reason"] == "bad DIMM" and d["source"] == "operator"
        assert {c.node_of("p"), c.node_of("q")} == {"node0"}


def test_a_leader_without_its_journal_gets_the_cordon_drains_back(tmp_path):
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2}) as c:
        c.start_binder()
        c.kube.patch("nodes", "node1", CORDON)
        wait_for(lambda: "node1" in drains(c), 20, what="node1 drained")
        c.kill_leader(lose_journal=True)
        c.restart_leader()
        wait_for(lambda: drains(c).get("node1", {}).get("source") == "kubernetes", 30,
                 what="the new leader to have node1 drained again")
        c.create_pod("p", cpu="1")
        assert c.wait_bound(["p"])["p"] == "node0"


def test_kubectl_drain_cordons_then_evicted_pods_free_their_cores_once_gone(tmp_path):
    """`kubectl drain --ignore-daemonsets NODE`: a cordon, then a graceful deletion of each pod
    on the node. The pods' cores are freed only when the kubelet has stopped them, and the
    pods created meanwhile never land on the drained node."""
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2}) as c:
        c.start_binder()
        names = ["a", "b", "c", "d"]
        for name in names:
            c.create_pod(name, cpu="1")
        bound = c.wait_bound(names)
        for name in names:
            c.kube.set_pod_phase(name, "Running")
        node = bound["a"]
        on_node = [n for n in names if bound[n] == node]
        c.kube.patch("nodes", node, CORDON)
        wait_for(lambda: node in drains(c), 20, what=f"{node} drained")
        c.kube.hold_terminations = True
        for name in on_node:  # the evictions: graceful deletions
            c.kube.delete("pods", name, "default", grace_period=30)
        c.create_pod("replacement", cpu="1")
        c.wait_condition("replacement", "WaitingForResources")
        assert drains(c)[node]["state"] == "draining"  # the terminating pods still hold cores
        assert c.kube.finish_terminations() == len(on_node)
        wait_for(lambda: drains(c)[node]["state"] == "drained", 20, what=f"{node} empty")
        assert not c.node_of("replacement")  # freed cores on a drained node are not used
        c.kube.patch("nodes", node, UNCORDON)
        assert c.wait_bound(["replacement"])["replacement"] == node
        c.assert_no_overcommit()


def test_a_notready_node_is_drained_until_it_is_ready_again(tmp_path):
    """Kubernetes' node lifecycle controller taints a NotReady node
    node.kubernetes.io/not-ready:NoSchedule: nothing new lands there. The binder drains it
    in the leader with a reason that says so (the service then refuses it to every caller,
    and the binder's requests need not leave it out), a cordon on top takes the cordon's
    reason, and the node Ready and uncordoned again is undrained."""
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2}) as c:
        c.start_binder()
        c.kube.set_node_ready("node1", False)
        d = wait_for(lambda: drains(c).get("node1"), 20, what="node1 drained")
        assert d["source"] == "kubernetes" and "NotReady" in d["reason"], d
        with pytest.raises(RPCError) as info:
            c.inst.rpc("sched.alloc", {"jobspec": one_core_on("node1")})
        assert info.value.errnum == errno.EBUSY
        c.create_pod("p", cpu="1")
        assert c.wait_bound(["p"])["p"] == "node0"
        c.kube.patch("nodes", "node1", CORDON)
        wait_for(lambda: "cordoned" in drains(c)["node1"]["reason"], 20,
                 what="node1's drain reason to say cordoned")
        c.kube.set_node_ready("node1", True)
        c.kube.patch("nodes", "node1", UNCORDON)
        wait_for(lambda: "node1" not in drains(c), 20, what="node1 undrained")
        c.create_pod("q", cpu="2")  # node0 has one core left: only node1 holds it
        assert c.wait_bound(["q"])["q"] == "node1"
        c.assert_no_overcommit()
