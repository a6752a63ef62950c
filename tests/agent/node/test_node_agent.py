"""`fluxnode agent` processes against the Kubernetes API emulator, with real brokers."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess

import pytest
from fluxnode.broker_conf import config as broker_config
from support.kube_agents import AgentProcess, add_node, resource_list

from fluxnode.testing.ports import refused_port
from fluxnode.testing.waiting import wait_for


def ranks(kube) -> dict:
    return json.loads(kube.get("configmaps", "fluxnode-ranks", "fluxnode")["data"]["ranks.json"])


def hosts_in(agent: AgentProcess) -> list[str]:
    return broker_config.loads(agent.config()).hostnames


def node_events(agent: AgentProcess) -> int:
    for line in agent.http("/metrics")[1].splitlines():
        if line.startswith("fluxnode_agent_node_events_total "):
            return int(float(line.split()[1]))
    return 0


def test_single_node_renders_files_and_serves_the_connect_script(kube, agents):
    add_node(kube, "w1")
    kube.add_node("cp", control_plane=True)
    agent = agents("w1")
    agent.wait_broker()
    assert hosts_in(agent) == ["w1"]
    cert = agent.host_dir / "curve.cert"
    assert stat.S_IMODE(cert.stat().st_mode) == 0o600
    assert "secret-key" in cert.read_text()
    R = json.loads((agent.host_dir / "R.json").read_text())
    assert R["version"] == 1 and R["execution"]["nodelist"] == ["w1"]
    assert stat.S_IMODE((agent.bin_dir / "fluxnode-connect").stat().st_mode) == 0o755
    assert wait_for(
        lambda: resource_list(agent).get("free") == ["w1"], 20, what="w1 free in resource list"
    )
    status, text = agent.http("/readyz")
    assert status == 200 and "rank 0" in text
    assert agent.http("/healthz")[0] == 200
    status, metrics = agent.http("/metrics")
    assert "fluxnode_agent_rank 0.0" in metrics and "fluxnode_agent_broker_up 1.0" in metrics
    (event,) = [
        e for e in kube.list("events.events.k8s.io", "default") if e["reason"] == "BrokerStarted"
    ]
    assert (
        event["regarding"]["kind"] == "Node"
        and event["regarding"]["name"] == "w1"
        and event["type"] == "Normal"
    )
    # without a command the script opens a shell connected to the broker
    shell = subprocess.run(
        [str(agent.bin_dir / "fluxnode-connect")],
        input="echo uri=$FLUXNODE_URI\nexit\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert f"uri=local://{agent.run_dir}/local" in shell.stdout
    agent.stop()
    gone = agent.connect("fluxnode", "resource", "list")
    assert gone.returncode == 1 and "fluxnode-connect: no broker on this node" in gone.stderr


def test_config_follows_node_events_and_ranks_stay_stable(kube, agents):
    add_node(kube, "w1")
    agent = agents("w1")
    leader_pid = agent.wait_broker()
    for name in ("w2", "w3"):
        add_node(kube, name)
    wait_for(lambda: hosts_in(agent) == ["w1", "w2", "w3"], 20, what="w2, w3 in broker.toml")
    kube.delete("nodes", "w2")
    wait_for(lambda: ranks(kube)["vacant"] == [1], 20, what="w2's rank vacated")
    assert ranks(kube)["hosts"] == ["w1", "w2", "w3"]  # w3 keeps rank 2
    add_node(kube, "w4")
    wait_for(lambda: ranks(kube)["hosts"] == ["w1", "w4", "w3"] and not ranks(kube)["vacant"], 20,
             what="w4 takes the vacant rank 1")
    wait_for(lambda: hosts_in(agent) == ["w1", "w4", "w3"], 20, what="re-rendered broker.toml")
    kube.delete("nodes", "w3")
    wait_for(lambda: hosts_in(agent) == ["w1", "w4"], 20, what="overlay shrinks")
    # control-plane nodes never join; a cordoned node does (a cordon is a drain, not a
    # removal); a NotReady newcomer waits
    seen = node_events(agent)
    kube.add_node("cp", control_plane=True)
    kube.add_node("cordoned", unschedulable=True)
    add_node(kube, "late", ready=False)
    wait_for(lambda: node_events(agent) >= seen + 3, 20, what="agent saw the three nodes")
    wait_for(lambda: ranks(kube)["hosts"] == ["w1", "w4", "cordoned"], 20,
             what="the cordoned node ranked")
    kube.set_node_ready("late", True)
    wait_for(lambda: hosts_in(agent) == ["w1", "w4", "cordoned", "late"], 20,
             what="late joins once Ready")
    # every change of size and children reached the leader by config.reload: never restarted
    wait_for(
        lambda: "reloaded its configuration" in agent.log, 20, what="the leader's broker reloaded"
    )
    assert agent.broker_pid() == leader_pid


def test_selector_and_include_control_plane(kube, agents):
    add_node(kube, "cp", control_plane=True)
    add_node(kube, "w1", labels={"fluxnode": "yes"})
    add_node(kube, "w2")
    # w1 has no agent in this test, so cp's agent takes over rank-map writes after the grace
    agent = agents(
        "cp", "--include-control-plane", "--selector", "fluxnode=yes", "--writer-grace", "0.5"
    )
    wait_for(
        lambda: "is not a member" in agent.log, 20, what="cp not a member (outside the selector)"
    )
    assert ranks(kube)["hosts"] == ["w1"]
    assert agent.broker_pid() is None
    status, text = agent.http("/readyz")  # nothing to run here is a fine state: ready
    assert status == 200 and "not a member" in text
    kube.patch("nodes", "cp", {"metadata": {"labels": {"fluxnode": "yes"}}})
    agent.wait_broker()
    assert ranks(kube)["hosts"] == ["w1", "cp"]


def test_broker_is_restarted_when_it_dies(kube, agents):
    add_node(kube, "w1")
    agent = agents("w1")
    first = agent.wait_broker()
    os.kill(first, signal.SIGKILL)
    second = agent.wait_broker(other_than=first)
    assert second != first
    wait_for(lambda: "broker exited with status -9" in agent.log, 10, what="crash logged")
    assert [
        e["type"]
        for e in kube.list("events.events.k8s.io", "default")
        if e["reason"] == "BrokerExited"
    ] == ["Warning"]
    wait_for(
        lambda: "fluxnode_agent_broker_crashes_total 1.0" in agent.http("/metrics")[1],
        10,
        what="crash metric",
    )


def test_watch_expiry_relists_and_keeps_following(kube, agents):
    add_node(kube, "w1")
    agent = agents("w1")
    agent.wait_broker()
    kube.wait_for_watches("nodes")
    lists_before = kube.count_requests("list", "nodes")
    kube.create("configmaps", {"metadata": {"name": "unrelated"}}, "default")
    kube.compact()
    kube.expire_watches("nodes")
    wait_for(
        lambda: kube.count_requests("list", "nodes") > lists_before, 20, what="re-list after 410"
    )
    add_node(kube, "w2")
    wait_for(lambda: hosts_in(agent) == ["w1", "w2"], 20, what="w2 seen after the re-list")


@pytest.mark.parametrize(
    "verb,resource,expected",
    [
        ("get", "secrets", "cannot read Secret fluxnode/fluxnode-curve: permission denied (403)"),
        (
            "create",
            "secrets",
            "cannot create Secret fluxnode/fluxnode-curve: permission denied (403)",
        ),
        ("list", "nodes", "cannot list/watch nodes: permission denied (403)"),
        (
            "update",
            "configmaps",
            "cannot write ConfigMap fluxnode/fluxnode-ranks: permission denied (403)",
        ),
    ],
)
def test_permission_errors_exit_non_zero_with_a_clear_message(
    kube, agents, verb, resource, expected
):
    add_node(kube, "w1")
    if verb == "update":  # the map exists already, so the agent must update it
        kube.create(
            "configmaps",
            {"metadata": {"name": "fluxnode-ranks"}, "data": {"ranks.json": '{"hosts": []}'}},
            "fluxnode",
        )
    kube.forbid(verb, resource)
    agent = agents("w1")
    assert agent.wait_exit(30) == 2
    assert f"fluxnode agent: {expected}" in agent.log
    assert "Traceback" not in agent.log
    assert agent.broker_pid() is None


def test_bad_secret_exits_non_zero(kube, agents):
    add_node(kube, "w1")
    kube.create(
        "secrets",
        {"metadata": {"name": "fluxnode-curve"}, "stringData": {"curve.cert": "nonsense"}},
        "fluxnode",
    )
    agent = agents("w1")
    assert agent.wait_exit(30) == 2
    assert "fluxnode agent: Secret fluxnode/fluxnode-curve[curve.cert]" in agent.log
    assert "Traceback" not in agent.log


def test_multi_node_overlay_grows_shrinks_and_marks_not_ready_down(kube, agents):
    for name in ("w1", "w2", "w3"):
        add_node(kube, name)
    kube.add_node("cp", control_plane=True)
    nodes = {name: agents(name) for name in ("w1", "w2", "w3")}
    pids = {name: a.wait_broker() for name, a in nodes.items()}
    leader = nodes["w1"]
    wait_for(
        lambda: resource_list(leader).get("free") == ["w1", "w2", "w3"], 60, what="3 brokers up"
    )
    # three agents raced to create the CURVE Secret: one won, all use its certificate
    assert len(kube.list("secrets", "fluxnode")) == 1
    assert len({(a.host_dir / "curve.cert").read_text() for a in nodes.values()}) == 1
    # every node's connect script reaches its own broker, which reaches the leader
    assert resource_list(nodes["w3"]).get("free") == ["w1", "w2", "w3"]

    # kary:2 -> w4 becomes rank 3 under rank 1 (w2); rank 2 (w3) is unaffected and keeps its broker
    updates = kube.count_requests("update", "configmaps")
    add_node(kube, "w4")
    nodes["w4"] = agents("w4")
    nodes["w4"].wait_broker()
    wait_for(
        lambda: resource_list(leader).get("free") == ["w1", "w2", "w3", "w4"], 60, what="w4 joined"
    )
    assert nodes["w3"].broker_pid() == pids["w3"]
    # the leader (new size) and w2 (new child) applied the new broker.toml with config.reload
    assert leader.broker_pid() == pids["w1"] and nodes["w2"].broker_pid() == pids["w2"]
    # only the designated writer (the leader's agent) updated the rank map: no thundering herd
    assert kube.count_requests("update", "configmaps") == updates + 1

    # a node that goes NotReady shows as down
    kube.set_node_ready("w3", False)
    wait_for(lambda: resource_list(leader).get("down") == ["w3"], 60, what="w3 down")
    assert nodes["w3"].broker_pid() is None
    kube.set_node_ready("w3", True)
    wait_for(
        lambda: resource_list(leader).get("free") == ["w1", "w2", "w3", "w4"], 60, what="w3 back"
    )
    pids["w3"] = nodes["w3"].broker_pid()

    # w4 leaves: the overlay shrinks back to three ranks
    kube.delete("nodes", "w4")
    nodes["w4"].stop()
    wait_for(lambda: hosts_in(leader) == ["w1", "w2", "w3"], 20, what="w4 removed from broker.toml")
    wait_for(
        lambda: (
            resource_list(leader).get("free") == ["w1", "w2", "w3"]
            and not resource_list(leader).get("down")
        ),
        60,
        what="overlay of three",
    )
    assert {name: nodes[name].broker_pid() for name in ("w1", "w2", "w3")} == {
        k: pids[k] for k in ("w1", "w2", "w3")
    }


def test_unreachable_api_exits_non_zero_after_retrying(kube, tmp_path):
    kubeconfig = tmp_path / "dead.kubeconfig"
    agent = AgentProcess(kube, "w1", tmp_path, "--api-wait", "1")
    agent.args[agent.args.index("--kubeconfig") + 1] = str(kubeconfig)
    with refused_port() as port:  # held until the agent has given up: nothing listens there
        kubeconfig.write_text(kube.kubeconfig_path.read_text().replace(
            kube.url, f"https://127.0.0.1:{port}"))
        agent.start()
        try:
            assert agent.wait_exit(30) == 2
        finally:
            agent.stop()
    assert "fluxnode agent: cannot reach the Kubernetes API at https://127.0.0.1:" in agent.log
    assert "Kubernetes API not reachable yet" in agent.log and "Traceback" not in agent.log


def test_restarting_the_leaders_agent_keeps_the_subtree_running(kube, agents):
    for name in ("w1", "w2", "w3"):
        add_node(kube, name)
    nodes = {name: agents(name) for name in ("w1", "w2", "w3")}
    pids = {name: a.wait_broker() for name, a in nodes.items()}
    wait_for(
        lambda: resource_list(nodes["w1"]).get("free") == ["w1", "w2", "w3"],
        60,
        what="3 brokers up",
    )
    nodes["w1"].stop()  # e.g. a rolling update replaces the leader's pod
    nodes["w1"] = agents("w1")
    nodes["w1"].wait_broker()
    wait_for(
        lambda: resource_list(nodes["w1"]).get("free") == ["w1", "w2", "w3"],
        60,
        what="overlay back",
    )
    assert nodes["w2"].broker_pid() == pids["w2"] and nodes["w3"].broker_pid() == pids["w3"]


def test_garbled_rank_map_is_reported_and_rebuilt_once_deleted(kube, agents):
    add_node(kube, "w1")
    kube.create(
        "configmaps",
        {"metadata": {"name": "fluxnode-ranks"}, "data": {"ranks.json": "{not json"}},
        "fluxnode",
    )
    agent = agents("w1")
    wait_for(
        lambda: "ConfigMap fluxnode/fluxnode-ranks: rank map ranks.json:" in agent.log,
        20,
        what="error logged",
    )
    assert agent.proc.poll() is None and "Traceback" not in agent.log
    kube.delete("configmaps", "fluxnode-ranks", "fluxnode")
    agent.wait_broker()
    assert ranks(kube)["hosts"] == ["w1"]
    # deleted again after this agent wrote it: rebuilt again, the broker keeps running
    pid = agent.broker_pid()
    kube.delete("configmaps", "fluxnode-ranks", "fluxnode")
    wait_for(lambda: kube.list("configmaps", "fluxnode"), 20, what="rank map recreated")
    assert (
        ranks(kube)["hosts"] == ["w1"] and agent.broker_pid() == pid
    )  # same placement: no restart
    add_node(kube, "w2")
    wait_for(lambda: hosts_in(agent) == ["w1", "w2"], 20, what="w2 added to the rebuilt map")


def test_unwritable_bin_dir_is_a_warning_not_a_failure(kube, agents, tmp_path):
    add_node(kube, "w1")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    agent = agents("w1", "--bin-dir", str(blocker / "bin"))
    agent.wait_broker()
    assert (
        "cannot write the connect script" in agent.log and "pass a writable --bin-dir" in agent.log
    )


def test_not_ready_interior_broker_keeps_its_subtree_and_the_leader_stays(kube, agents):
    names = ("w1", "w2", "w3", "w4")  # kary:2: w1 -> w2, w3; w2 -> w4
    for name in names:
        add_node(kube, name)
    fast = ("--tbon", "torpid_min=0.2s", "--tbon", "torpid_max=2s")
    nodes = {name: agents(name, *fast) for name in names}
    pids = {name: a.wait_broker() for name, a in nodes.items()}
    leader = nodes["w1"]
    wait_for(lambda: resource_list(leader).get("free") == list(names), 60, what="4 brokers up")
    assert 'torpid_max = "2s"' in leader.config()
    kube.set_node_ready("w2", False)
    wait_for(lambda: nodes["w2"].broker_pid() is None, 20, what="w2's broker stopped")
    wait_for(lambda: "w2" in resource_list(leader).get("down", []), 30, what="w2 down")
    assert nodes["w4"].broker_pid() == pids["w4"]  # the subtree below w2 was not shut down
    kube.set_node_ready("w2", True)
    wait_for(
        lambda: resource_list(leader).get("free") == list(names), 60, what="w2 and its subtree back"
    )
    assert nodes["w4"].broker_pid() == pids["w4"]
    # the leader's node going NotReady does not take the overlay down
    kube.set_node_ready("w1", False)
    wait_for(
        lambda: "hosts the leader (rank 0): its broker keeps running" in leader.log,
        20,
        what="leader kept",
    )
    assert leader.broker_pid() == pids["w1"] and resource_list(leader).get("free")
