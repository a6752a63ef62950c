"""Cluster operations end to end: node agents (real processes, real brokers) and the binder
against the API emulator, with pods running throughout: a DaemonSet rolling upgrade, and the
loss of rank 0's node.

For the upgrade, the emulator has no DaemonSet controller, so the test plays it: with the default
``RollingUpdate`` (maxUnavailable 1) the controller deletes one node's agent pod, the kubelet
sends SIGTERM, and a pod of the new template starts on that node with the same hostPath
directories (broker.toml, CURVE certificate, the leader's journal in the state directory).
One node at a time, rank 0 included. The oracles are outside the code under test: pods'
``spec.nodeName`` and Binding annotations read back from the API server, and what the leader
holds read over the overlay with the broker client.
"""

from __future__ import annotations

import errno
import json

import pytest
from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.scheduler.binder.binder import Binder
from fluxnode.scheduler.binder.config import BinderConfig
from support.binder_cluster import GROUP_LABEL, SIZE_LABEL
from support.kube_agents import AgentProcess, add_node, stop_all
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for

NODES = ("w1", "w2", "w3", "w4")


def local_uri(agent: AgentProcess) -> str:
    return f"local://{agent.run_dir / 'local'}"


def leader_rpc(agent: AgentProcess, topic: str, payload: dict | None = None) -> dict | None:
    """`topic` on rank 0 through `agent`'s broker; None while the overlay cannot answer."""
    try:
        with Client.connect(local_uri(agent), timeout=2.0) as c:
            return c.rpc(topic, payload or {}, nodeid=0, timeout=5.0)
    except (ConnectError, OSError):
        return None
    except RPCError as exc:
        if exc.errnum in (errno.ENOSYS, errno.EHOSTUNREACH, errno.ETIMEDOUT, errno.ECONNRESET):
            return None
        raise


def held(agent: AgentProcess) -> dict[int, set[tuple[int, int]]] | None:
    """Allocation id -> the (rank, core) pairs the leader holds for it, for the binder's pod
    groups (the binder also holds what Kubernetes does not let pods use: kind "outside")."""
    listing = leader_rpc(agent, "sched.list", {"labels": {"kind": "group"}})
    if listing is None:
        return None
    return {
        a["id"]: {(n["rank"], c) for n in a["nodes"] for c in parse_idset(n["cores"])}
        for a in listing["allocations"]
        if a["status"] == "ALLOCATED"
    }


def all_up(agent: AgentProcess) -> bool:
    status = leader_rpc(agent, "sched.resource-status")
    return bool(status) and sorted(
        n["hostname"] for n in status["nodes"] if n.get("status", "up") == "up"
    ) == sorted(NODES)


def rank_map(kube) -> list[str]:
    return json.loads(kube.get("configmaps", "fluxnode-ranks", "fluxnode")["data"]["ranks.json"])[
        "hosts"
    ]


def create_pod(kube, name: str, group: str | None = None, size: int | None = None) -> None:
    labels = {GROUP_LABEL: group, SIZE_LABEL: str(size)} if group else {}
    kube.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {
                "schedulerName": "fluxnode",
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                ],
            },
        },
        "default",
    )


def wait_bound(kube, names: list[str]) -> dict[str, str]:
    def bound():
        nodes = {n: kube.get("pods", n, "default")["spec"].get("nodeName") for n in names}
        return nodes if all(nodes.values()) else None

    return wait_for(bound, 60, what=f"pods {', '.join(names)} bound")


def assert_each_core_once(kube) -> None:
    """From the API objects: no (node, core) is given to two live pods, and no node runs more
    cores than its allocatable."""
    owner: dict[tuple[str, int], str] = {}
    for pod in kube.list("pods", "default"):
        node = pod["spec"].get("nodeName")
        ann = pod["metadata"].get("annotations") or {}
        if not node or "fluxnode.io/cores" not in ann:
            continue
        for core in parse_idset(ann["fluxnode.io/cores"]):
            other = owner.setdefault((node, core), pod["metadata"]["name"])
            assert other == pod["metadata"]["name"], f"core {core} of {node}: {other} and {pod}"
    for node in kube.list("nodes"):
        name = node["metadata"]["name"]
        used = sum(1 for n, _ in owner if n == name)
        assert used <= int(node["status"]["allocatable"]["cpu"]), name


@pytest.fixture
def overlay(kube, tmp_path):
    """Four nodes with an agent each, every broker up in the leader's graph; binders the
    test starts (`started`) and the agents still in `agents` are stopped at the end."""
    for name in NODES:
        add_node(kube, name)
    agents = {name: AgentProcess(kube, name, tmp_path).start() for name in NODES}
    started: list[Binder] = []
    try:
        for a in agents.values():
            a.wait_broker(60)
        wait_for(lambda: all_up(agents[NODES[-1]]), 60, what="4 brokers up in the leader's graph")
        yield agents, started
    finally:
        for b in started:
            b.stop()
        stop_all(list(agents.values()))


def start_binder(kube, agent: AgentProcess) -> Binder:
    return Binder(
        kube.api_client(),
        BinderConfig(
            uri=None,  # found through the agents' rank map, as in the cluster
            curve_cert=str(agent.host_dir / "curve.cert"),
            http_port=0,
            http_host="127.0.0.1",
            leader_elect=False,
            resync=1.0,
        ),
    ).start()


def held_by_host(agent: AgentProcess) -> set[tuple[str, int]] | None:
    """(hostname, core) pairs the leader holds for the binder's pod groups."""
    listing = leader_rpc(agent, "sched.list", {"labels": {"kind": "group"}})
    if listing is None:
        return None
    return {
        (n["hostname"], c)
        for a in listing["allocations"]
        if a["status"] == "ALLOCATED"
        for n in a["nodes"]
        for c in parse_idset(n["cores"])
    }


def used_by_pods(kube) -> set[tuple[str, int]]:
    """(node, core) pairs our live pods run on, from their Binding annotations."""
    return {
        (pod["spec"]["nodeName"], c)
        for pod in kube.list("pods", "default")
        if pod["spec"].get("nodeName")
        and "fluxnode.io/cores" in pod["metadata"].get("annotations", {})
        for c in parse_idset(pod["metadata"]["annotations"]["fluxnode.io/cores"])
    }


def test_rank0_node_deleted_the_new_leader_holds_every_running_pod(kube, overlay):
    """Rank 0's Node is deleted (its agent and broker are gone with it, and the pod GC deletes
    the pods bound there): the highest-ranked live node becomes rank 0 with an empty journal,
    and the binder re-registers every running pod with it before placing more, so no core is
    handed out twice, even for pods whose rank annotation names their node's old rank."""
    agents, binders = overlay
    hosts = rank_map(kube)
    status = leader_rpc(agents[hosts[0]], "sched.resource-status")
    cores = sum(n["cores"] for n in status["nodes"])
    binders.append(start_binder(kube, agents[hosts[-1]]))
    full = [f"p{i}" for i in range(cores)]  # one core each: the machine is full
    for name in full:
        create_pod(kube, name)
    wait_bound(kube, full)
    for name in full:
        kube.set_pod_phase(name, "Running")
    assert held_by_host(agents[hosts[0]]) == used_by_pods(kube)

    old_leader, heir = hosts[0], hosts[-1]
    agents[old_leader].stop()  # the node is gone, its agent pod with it
    kube.delete("nodes", old_leader)
    for pod in kube.list("pods", "default"):  # the pod GC: pods of a deleted node go
        if pod["spec"].get("nodeName") == old_leader:
            kube.delete("pods", pod["metadata"]["name"], "default")
    wait_for(lambda: rank_map(kube)[0] == heir, 60, what=f"{heir} to become rank 0")
    survivors = [n for n in NODES if n != old_leader]
    running = used_by_pods(kube)
    assert running and {node for node, _ in running} <= set(survivors)
    wait_for(
        lambda: held_by_host(agents[heir]) == running,
        60,
        what="the new leader to hold exactly the cores the running pods use",
    )
    # The machine is still full: a new pod waits, and takes a core only once one is freed.
    create_pod(kube, "late")
    wait_for(
        lambda: any(
            c.get("reason") == "WaitingForResources"
            for c in kube.get("pods", "late", "default")["status"].get("conditions", [])
        ),
        30,
        what="the late pod to wait for resources",
    )
    assert not kube.get("pods", "late", "default")["spec"].get("nodeName")
    victim = next(
        p["metadata"]["name"]
        for p in kube.list("pods", "default")
        if p["spec"].get("nodeName") == heir
    )
    kube.delete("pods", victim, "default")
    assert wait_bound(kube, ["late"])["late"] == heir
    assert_each_core_once(kube)
    assert held_by_host(agents[heir]) == used_by_pods(kube)


def test_rolling_upgrade_keeps_every_allocation_and_pod_and_binds_new_pods(kube, tmp_path, overlay):
    agents, binders = overlay
    rank0 = rank_map(kube)[0]

    binders.append(start_binder(kube, agents[rank0]))
    before = ["p0", "p1", "p2", "g-0", "g-1"]
    for name in before:
        create_pod(kube, name, *(("g", 2) if name.startswith("g-") else ()))
    bound = wait_bound(kube, before)
    for name in before:
        kube.set_pod_phase(name, "Running")
    annotations = {n: kube.get("pods", n, "default")["metadata"]["annotations"] for n in before}
    allocations = wait_for(lambda: held(agents[rank0]), 30, what="the leader's allocations")
    assert {str(i) for i in allocations} == {
        a["fluxnode.io/allocation"] for a in annotations.values()
    }

    # The controller's order is one node at a time; rank 0's node goes second, so both a
    # leader restart and restarts under a restarted leader are covered.
    others = [n for n in NODES if n != rank0]
    order = others[:1] + [rank0] + others[1:]
    during: list[str] = []
    for step, name in enumerate(order):
        old_pid = agents[name].broker_pid()
        agents[name].stop()  # SIGTERM from the kubelet; the old pod is gone
        if name == rank0:  # a pod created while the leader is down is bound once it is back
            during.append(f"during-{step}")
            create_pod(kube, during[-1])
        agents[name] = AgentProcess(kube, name, tmp_path).start()
        agents[name].wait_broker(60, other_than=old_pid)
        probe = agents[order[(step + 1) % len(order)]]
        wait_for(lambda p=probe: all_up(p), 60, what=f"every rank up after upgrading {name}")
        assert rank_map(kube)[0] == rank0  # an upgrade never moves the leader
        for pod in before:  # every pod stays where it was bound, with the same allocation
            got = kube.get("pods", pod, "default")
            assert got["spec"]["nodeName"] == bound[pod], pod
            assert got["metadata"]["annotations"] == annotations[pod], pod
        now = wait_for(lambda p=probe: held(p), 30, what="the leader's allocations")
        for alloc_id, pairs in allocations.items():
            assert now.get(alloc_id) == pairs, (name, alloc_id)

    wait_bound(kube, during)
    after = ["after-0", "after-1"]
    for name in after:
        create_pod(kube, name)
    wait_bound(kube, after)
    final = wait_for(lambda: held(agents[rank0]), 30, what="the leader's allocations")
    for alloc_id, pairs in allocations.items():
        assert final[alloc_id] == pairs
    seen: set[tuple[int, int]] = set()
    for pairs in final.values():  # nothing is held twice
        assert not pairs & seen
        seen |= pairs
    assert_each_core_once(kube)
