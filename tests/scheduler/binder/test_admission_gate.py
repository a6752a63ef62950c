"""Pods the admission webhook gated (``fluxnode.io/admission``, issue 30) keep the gate until
their whole group is placed, then lose it just before their Binding: real brokers, the
binder with exactly daemonset/binder.yaml's RBAC, the API emulator. The pods are created here
as the webhook's patch leaves them (gate already set), so this file tests the binder's side
alone: the emulator does call the webhook (tests/testing/test_emulator_webhooks.py, and
test_webhook_through_emulator.py for the binder's own), but the gate's removal does not
depend on who set it. The gates the user set are kept, and nothing else in the pods changes."""

from __future__ import annotations

import pytest
from fluxnode.scheduler.binder.admission import ADMISSION_GATE
from support.binder_cluster import BinderCluster

CONVENTIONS = {  # a group of 3 as users write it: labels, annotations
    "scheduler-plugins": ({"scheduling.x-k8s.io/pod-group": "g",
                           "fluence.flux-framework.org/group-size": "3"}, {}),
    "kueue": ({"kueue.x-k8s.io/pod-group-name": "g"},
              {"kueue.x-k8s.io/pod-group-total-count": "3"}),
}


def gated(c: BinderCluster, name: str, convention: str) -> dict:
    labels, annotations = CONVENTIONS[convention]
    obj = c.pod(name, "1", labels={"fluxnode.io/queue": "q", **labels})
    obj["metadata"]["annotations"] = dict(annotations)
    obj["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return c.kube.create("pods", obj, "default")


def gates(c: BinderCluster, name: str) -> list:
    return c.get_pod(name)["spec"].get("schedulingGates") or []


@pytest.mark.parametrize("convention", sorted(CONVENTIONS))
def test_the_gate_goes_only_when_the_whole_group_is_placed(tmp_path, convention):
    with BinderCluster(tmp_path, {"node0": 2, "node1": 2}) as c:
        c.start_binder()
        gated(c, "g-0", convention)
        gated(c, "g-1", convention)
        c.wait_condition("g-0", "WaitingForGroup")
        assert gates(c, "g-0") == gates(c, "g-1") == [{"name": ADMISSION_GATE}]
        assert c.node_of("g-0") is None and c.node_of("g-1") is None
        gated(c, "g-2", convention)
        c.wait_bound(["g-0", "g-1", "g-2"])
        for name in ("g-0", "g-1", "g-2"):
            assert gates(c, name) == []
        c.assert_no_overcommit()


def test_a_pod_another_controller_gated_waits_for_that_gate(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        c.start_binder()
        obj = c.pod("held", "1", labels={"fluxnode.io/queue": "q"})
        obj["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE},
                                          {"name": "example.com/quota"}]
        c.kube.create("pods", obj, "default")
        # a pod created after it is placed: the binder has seen "held" and left it alone
        c.create_pod("later", cpu="1")
        c.wait_bound(["later"])
        assert c.node_of("held") is None
        assert gates(c, "held") == obj["spec"]["schedulingGates"]
        # the other controller lets it go: now fluxnode places it and removes its own gate
        c.kube.patch("pods", "held", [{"op": "remove", "path": "/spec/schedulingGates/1"}],
                     "default", patch_type="json")
        c.wait_bound(["held"])
        assert gates(c, "held") == []
