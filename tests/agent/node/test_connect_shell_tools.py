"""`fluxnode exec` and `fluxnode archive` on the DaemonSet's overlay: node agents against the
API emulator start the brokers, and the commands run through each node's rendered
`fluxnode-connect` script, as an operator runs them (`kubectl exec ... fluxnode-connect`).
`--allow-exec` is the agent's switch for `[exec] allow`; without it exec is refused."""

from __future__ import annotations

import hashlib

from support.kube_agents import add_node, resource_list

from fluxnode.testing.waiting import wait_for


def test_exec_and_archive_through_the_connect_script(kube, agents, tmp_path):
    for name in ("w1", "w2"):
        add_node(kube, name)
    nodes = {name: agents(name, "--allow-exec") for name in ("w1", "w2")}
    for agent in nodes.values():
        agent.wait_broker()
        assert "[exec]\nallow = true" in agent.config()
    wait_for(lambda: resource_list(nodes["w1"]).get("free") == ["w1", "w2"], 60,
             what="both brokers up")

    done = nodes["w2"].connect("fluxnode", "exec", "-l", "-r", "all", "echo", "hi")
    assert done.returncode == 0, done.stderr
    # ranks answer in any order (docs/exec.md); each line whole and labelled
    assert sorted(done.stdout.splitlines(keepends=True)) == ["0: hi\n", "1: hi\n"], done.stdout
    done = nodes["w2"].connect("fluxnode", "exec", "-r", "0", "sh", "-c", "exit 3")
    assert done.returncode == 3

    src = tmp_path / "src"
    src.mkdir()
    payload = bytes(range(256)) * 4096  # 1 MiB
    (src / "blob").write_bytes(payload)
    done = nodes["w2"].connect("fluxnode", "archive", "create", "--name", "tools", "-C",
                               str(src), "blob")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    done = nodes["w1"].connect("fluxnode", "archive", "extract", "--name", "tools", "-C",
                               f"{out}/{{{{rank}}}}")
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        data = (out / str(rank) / "blob").read_bytes()
        assert hashlib.sha256(data).digest() == hashlib.sha256(payload).digest()


def test_without_allow_exec_the_overlay_refuses_exec(kube, agents):
    add_node(kube, "w1")
    agent = agents("w1")
    agent.wait_broker()
    assert "[exec]" not in agent.config()
    wait_for(lambda: resource_list(agent).get("free") == ["w1"], 60, what="the broker up")
    done = agent.connect("fluxnode", "exec", "true")
    assert done.returncode != 0
    assert "exec is disabled on w1 (rank 0): [exec] allow = false" in done.stderr, done.stderr
