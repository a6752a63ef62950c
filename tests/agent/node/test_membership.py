"""Membership follows the DaemonSet: a node gets a rank exactly where the DaemonSet places an
agent pod, and a cordon keeps the broker and the rank (rank 0 never moves for it).

Unit tests judge the shipped manifest (daemonset/daemonset.yaml) against nodes as the
kubelet registers them; end-to-end tests run real agents and brokers against the API
emulator with the DaemonSet object created from that manifest."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from fluxnode.agent.node.selection import NodeSelection, daemon_placement
from support.kube_agents import AgentProcess, add_node, stop_all
from support.paths import REPO

from fluxnode.testing.waiting import wait_for

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def shipped_daemonset() -> dict:
    docs = yaml.safe_load_all((REPO / "daemonset" / "daemonset.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "DaemonSet")


def selection_of(ds: dict) -> NodeSelection:
    return NodeSelection(daemon=daemon_placement(ds))


def nodes_of(kube) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in kube.list("nodes")}


def test_the_shipped_daemonset_runs_on_tainted_and_cordoned_workers_not_control_planes(kube):
    kube.add_node("worker")
    kube.add_node("gpu", taints=[GPU_TAINT])
    kube.add_node("cordoned", unschedulable=True)
    kube.add_node("notready", ready=False, taints=[
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    kube.add_node("cp", control_plane=True)
    kube.add_node("windows", labels={"kubernetes.io/os": "windows"})
    members = selection_of(shipped_daemonset()).members(nodes_of(kube))
    assert sorted(members) == ["cordoned", "gpu", "notready", "worker"]


def test_a_daemonset_without_the_toleration_gives_the_tainted_node_no_rank(kube):
    kube.add_node("worker")
    kube.add_node("gpu", taints=[GPU_TAINT])
    kube.add_node("cordoned", unschedulable=True)
    ds = shipped_daemonset()
    ds["spec"]["template"]["spec"]["tolerations"] = []  # e.g. the manifest before this change
    # the DaemonSet controller's own tolerations still cover a cordon
    assert sorted(selection_of(ds).members(nodes_of(kube))) == ["cordoned", "worker"]
    ds["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert sorted(selection_of(ds).members(nodes_of(kube))) == ["cordoned", "gpu", "worker"]


def test_node_selector_and_required_affinity_decide_membership(kube):
    kube.add_node("a", labels={"pool": "hpc", "zone": "1"})
    kube.add_node("b", labels={"pool": "hpc", "zone": "2"})
    kube.add_node("c", labels={"pool": "web"})
    ds = shipped_daemonset()
    spec = ds["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"pool": "hpc"}
    assert sorted(selection_of(ds).members(nodes_of(kube))) == ["a", "b"]
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"].append(
        {"key": "zone", "operator": "NotIn", "values": ["2"]})
    assert sorted(selection_of(ds).members(nodes_of(kube))) == ["a"]


# -- end to end: agents, brokers and the DaemonSet object -------------------------------


@pytest.fixture
def agents(kube, tmp_path):
    started: list[AgentProcess] = []

    def start(node: str, *extra: str) -> AgentProcess:
        agent = AgentProcess(kube, node, tmp_path, "--daemonset", "fluxnode-agent", *extra)
        started.append(agent.start())
        return agent

    yield start
    stop_all(started)


def metric(agent: AgentProcess, name: str) -> float:
    for line in agent.http("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def create_daemonset(kube, ds: dict) -> None:
    obj = copy.deepcopy(ds)
    obj["metadata"]["namespace"] = "fluxnode"
    kube.create("daemonsets.apps", obj, "fluxnode")


def rank_hosts(kube) -> list[str | None]:
    data = json.loads(kube.get("configmaps", "fluxnode-ranks", "fluxnode")["data"]["ranks.json"])
    return [None if r in data["vacant"] else h for r, h in enumerate(data["hosts"])]


def test_a_gpu_tainted_node_gets_a_rank_and_a_template_change_moves_membership(kube, agents):
    create_daemonset(kube, shipped_daemonset())
    add_node(kube, "w1")
    add_node(kube, "gpu1", taints=[GPU_TAINT])
    w1, gpu = agents("w1"), agents("gpu1")
    gpu_pid = gpu.wait_broker(60)
    w1.wait_broker(60)
    wait_for(lambda: sorted(h for h in rank_hosts(kube) if h) == ["gpu1", "w1"], 60,
             what="both nodes ranked")
    # The operator restricts the DaemonSet to untainted nodes: the GPU node leaves.
    ds = kube.get("daemonsets.apps", "fluxnode-agent", "fluxnode")
    ds["spec"]["template"]["spec"]["tolerations"] = []
    kube.update("daemonsets.apps", ds, "fluxnode")
    wait_for(lambda: [h for h in rank_hosts(kube) if h] == ["w1"], 60,
             what="gpu1 to lose its rank")
    wait_for(lambda: gpu.broker_pid() is None, 60, what="gpu1's broker to stop")
    assert gpu_pid is not None


def test_cordon_keeps_the_broker_and_rank_zero_stays(kube, agents):
    create_daemonset(kube, shipped_daemonset())
    for name in ("w1", "w2", "w3"):
        add_node(kube, name)
    running = {name: agents(name) for name in ("w1", "w2", "w3")}
    for a in running.values():
        a.wait_broker(60)
    wait_for(lambda: len([h for h in rank_hosts(kube) if h]) == 3, 60, what="3 ranks")
    hosts = rank_hosts(kube)
    pids = {name: a.broker_pid() for name, a in running.items()}
    leader, leaf = hosts[0], hosts[-1]
    seen = {name: metric(a, "fluxnode_agent_node_events_total") for name, a in running.items()}
    for name in (leader, leaf):
        kube.patch("nodes", name, {"spec": {"unschedulable": True, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}})
    # The agents see the cordon (a node event), reconcile after it, and change nothing: same
    # ranks, same brokers, every rank answering over the overlay.
    for a in running.values():
        wait_for(lambda a=a: metric(a, "fluxnode_agent_node_events_total") >= seen[a.node] + 2,
                 30, what=f"{a.node} to see both cordons")
        passes = metric(a, "fluxnode_agent_control_loop_passes_total")
        wait_for(
            lambda a=a, passes=passes: metric(a, "fluxnode_agent_control_loop_passes_total")
            >= passes + 2, 30, what=f"{a.node} to reconcile after them")
    out = running[leaf].connect("fluxnode", "overlay", "status")
    assert out.returncode == 0, out.stderr
    assert rank_hosts(kube) == hosts
    assert {name: a.broker_pid() for name, a in running.items()} == pids
    for line in out.stdout.splitlines():
        assert line.rstrip().endswith("full"), out.stdout
    # Uncordon: still nothing moves.
    for name in (leader, leaf):
        kube.patch("nodes", name, {"spec": {"unschedulable": None, "taints": None}})
    out = running[leader].connect("fluxnode", "overlay", "status")
    assert out.returncode == 0 and rank_hosts(kube) == hosts
    assert {name: a.broker_pid() for name, a in running.items()} == pids
