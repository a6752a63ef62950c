"""`config.reload`: a running broker applies a grown or shrunk broker.toml without restarting."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import config as config_mod

from fluxnode.testing.instance import Instance
from fluxnode.testing.ports import free_port
from fluxnode.testing.waiting import wait_for

FLUXNODE = [sys.executable, "-m", "fluxnode"]
CORES = {f"node{i}": {"cores": i + 1} for i in range(6)}


def write_config(inst: Instance, text: str) -> None:
    """Replace broker.toml atomically, as the node agent does."""
    path = Path(inst.config_path)
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def per_host(inst: Instance) -> tuple[dict, list[dict]]:
    """The instance's config as a TOML mapping, with one hosts entry per host."""
    cfg = config_mod.load(inst.config_path)
    data = cfg.to_dict()
    hosts = [
        {k: v for k, v in (("host", h.host), ("bind", h.bind), ("connect", h.connect)) if v}
        for h in cfg.hosts
    ]
    data["bootstrap"]["hosts"] = hosts
    return data, hosts


def grown(inst: Instance, size: int, binds: dict[str, int]) -> str:
    """The instance's config with hosts node<old size>..node<size-1> appended; `binds` gives
    brokers that gain their first children a TBON port."""
    data, hosts = per_host(inst)
    for host, port in binds.items():
        entry = next(e for e in hosts if e["host"] == host)
        entry["bind"] = entry["connect"] = f"tcp://127.0.0.1:{port}"
    hosts += [{"host": f"node{r}"} for r in range(len(hosts), size)]
    return config_mod.dumps(config_mod.from_dict(data))


def shrunk(inst: Instance, size: int) -> str:
    data, hosts = per_host(inst)
    data["bootstrap"]["hosts"] = hosts[:size]
    return config_mod.dumps(config_mod.from_dict(data))


def reload_cli(inst: Instance, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*FLUXNODE, "config", "reload", *args],
        env={**os.environ, "FLUXNODE_URI": inst.uri},
        capture_output=True,
        text=True,
        timeout=60,
    )


def resource_hosts(inst: Instance) -> dict[str, list[str]]:
    out = inst.rpc("resource.list")
    return {state: [e["hostname"] for e in out[state]] for state in ("free", "allocated", "down")}


def module_info(inst: Instance, nnodes: int) -> dict | None:
    """What the test module saw last through on_resources_changed, once R has `nnodes` nodes."""
    info = inst.rpc("testmod.info")
    return info if info["nnodes"] == nnodes and info["changes"][-1]["nnodes"] == nnodes else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_grow_then_shrink_without_restarting_any_broker():
    """kary:2 from 3 to 5 brokers: rank 1 (a leaf) gains children 3 and 4, rank 0 the size."""
    env = {
        "PYTHONPATH": str(Path(__file__).parent / "modules")
        + os.pathsep
        + os.environ.get("PYTHONPATH", "")
    }
    with Instance(3, resources=CORES, modules="overlay_testmod", env=env) as inst:
        pids = dict(inst.pids)
        write_config(inst, grown(inst, 5, {"node1": free_port()}))
        p = reload_cli(inst, "--rank", "1")
        assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p.stderr
        reply = inst.rpc("config.reload", {}, nodeid=0)
        assert reply == {"rank": 0, "size": 5, "children": [1, 2]}
        assert (
            inst.rpc("config.reload", {}, nodeid=2)["size"] == 5
        )  # unaffected, but learns the size
        status = inst.rpc("broker.status")
        assert (status["size"], status["online"], status["state"]) == (5, "0-2", "run")
        assert resource_hosts(inst)["down"] == ["node3", "node4"]
        assert inst.rpc("attr.get", {"name": "size"}, nodeid=1)["value"] == "5"

        inst.add_broker(3, "node3", CORES["node3"])
        inst.add_broker(4, "node4", CORES["node4"])
        wait_for(lambda: inst.online() == "0-4", 30, what="node3 and node4 joined under rank 1")
        # the test module reports rank 1's two cores allocated
        wait_for(
            lambda: (
                resource_hosts(inst)
                == {
                    "free": ["node0", "node2", "node3", "node4"],
                    "allocated": ["node1"],
                    "down": [],
                }
            ),
            10,
            what="resource list with the new nodes",
        )
        listed = inst.rpc("resource.list")
        assert {e["hostname"]: e["ncores"] for e in listed["free"] + listed["allocated"]} == {
            f"node{i}": i + 1 for i in range(5)}
        assert [c["rank"] for c in inst.health(1)["children"]] == [3, 4]
        with inst.client(rank=2) as c:  # rank 2 routes to the new rank 4 through 0 and 1
            assert c.rpc("broker.ping", {}, nodeid=4)["route"].endswith("!2!0!1!4")
        info = wait_for(lambda: module_info(inst, 5), 10, what="the module saw R grow")
        assert info["size"] == 5 and info["down"] == []
        for rank in (0, 1, 2):
            assert inst.pids[rank] == pids[rank] and alive(pids[rank]), f"rank {rank} was restarted"
        assert "quorum reached" in inst.log(0)

        # shrink back: ranks 3 and 4 leave, then the brokers reload a 3-host config
        inst.kill(3, 15)
        inst.kill(4, 15)
        wait_for(lambda: inst.online() == "0-2", 20, what="ranks 3, 4 offline")
        write_config(inst, shrunk(inst, 3))
        for rank in (1, 0, 2):
            assert inst.rpc("config.reload", {}, nodeid=rank)["size"] == 3
        status = inst.rpc("broker.status")
        assert (status["size"], status["online"], status["count"], status["quorum"]) == (
            3,
            "0-2",
            3,
            3,
        )
        assert resource_hosts(inst) == {
            "free": ["node0", "node2"],
            "allocated": ["node1"],
            "down": [],
        }
        assert inst.health(1)["children"] == [] and inst.health(1)["status"] == "full"
        assert inst.rpc("resource.R")["R"]["execution"]["nodelist"] == ["node[0-2]"]
        info = wait_for(lambda: module_info(inst, 3), 10, what="the module saw R shrink")
        assert info["size"] == 3 and info["down"] == []
        with pytest.raises(RPCError) as exc:
            inst.rpc("broker.ping", {}, nodeid=4)
        assert exc.value.errnum == errno.EHOSTUNREACH and "instance size 3" in exc.value.errstr
        for rank in (0, 1, 2):
            assert inst.pids[rank] == pids[rank] and alive(pids[rank]), f"rank {rank} was restarted"


def test_invalid_config_is_refused_and_the_old_one_keeps_serving():
    with Instance(3) as inst:
        good = Path(inst.config_path).read_text()
        pids = dict(inst.pids)
        write_config(inst, good.replace('topo = "kary:2"', 'topo = "kary:x"'))
        with pytest.raises(RPCError) as exc:
            inst.rpc("config.reload")
        assert exc.value.errnum == errno.EINVAL
        assert f"{inst.config_path}: tbon.topo:" in exc.value.errstr
        p = reload_cli(inst, "--rank", "2")
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith("fluxnode-config: config.reload: ") and "tbon.topo" in p.stderr
        write_config(inst, "[bootstrap\n")
        with pytest.raises(RPCError) as exc:
            inst.rpc("config.reload")
        assert exc.value.errnum == errno.EINVAL and "TOML syntax error" in exc.value.errstr
        # nothing was lost: same size, same tree, everyone answers
        status = inst.rpc("broker.status")
        assert (status["size"], status["online"], status["state"]) == (3, "0-2", "run")
        assert inst.rpc("broker.ping", {}, nodeid=2)["route"].endswith("!0!2")
        assert inst.pids == pids
        write_config(inst, good)
        assert inst.rpc("config.reload")["size"] == 3


def test_changes_that_need_a_restart_are_refused():
    with Instance(3) as inst:
        good = Path(inst.config_path).read_text()
        # kary:1 makes rank 2 a child of rank 1: rank 2's parent changes
        write_config(inst, good.replace('topo = "kary:2"', 'topo = "kary:1"'))
        with pytest.raises(RPCError) as exc:
            inst.rpc("config.reload", nodeid=2)
        assert exc.value.errnum == errno.EOPNOTSUPP
        assert "parent of rank 2 changed from 0 to 1; restart the broker" in exc.value.errstr
        # node1 and node2 swap ranks
        data, hosts = per_host(inst)
        hosts[1], hosts[2] = hosts[2], hosts[1]
        write_config(inst, config_mod.dumps(config_mod.from_dict(data)))
        with pytest.raises(RPCError) as exc:
            inst.rpc("config.reload", nodeid=1)
        assert (
            exc.value.errnum == errno.EOPNOTSUPP
            and "rank of node1 changed from 1 to 2" in exc.value.errstr
        )
        # the leader's own endpoint moves
        data, hosts = per_host(inst)
        hosts[0]["bind"] = f"tcp://127.0.0.1:{free_port()}"
        write_config(inst, config_mod.dumps(config_mod.from_dict(data)))
        p = reload_cli(inst)
        assert (
            p.returncode == 1
            and "bind endpoint of rank 0 changed from tcp://127.0.0.1:" in p.stderr
        )
        assert inst.rpc("broker.status")["online"] == "0-2"


def test_a_new_broker_that_arrives_before_the_reload_joins_after_it():
    """On Kubernetes the new node's broker may start before its parent's agent reloads."""
    with Instance(2, tbon={"torpid_min": "0.1s", "torpid_max": "2s"}) as inst:
        pid0 = inst.pids[0]
        write_config(inst, grown(inst, 3, {}))  # kary:2: rank 2 is a second child of rank 0
        inst.add_broker(2, "node2")
        wait_for(
            lambda: "rank 2 is not a child of rank 0" in inst.log(0),
            20,
            what="rank 0 ignoring rank 2",
        )
        assert inst.online() == "0-1"
        assert inst.rpc("config.reload")["children"] == [1, 2]
        wait_for(lambda: inst.online() == "0-2", 20, what="rank 2 joined after the reload")
        assert inst.log(0).count("rank 2 is not a child of rank 0") == 1  # not once per keepalive
        assert inst.pids[0] == pid0 and alive(pid0)
