"""The installer page's operations as kubectl commands against real node agents and brokers:
`kubectl apply -k daemonset/` installs the DaemonSet the agents follow, `kubectl -n fluxnode
get pods -o wide` lists the agent pods, `kubectl drain` refuses without --ignore-daemonsets
(the agent pod is a DaemonSet pod) and with it cordons and drains the node while its broker
keeps running with its rank, `kubectl uncordon` changes nothing either, and `kubectl delete
node` takes the node's rank away (the last rank: the overlay shrinks) and stops its broker.

The emulator has no controllers: the test creates the agent pods as the DaemonSet controller
would (owned by the DaemonSet, on each node, Ready), and adds and removes the unschedulable
taint as the node lifecycle controller does on a cordon and an uncordon. Oracles: kubectl's
own output, the rank map and the broker processes (pids), and `fluxnode overlay status`
through the connect script."""

from __future__ import annotations

import json

from support.kube_agents import AgentProcess, add_node, stop_all
from support.kubectl import kubectl, parse_table, rendered

from fluxnode.testing.waiting import wait_for

NODES = ("w1", "w2", "w3")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def rank_hosts(kube) -> list[str | None]:
    data = json.loads(kube.get("configmaps", "fluxnode-ranks", "fluxnode")["data"]["ranks.json"])
    return [None if r in data["vacant"] else h for r, h in enumerate(data["hosts"])]


def metric(agent: AgentProcess, name: str) -> float:
    for line in agent.http("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def reconciled_after(agents: list[AgentProcess], passes: dict[str, float]) -> None:
    """Every agent ran two more control-loop passes than in `passes`: a check that nothing
    changed is then made after the agents have seen the change."""
    for a in agents:
        wait_for(lambda a=a: metric(a, "fluxnode_agent_control_loop_passes_total")
                 >= passes[a.node] + 2, 30, what=f"{a.node} to reconcile")


def test_drain_keeps_the_agent_and_its_broker_delete_node_takes_the_rank(kube, tmp_path):
    template = next(d for d in rendered("daemonset/") if d["kind"] == "DaemonSet")
    applied = kubectl(kube, "apply", "-k", "daemonset/").check()
    assert "daemonset.apps/fluxnode-agent created" in applied.stdout.splitlines()
    ds = kube.get("daemonsets.apps", "fluxnode-agent", "fluxnode")
    running: dict[str, AgentProcess] = {}
    try:
        for name in NODES:
            add_node(kube, name)
        for name in NODES:
            running[name] = AgentProcess(kube, name, tmp_path, "--daemonset",
                                         "fluxnode-agent").start()
            containers = template["spec"]["template"]["spec"]["containers"]
            kube.create("pods", {
                "metadata": {"name": f"fluxnode-agent-{name}", "namespace": "fluxnode",
                             "labels": template["spec"]["template"]["metadata"]["labels"],
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                  "name": "fluxnode-agent", "controller": True,
                                                  "uid": ds["metadata"]["uid"]}]},
                "spec": {**template["spec"]["template"]["spec"], "nodeName": name},
                "status": {"phase": "Running", "podIP": "127.0.0.1",
                           "conditions": [{"type": "Ready", "status": "True"}],
                           "containerStatuses": [{"name": c["name"], "ready": True,
                                                  "restartCount": 0, "state": {"running": {}}}
                                                 for c in containers]},
            }, "fluxnode")
        for a in running.values():
            a.wait_broker(60)
        wait_for(lambda: len([h for h in rank_hosts(kube) if h]) == 3, 60, what="3 ranks")
        hosts = rank_hosts(kube)
        pids = {name: a.broker_pid() for name, a in running.items()}
        leaf = hosts[-1]

        pods = parse_table(kubectl(kube, "-n", "fluxnode", "get", "pods", "-o", "wide")
                           .check().stdout)[0]
        assert {(p["NAME"], p["READY"], p["STATUS"], p["NODE"]) for p in pods} == {
            (f"fluxnode-agent-{n}", "1/1", "Running", n) for n in NODES}

        # without --ignore-daemonsets kubectl refuses (after cordoning the node)
        refused = kubectl(kube, "drain", leaf, "--delete-emptydir-data")
        assert refused.returncode == 1
        assert "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): " \
            f"fluxnode/fluxnode-agent-{leaf}" in refused.stderr

        passes = {n: metric(a, "fluxnode_agent_control_loop_passes_total")
                  for n, a in running.items()}
        drained = kubectl(kube, "drain", leaf, "--ignore-daemonsets",
                          "--delete-emptydir-data").check()
        assert drained.stdout.splitlines() == [f"node/{leaf} already cordoned",
                                               f"node/{leaf} drained"]
        assert f"Warning: ignoring DaemonSet-managed Pods: fluxnode/fluxnode-agent-{leaf}" in \
            drained.stderr
        assert kube.get("pods", f"fluxnode-agent-{leaf}", "fluxnode")["spec"]["nodeName"] == leaf
        # the node lifecycle controller's part of a cordon (TaintNodesByCondition)
        kube.patch("nodes", leaf, {"spec": {"taints": [UNSCHEDULABLE_TAINT]}})
        reconciled_after(list(running.values()), passes)
        assert rank_hosts(kube) == hosts
        assert {name: a.broker_pid() for name, a in running.items()} == pids
        out = running[leaf].connect("fluxnode", "overlay", "status")
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("full") == 3, out.stdout

        passes = {n: metric(a, "fluxnode_agent_control_loop_passes_total")
                  for n, a in running.items()}
        assert kubectl(kube, "uncordon", leaf).check().stdout == f"node/{leaf} uncordoned\n"
        kube.patch("nodes", leaf, {"spec": {"taints": None}})
        reconciled_after(list(running.values()), passes)
        assert rank_hosts(kube) == hosts
        assert {name: a.broker_pid() for name, a in running.items()} == pids

        # kubectl delete node: the node leaves; its rank, the last, is a trailing vacancy and
        # dropped (the overlay shrinks); its broker stops, the others run on
        assert kubectl(kube, "delete", "node", leaf).check().stdout == \
            f'node "{leaf}" deleted\n'
        wait_for(lambda: rank_hosts(kube) == hosts[:-1], 60, what=f"{leaf}'s rank dropped")
        wait_for(lambda: running[leaf].broker_pid() is None, 60, what=f"{leaf}'s broker stopped")
        assert {n: running[n].broker_pid() for n in hosts[:-1]} == \
            {n: pids[n] for n in hosts[:-1]}
    finally:
        stop_all(list(running.values()))
