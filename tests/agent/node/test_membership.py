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


def settle(agents, seen: dict[str, float], events: int, what: str) -> None:
    """Wait until every agent has seen ``events`` more node events than in ``seen`` and run
    two control-loop passes after them, so a check that nothing changed means something."""
    for a in agents:
        wait_for(lambda a=a: metric(a, "fluxnode_agent_node_events_total") >= seen[a.node] + events,
                 30, what=f"{a.node} to see {what}")
        passes = metric(a, "fluxnode_agent_control_loop_passes_total")
        wait_for(
            lambda a=a, passes=passes: metric(a, "fluxnode_agent_control_loop_passes_total")
            >= passes + 2, 30, what=f"{a.node} to reconcile after {what}")


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
    settle(running.values(), seen, 2, "both cordons")
    out = running[leaf].connect("fluxnode", "overlay", "status")
    assert out.returncode == 0, out.stderr
    assert rank_hosts(kube) == hosts
    assert {name: a.broker_pid() for name, a in running.items()} == pids
    for line in out.stdout.splitlines():
        assert line.rstrip().endswith("full"), out.stdout
    # Uncordon: still nothing moves, once every agent has seen it and reconciled after it.
    seen = {name: metric(a, "fluxnode_agent_node_events_total") for name, a in running.items()}
    for name in (leader, leaf):
        kube.patch("nodes", name, {"spec": {"unschedulable": None, "taints": None}})
    settle(running.values(), seen, 2, "both uncordons")
    out = running[leader].connect("fluxnode", "overlay", "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("full") == 3, out.stdout
    assert rank_hosts(kube) == hosts
    assert {name: a.broker_pid() for name, a in running.items()} == pids


def restricted_daemonset(**template_spec) -> dict:
    """The shipped DaemonSet with its tolerate-everything toleration removed (an operator's
    restriction): only the DaemonSet controller's own tolerations remain."""
    ds = shipped_daemonset()
    spec = ds["spec"]["template"]["spec"]
    spec["tolerations"] = []
    spec.update(template_spec)
    return ds


def test_the_daemonsets_node_selector_and_affinity_decide_who_gets_a_rank(kube, agents):
    """Real agents on every node, as if the operator ran one everywhere: only the nodes the
    DaemonSet admits get a rank; a node label or a template change moves membership, and
    rank 0 moves when the DaemonSet stops admitting its node."""
    create_daemonset(kube, restricted_daemonset(nodeSelector={"kubernetes.io/os": "linux",
                                                              "pool": "hpc"}))
    add_node(kube, "w1", labels={"pool": "hpc"})
    add_node(kube, "gpu", labels={"pool": "hpc"}, taints=[GPU_TAINT])
    add_node(kube, "other")
    running = {name: agents(name) for name in ("w1", "gpu", "other")}
    running["w1"].wait_broker(60)
    for name in ("gpu", "other"):  # untolerated taint; outside the nodeSelector
        wait_for(lambda name=name: "is not a member" in running[name].log, 30,
                 what=f"{name}'s agent to say it is not a member")
        assert running[name].broker_pid() is None
        status, text = running[name].http("/readyz")  # nothing to run here: a fine state
        assert status == 200 and "not a member" in text
    assert rank_hosts(kube) == ["w1"]
    # the operator labels `other` into the pool: it joins
    kube.patch("nodes", "other", {"metadata": {"labels": {"pool": "hpc"}}})
    other_pid = running["other"].wait_broker(60)
    wait_for(lambda: rank_hosts(kube) == ["w1", "other"], 60, what="other to get rank 1")
    # a template change: required affinity that excludes w1, the leader's node
    ds = kube.get("daemonsets.apps", "fluxnode-agent", "fluxnode")
    ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"].append(
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["w1"]})
    kube.update("daemonsets.apps", ds, "fluxnode")
    wait_for(lambda: rank_hosts(kube) == ["other"], 60, what="other to take rank 0")
    wait_for(lambda: running["w1"].broker_pid() is None, 60, what="w1's broker to stop")
    # other's broker restarted as the leader of a one-rank overlay, answering there
    running["other"].wait_broker(60, other_than=other_pid)
    wait_for(lambda: running["other"].connect("fluxnode", "overlay", "status").stdout
             .startswith("0 other: full"), 60, what="other to lead the overlay")


def test_taints_count_as_the_daemonset_controller_counts_them(kube, agents):
    """Taints the DaemonSet controller tolerates for every daemon pod (pressure, cordon) keep
    the rank; a NoSchedule taint the DaemonSet does not tolerate takes it at once (a new
    agent pod could not be placed there), and removing it gives the same rank back."""
    create_daemonset(kube, restricted_daemonset())
    for name in ("w1", "w2", "w3"):
        add_node(kube, name)
    running = {name: agents(name) for name in ("w1", "w2", "w3")}
    pids = {name: a.wait_broker(60) for name, a in running.items()}
    wait_for(lambda: rank_hosts(kube) == ["w1", "w2", "w3"], 60, what="3 ranks")
    seen = {name: metric(a, "fluxnode_agent_node_events_total") for name, a in running.items()}
    kube.patch("nodes", "w2", {"spec": {"taints": [
        {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}})
    settle(running.values(), seen, 1, "w2's pressure and cordon taints")
    assert rank_hosts(kube) == ["w1", "w2", "w3"]
    assert {name: a.broker_pid() for name, a in running.items()} == pids
    kube.patch("nodes", "w2", {"spec": {"taints": [
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}})
    wait_for(lambda: rank_hosts(kube) == ["w1", None, "w3"], 60, what="w2's rank vacated")
    wait_for(lambda: running["w2"].broker_pid() is None, 60, what="w2's broker to stop")
    assert "untolerated taint {dedicated: db}" in running["w2"].log
    (event,) = [e for e in kube.list("events.events.k8s.io", "default")
                if e["reason"] == "BrokerStopped" and e["regarding"]["name"] == "w2"]
    assert "untolerated taint {dedicated: db}" in event["note"]
    kube.patch("nodes", "w2", {"spec": {"taints": None}})
    wait_for(lambda: rank_hosts(kube) == ["w1", "w2", "w3"], 60, what="w2 back in rank 1")
    running["w2"].wait_broker(60)
    assert running["w1"].broker_pid() == pids["w1"]


def test_include_control_plane_with_a_daemonset_is_a_warning(kube, agents):
    """Both ways of choosing control planes cannot disagree: with a DaemonSet its affinity
    decides, and the agent says the flag does nothing instead of ignoring it silently."""
    create_daemonset(kube, shipped_daemonset())
    add_node(kube, "cp", control_plane=True)
    add_node(kube, "w1")
    cp = agents("cp", "--include-control-plane", "--writer-grace", "0.5")
    wait_for(lambda: "is not a member" in cp.log, 30, what="cp's agent to say it is no member")
    assert "--include-control-plane has no effect with --daemonset fluxnode-agent" in cp.log
    assert "didn't match Pod's node affinity/selector" in cp.log and cp.broker_pid() is None
    assert rank_hosts(kube) == ["w1"]
