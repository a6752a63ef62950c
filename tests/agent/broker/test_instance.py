"""Real multi-broker instances: quorum, routing through the tree, CLI output."""

import json
import os
import subprocess
import sys

import pytest

from fluxnode.testing.instance import Instance

FLUXNODE = [sys.executable, "-m", "fluxnode"]


def run(inst, *args, check=True):
    env = {**os.environ, "FLUXNODE_URI": inst.uri}
    p = subprocess.run([*FLUXNODE, *args], env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_4_brokers_reach_quorum_and_leader_logs_progress(tmp_path):
    with Instance(4, tmp_path) as inst:
        status = inst.rpc("broker.status")
        assert status == {
            "rank": 0,
            "size": 4,
            "online": "0-3",
            "count": 4,
            "quorum": 4,
            "state": "run",
        }
        log = inst.log(0)
        assert "online: node[0-3] (ranks 0-3)" in log
        assert "quorum reached" in log


def test_quorum_attribute_is_a_count_or_an_idset(tmp_path):
    with Instance(3, tmp_path, attrs={"broker.quorum": "0-1"}) as inst:
        assert inst.rpc("broker.status")["quorum"] == 2
        assert inst.rpc("attr.get", {"name": "broker.quorum"})["value"] == "2"


def test_16_brokers_reach_quorum_and_every_rank_answers(tmp_path):
    with Instance(16, tmp_path, topo="kary:3") as inst:
        assert inst.online() == "0-15"
        with inst.client() as c:
            tags = {c.send("broker.ping", {"seq": r}, nodeid=r): r for r in range(16)}
            for tag, r in tags.items():
                msg = c.recv(tag)
                assert msg.errnum == 0
                assert msg.decode_payload()["route"].endswith(f"!{r}")


def test_ping_through_three_levels(inst8):
    p = run(inst8, "ping", "--count", "3", "--interval", "0", "7")
    lines = p.stdout.splitlines()
    assert len(lines) == 3
    for seq, line in enumerate(lines):
        assert line.startswith(f"7!broker.ping pad=0 seq={seq} time=")
        assert line.endswith("!0!1!3!7)")
    p = run(inst8, "ping", "--count", "1", "--pad", "65536", "7!broker")
    assert "pad=65536 seq=0" in p.stdout


def test_ping_from_a_leaf_goes_up_and_down(inst8):
    with inst8.client(rank=7) as c:
        assert c.rpc("broker.ping", {"x": 1}, nodeid=6)["route"].endswith("!7!3!1!0!2!6")
        assert c.rpc("broker.ping", {}, nodeid=7)["route"].endswith("!7")


def test_resource_list_aggregates_each_brokers_resources(inst8):
    out = run(inst8, "resource", "list").stdout.splitlines()
    # the test module reports cores 0-1 of node1 allocated
    assert out == [
        "     STATE NNODES   NCORES    NGPUS NODELIST",
        "      free      8       34        4 node[0-7]",
        " allocated      1        2        0 node1",
        "      down      0        0        0",
    ]
    assert run(inst8, "resource", "info").stdout.strip() == "8 Nodes, 36 Cores, 4 GPUs"


def test_overlay_status_draws_the_tree(inst8):
    out = run(inst8, "overlay", "status", "-t", "10").stdout.splitlines()
    assert out == [
        "0 node0: full",
        "├─ 1 node1: full",
        "│  ├─ 3 node3: full",
        "│  │  └─ 7 node7: full",
        "│  └─ 4 node4: full",
        "└─ 2 node2: full",
        "   ├─ 5 node5: full",
        "   └─ 6 node6: full",
    ]
    verbose = run(inst8, "overlay", "status", "-t", "10", "-vv").stdout.splitlines()
    assert verbose[0].startswith("0 node0: full for ") and verbose[0].endswith(" ms)")
    assert run(inst8, "overlay", "status", "--summary").stdout == "0 node0: full\n"


def test_start_test_size_8_resource_list_shows_this_machines_cores():
    ncores = len(os.sched_getaffinity(0))
    p = subprocess.run(
        [
            *FLUXNODE,
            "start",
            "--test-size",
            "8",
            "--test-hosts",
            "t[0-7]",
            "-S",
            "broker.modules=",
            "--",
            *FLUXNODE,
            "resource",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[1].split() == ["free", "8", str(8 * ncores), "0", "t[0-7]"]


def _start(*args: str, command: tuple[str, ...] = ("resource", "list")):
    return subprocess.run(
        [*FLUXNODE, "start", *args, "-S", "broker.modules=", "--", *FLUXNODE, *command],
        capture_output=True, text=True, timeout=60,
    )


def test_test_hosts_and_resources_make_the_instance_the_same_on_any_machine():
    """Host names and resources given in the command, not taken from this machine: the
    expected lines are written from the arguments (3 nodes x 3 cores, 2 GPUs each)."""
    p = _start("--test-size", "3", "--test-hosts", "a7,b[2-3],c1",
               "--test-resources", "cores=3,gpus=0-1,sockets=1,memory_mib=512")
    assert p.returncode == 0, p.stderr
    assert [line.split() for line in p.stdout.splitlines()[1:]] == [
        ["free", "3", "9", "6", "a7,b[2-3]"], ["allocated", "0", "0", "0"],
        ["down", "0", "0", "0"]]
    # an id list names the ids (0 and 2: two cores per node), a per-host file wins
    p = _start("--test-size", "2", "--test-hosts", "node[0-1]", "--test-resources", "cores=0,2",
               "--resource-override-dir", "example/nodes", command=("resource", "info"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "2 Nodes, 16 Cores, 0 GPUs\n"  # example/nodes/node{0,1}.json: 8 each
    p = _start("--test-size", "2", "--test-hosts", "x[0-1]", "--test-resources", "cores=0,2",
               "--resource-override-dir", "example/nodes", command=("resource", "info"))
    assert p.stdout == "2 Nodes, 4 Cores, 0 GPUs\n", p.stderr  # no file for x0, x1


def test_test_hosts_and_resources_errors_name_the_option():
    for args, message in [
        (("--test-hosts", "n[0-1]"), "Error: --test-hosts names 2 hosts, fewer than --test-size 3"),
        (("--test-hosts", "n[0-1],n1"), "Error: --test-hosts names a host twice"),
        (("--test-hosts", "n[2-"), "Error: Invalid value for '--test-hosts': "),
        (("--test-resources", "cores=2,disks=1"),
         "Error: Invalid value for '--test-resources': unknown key 'disks' in 'cores=2,disks=1' "
         "(known: cores, gpus, sockets, memory_mib)"),
        (("--test-resources", "sockets=two"),
         "Error: Invalid value for '--test-resources': sockets: must be a number, not 'two'"),
        (("--test-resources", "cores=x"), "Error: --test-resources: cores: invalid idset 'x'"),
        (("--topo", "ring"), "Error: Invalid value for '--topo': invalid topology 'ring'"),
        (("-S", "tbon.topo=ring"), "Error: Invalid value for '-S tbon.topo': invalid topology"),
        (("--tbon", "torpid_max=soon"),
         "Error: Invalid value for '--tbon': torpid_max: invalid duration 'soon'"),
    ]:
        p = _start("--test-size", "3", *args)
        assert p.returncode != 0 and p.stdout == "", (args, p.stdout)
        last = p.stderr.splitlines()[-1]
        assert last.startswith(message), (args, p.stderr)
        assert "Traceback" not in p.stderr


def test_start_exit_code_is_the_commands():
    p = subprocess.run(
        [
            *FLUXNODE,
            "start",
            "--test-size",
            "2",
            "-S",
            "broker.modules=",
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 7, p.stderr


def test_cli_errors_are_one_line_without_traceback(tmp_path):
    env = {**os.environ, "FLUXNODE_URI": f"local://{tmp_path}/nothing/local"}
    for args in (["ping", "--count", "1", "0"], ["resource", "list"], ["overlay", "status"]):
        p = subprocess.run([*FLUXNODE, *args], env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode != 0
        assert "Traceback" not in p.stderr
        assert (
            f"no broker is listening at local://{tmp_path}/nothing/local (No such file or "
            "directory)" in p.stderr
        )
        assert len(p.stderr.strip().splitlines()) == 1


def test_overlay_parentof_and_lookup(inst8):
    assert run(inst8, "overlay", "parentof", "7").stdout == "3\n"
    assert run(inst8, "overlay", "lookup", "3-5").stdout == "node[3-5]\n"
    assert run(inst8, "overlay", "lookup", "node[1,7]").stdout == "1,7\n"
    p = run(inst8, "overlay", "lookup", "zz", check=False)
    assert p.returncode == 1 and p.stderr.strip() == "Error: zz is not a host of this instance"


def test_resource_list_states_format_include_and_R(inst8):
    assert run(inst8, "resource", "list", "-n", "-s", "up,all").stdout.splitlines() == [
        "        up      8       36        4 node[0-7]",
        "       all      8       36        4 node[0-7]",
    ]
    assert run(
        inst8, "resource", "list", "-o", "{nodelist} {ranks} {ncores}", "-s", "allocated"
    ).stdout == ("NODELIST RANKS NCORES\nnode1 1 2\n")
    assert run(inst8, "resource", "list", "-n", "-i", "node[6-7]", "-s", "free").stdout == (
        "      free      2       15        1 node[6-7]\n")
    assert run(inst8, "resource", "info", "-s", "allocated").stdout == "1 Nodes, 2 Cores, 0 GPUs\n"
    p = run(inst8, "resource", "list", "-s", "bogus", check=False)
    assert p.returncode == 2 and "unknown state 'bogus'" in p.stderr

    R = json.loads(run(inst8, "resource", "R").stdout)
    assert R["version"] == 1 and R["execution"]["nodelist"]


def test_a_registration_asking_for_no_answer_gets_none_unless_refused(inst8):
    """Brokers register their resources with ``respond: false`` (issue 32: the answers went
    back down every hop for nobody); a client that does not say so is answered, and a
    refused registration is answered with its error either way."""
    from fluxnode.agent.broker.client import RPCError

    with inst8.client() as c:
        node = c.rpc("resource.get-local", nodeid=7)["node"]  # as it is: nothing changes
        assert c.rpc("resource.register", {"node": node}) == {}
        quiet = c.send("resource.register", {"node": node, "respond": False})
        after = c.send("broker.ping", {})  # the leader handles it after the registration
        assert c.recv(after).errnum == 0
        with pytest.raises(RPCError, match="no response"):
            c.recv(quiet, timeout=0)
        with pytest.raises(RPCError, match="out of range"):
            c.rpc("resource.register", {"node": {**node, "rank": 99}, "respond": False})


def _listening_ports(pid: int) -> list[int]:
    """The TCP ports `pid` holds a listening socket on, as the kernel lists them: the
    socket inodes among its descriptors, looked up in /proc/net/tcp (state 0A, LISTEN)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.append(int(fields[1].split(":")[1], 16))
    return sorted(ports)


def test_each_forked_broker_holds_only_its_own_tbon_listener(inst8):
    """The launcher binds every interior broker's TBON port before forking; each broker
    closes the others' (issue 32: by descriptor ranges), so a port is held by its broker
    alone and a leaf holds none."""
    for rank, pid in inst8.pids.items():
        endpoint = inst8.rpc("attr.get", {"name": "tbon.endpoint"}, nodeid=rank)["value"]
        port = int(endpoint.rsplit(":", 1)[1])
        interior = rank in (0, 1, 2, 3)  # kary:2 of 8: ranks 0-3 have children
        assert _listening_ports(pid) == ([port] if interior else []), (rank, endpoint)
