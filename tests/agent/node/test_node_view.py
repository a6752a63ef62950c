"""Issue 32: the agent keeps `node_view(node)` of each Node, not the whole object. Every
decision the agent makes from a Node (membership with and without a DaemonSet to follow,
readiness and join order, endpoints and ports, resources and R) must come out the same from
the view as from the object the API server sent: the whole objects are the oracle."""

from __future__ import annotations

from fluxnode.agent.kube.node_affinity import NodeTraits
from fluxnode.agent.node import overlay_config
from fluxnode.agent.node import resources as node_resources
from fluxnode.agent.node.node_view import node_view
from fluxnode.agent.node.ranks import RankMap, plan
from fluxnode.agent.node.selection import (
    NodeSelection,
    broker_port,
    creation_key,
    daemon_placement,
    internal_address,
    is_control_plane,
    is_ready,
)

STAMP = "2026-11-28T10:00:00Z"


def node(name: str, *, ready: str = "True", labels=None, annotations=None, taints=None,
         unschedulable=False, addresses=None, created=STAMP, gpus=0) -> dict:
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": STAMP}
                  for t in ("MemoryPressure", "DiskPressure")]
    conditions.append({"type": "Ready", "status": ready, "reason": "KubeletReady",
                       "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP})
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110",
                **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    spec = {"podCIDR": "10.0.0.0/24", **({"taints": taints} if taints else {}),
            **({"unschedulable": True} if unschedulable else {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7",
                     "creationTimestamp": created,
                     "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0", **(annotations or {})},
                     "managedFields": [{"manager": "kubelet", "time": STAMP}]},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": capacity,
                   "addresses": addresses if addresses is not None else [
                       {"type": "InternalIP", "address": f"10.1.0.{len(name)}"},
                       {"type": "Hostname", "address": name}],
                   "conditions": conditions,
                   "nodeInfo": {"kubeletVersion": "v1.33.0"},
                   "images": [{"names": ["registry/app@sha256:0"], "sizeBytes": 1}]},
    }


NODES = [
    node("a", created="2026-11-28T09:00:00Z"),
    node("b", ready="False"),
    node("c", ready="Unknown", unschedulable=True,
         taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
    node("cp", labels={"node-role.kubernetes.io/control-plane": ""},
         taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
    node("gpu", labels={"accelerator": "a100"}, gpus=4,
         taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                 {"key": "soft", "effect": "PreferNoSchedule"}]),
    node("port", annotations={"fluxnode.io/broker-port": "9123"}),
    node("ext", addresses=[{"type": "ExternalIP", "address": "192.0.2.7"}]),
    node("none", addresses=[]),
    node("gone", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
]
WHOLE = {n["metadata"]["name"]: n for n in NODES}
VIEW = {name: node_view(n) for name, n in WHOLE.items()}

DAEMONSET = {"metadata": {"namespace": "fluxnode", "name": "fluxnode-agent"},
             "spec": {"template": {"spec": {
                 "nodeSelector": {"kubernetes.io/hostname": "a"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}}
DAEMONSET_ALL = {"metadata": {"namespace": "fluxnode", "name": "fluxnode-agent"},
                 "spec": {"template": {"spec": {
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}}


def decisions(nodes: dict[str, dict]) -> dict:
    out: dict = {}
    selections = {"plain": NodeSelection(), "control": NodeSelection(include_control_plane=True),
                  "ds": NodeSelection(daemon=daemon_placement(DAEMONSET)),
                  "ds-all": NodeSelection(daemon=daemon_placement(DAEMONSET_ALL))}
    for what, sel in selections.items():
        out[what] = ({h: sel.reason_against(n) for h, n in nodes.items()}, sel.joinable(nodes))
    out["per-node"] = {h: (is_ready(n), is_control_plane(n), creation_key(n),
                           internal_address(n), broker_port(n, 8050), NodeTraits.from_node(n))
                       for h, n in nodes.items()}
    sel = selections["control"]
    rank_map = plan(RankMap(), set(sel.members(nodes)), sel.joinable(nodes))
    settings = overlay_config.OverlaySettings(port=8050, cert_path="/etc/fluxnode/curve.cert",
                                              bind_address="0.0.0.0", topo="kary:2")
    out["endpoints"] = overlay_config.endpoints(rank_map, nodes, settings)
    out["toml"] = overlay_config.render(rank_map, nodes, settings)
    out["R"] = node_resources.cluster_R(rank_map, nodes)
    return out


def test_every_decision_is_the_same_from_the_view():
    assert decisions(VIEW) == decisions(WHOLE)


def test_the_view_drops_what_nothing_reads():
    view = VIEW["gpu"]
    assert "images" not in view["status"] and "nodeInfo" not in view["status"]
    assert "managedFields" not in view["metadata"] and "uid" not in view["metadata"]
    assert view["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert VIEW["port"]["metadata"]["annotations"] == {"fluxnode.io/broker-port": "9123"}
    assert node_view(WHOLE["a"]) is not WHOLE["a"] and "images" in WHOLE["a"]["status"]


def test_nodes_alike_share_the_parts_they_have_in_common():
    """Issue 32: 5,000 views of one instance type hold one capacity, one Ready condition, one
    copy of each label string; what differs (the name, the addresses) stays per node."""
    a, b = node_view(node("a")), node_view(node("b"))
    assert a["status"]["capacity"] is b["status"]["capacity"]
    assert a["status"]["allocatable"] is b["status"]["allocatable"]
    assert a["status"]["conditions"] is b["status"]["conditions"]
    assert a["spec"] is b["spec"]
    key_a, = a["metadata"]["labels"]
    key_b, = b["metadata"]["labels"]
    assert key_a is key_b
    assert a["status"]["addresses"] is not b["status"]["addresses"]
    c = node_view(node("c", ready="False", gpus=2))
    assert c["status"]["capacity"] is not a["status"]["capacity"]
    assert c["status"]["conditions"] == [{"type": "Ready", "status": "False"}]


def test_shared_parts_are_bounded():
    from fluxnode.agent.node.node_view import Shared

    shared = Shared(limit=2)
    first, second = shared({"cpu": "1"}), shared({"cpu": "2"})
    assert shared({"cpu": "1"}) is first and shared({"cpu": "2"}) is second
    third = shared({"cpu": "3"})
    assert third == {"cpu": "3"} and shared({"cpu": "3"}) is not third
