"""The scheduler service through a real broker instance (sched.* RPCs over the local connector)."""

import errno
import subprocess
import sys

import pytest
from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.broker_conf import idset
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from support.oracles import parse_idset
from support.sched_leader import restart_leader

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

RESOURCES = {
    f"node{i}": {"cores": 4, "gpus": 1 if i == 0 else 0, "memory_mib": 4096} for i in range(3)
}


def spec(cores, count, gpus=0, hosts=None):
    return build_jobspec(
        [SlotKind(cores, gpus, 0, count)], constraints={"hostlist": [hosts]} if hosts else None
    )


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(
        size=3, tmp_path=tmp_path_factory.mktemp("sched"), modules=None, resources=RESOURCES
    ) as inst:
        wait_for(
            lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 3,
            20,
            what="3 ranks in the graph",
        )
        yield inst


def errnum(inst, topic, payload):
    with pytest.raises(RPCError) as info:
        inst.rpc(topic, payload)
    return info.value.errnum, info.value.errstr


def test_alloc_list_info_cancel(inst):
    a = inst.rpc("sched.alloc", {"jobspec": spec(2, 3), "labels": {"group": "g1"}})
    assert a["status"] == "ALLOCATED"
    # 3 slots of 2 cores: exactly 6 cores, each node's a whole number of slots
    per_node = [len(parse_idset(n["cores"])) for n in a["nodes"]]
    assert sum(per_node) == 6 and all(k % 2 == 0 for k in per_node), a["nodes"]
    assert a["R"]["execution"]["R_lite"]
    listed = inst.rpc("sched.list", {"labels": {"group": "g1"}})["allocations"]
    assert [x["id"] for x in listed] == [a["id"]]
    assert inst.rpc("sched.info", {"id": a["id"]})["jobspec"]["resources"]
    status = inst.rpc("sched.resource-status")
    assert status["allocated"]["execution"]["R_lite"]
    out = inst.rpc("sched.cancel", {"id": a["id"]})
    assert out["remaining"] == ""
    assert errnum(inst, "sched.info", {"id": a["id"]})[0] == errno.ENOENT


def test_partial_cancel_frees_only_those_ranks(inst):
    a = inst.rpc("sched.alloc", {"jobspec": spec(4, 3)})  # every core of every node
    assert sorted(n["rank"] for n in a["nodes"]) == [0, 1, 2]
    assert errnum(inst, "sched.alloc", {"jobspec": spec(1, 1)})[0] == errno.EBUSY
    out = inst.rpc("sched.cancel", {"id": a["id"], "ranks": "1"})
    assert out == {"id": a["id"], "freed": "1", "remaining": "0,2"}
    b = inst.rpc("sched.alloc", {"jobspec": spec(4, 1)})
    assert [n["hostname"] for n in b["nodes"]] == ["node1"]
    # what is left of the first allocation is still held
    assert errnum(inst, "sched.alloc", {"jobspec": spec(1, 1)})[0] == errno.EBUSY
    for x in (a, b):
        inst.rpc("sched.cancel", {"id": x["id"]})


def test_errors_say_what_is_wrong(inst):
    n, msg = errnum(inst, "sched.alloc", {"jobspec": spec(5, 1)})
    assert n == errno.ENODEV and "unsatisfiable" in msg
    n, msg = errnum(inst, "sched.alloc", {"jobspec": {"version": 1, "resources": []}})
    assert n == errno.EINVAL and "jobspec" in msg
    n, msg = errnum(inst, "sched.alloc", {"jobspec": spec(1, 1), "policy": "fastest"})
    assert n == errno.EINVAL and "policy" in msg
    n, msg = errnum(inst, "sched.cancel", {"id": "x"})
    assert n == errno.EINVAL
    a = inst.rpc("sched.alloc", {"jobspec": spec(1, 1)})
    n, msg = errnum(inst, "sched.cancel", {"id": a["id"], "ranks": "7"})
    assert n == errno.EINVAL and "holds" in msg
    inst.rpc("sched.cancel", {"id": a["id"]})


def test_hostlist_constraint_pins_and_reservation(inst):
    a = inst.rpc("sched.alloc", {"jobspec": spec(1, 1, hosts="node2")})
    assert a["nodes"][0]["hostname"] == "node2"
    inst.rpc("sched.cancel", {"id": a["id"]})
    full = inst.rpc("sched.alloc", {"jobspec": spec(4, 3)})
    r = inst.rpc("sched.alloc", {"jobspec": spec(4, 2), "op": "allocate_orelse_reserve"})
    assert r["status"] == "RESERVED" and r["at"] > 0
    inst.rpc("sched.cancel", {"id": r["id"]})
    inst.rpc("sched.cancel", {"id": full["id"]})


def test_batch_answers_in_order_and_stops_after_a_reservation(inst):
    out = inst.rpc("sched.alloc", {"requests": [{"jobspec": spec(4, 1), "labels": {"n": "a"}},
                                                 {"jobspec": spec(4, 1), "labels": {"n": "b"}}]})
    first, second = out["answers"]
    assert first["status"] == second["status"] == "ALLOCATED"
    assert first["nodes"][0]["rank"] != second["nodes"][0]["rank"]
    listed = {x["id"]: x["labels"] for x in inst.rpc("sched.list", {})["allocations"]}
    assert listed[first["id"]] == {"n": "a"} and listed[second["id"]] == {"n": "b"}
    # one node is left: a refusal does not stop the batch
    out = inst.rpc(
        "sched.alloc",
        {"requests": [{"jobspec": spec(4, 2)}, {"jobspec": spec(5, 1)}, {"jobspec": spec(4, 1)}]},
    )
    busy, never, third = out["answers"]
    assert busy["errnum"] == errno.EBUSY and busy["errstr"].startswith("busy")
    assert never["errnum"] == errno.ENODEV and never["errstr"].startswith("unsatisfiable")
    assert third["status"] == "ALLOCATED"
    assert len(inst.rpc("sched.list", {})["allocations"]) == 3
    # a reservation ends the batch: what comes after may depend on it
    out = inst.rpc(
        "sched.alloc",
        {
            "requests": [
                {"jobspec": spec(4, 1), "op": "allocate_orelse_reserve"},
                {"jobspec": spec(1, 1)},
            ]
        },
    )
    assert [a["status"] for a in out["answers"]] == ["RESERVED"]
    for a in (first, second, third, out["answers"][0]):
        inst.rpc("sched.cancel", {"id": a["id"]})
    for bad, word in (({"requests": []}, "non-empty"), ({"requests": [1]}, "requests[0]"),
                      ({"requests": [{"jobspec": spec(1, 1)}], "jobspec": spec(1, 1)}, "combined"),
                      ({"requests": [{"requests": []}]}, "nest")):
        n, msg = errnum(inst, "sched.alloc", bad)
        assert n == errno.EINVAL and word in msg, msg
    out = inst.rpc(
        "sched.alloc",
        {"requests": [{"jobspec": spec(1, 1), "policy": "fastest"}, {"jobspec": spec(1, 1)}]},
    )
    bad, good = out["answers"]
    assert bad["errnum"] == errno.EINVAL and "policy" in bad["errstr"]
    assert good["status"] == "ALLOCATED"
    inst.rpc("sched.cancel", {"id": good["id"]})
    assert inst.rpc("sched.list", {})["allocations"] == []


def kinds_spec(*kinds, hosts=None):
    """A jobspec of several slot kinds: (cores, gpus, count) each."""
    return build_jobspec(
        [SlotKind(c, g, 0, n) for c, g, n in kinds],
        constraints={"hostlist": [hosts]} if hosts else None,
    )


def held(nodes):
    return sum(len(idset.decode(n["cores"])) for n in nodes), sum(
        len(idset.decode(n["gpus"])) for n in nodes
    )


def test_several_slot_kinds_are_one_exact_allocation(inst):
    # 2 slots of 3 cores, 3 slots of 1 core and 1 slot of 1 core + 1 GPU (only node0 has one)
    a = inst.rpc(
        "sched.alloc",
        {"jobspec": kinds_spec((3, 0, 2), (1, 0, 3), (1, 1, 1)), "labels": {"g": "mixed"}},
    )
    assert a["status"] == "ALLOCATED"
    assert held(a["nodes"]) == (
        2 * 3 + 3 + 1,
        1,
    )  # exactly the slots' sum, not 6 slots of the largest
    kinds = {}  # kind -> its slots' shares (the jobspec's kinds are s0, s1, s2 in this order)
    for slot in a["slots"]:
        kinds.setdefault(slot["kind"], []).append(slot)
    assert {k: (len(slots), held(slots)) for k, slots in kinds.items()} == {
        0: (2, (6, 0)), 1: (3, (3, 0)), 2: (1, (1, 1))}
    assert [s["hostname"] for s in kinds[2]] == ["node0"]
    listed = inst.rpc("sched.list", {"labels": {"g": "mixed"}})["allocations"]
    assert [(x["id"], x["nodes"]) for x in listed] == [(a["id"], a["nodes"])]
    assert inst.rpc("sched.info", {"id": a["id"]})["jobspec"]["resources"][0]["label"] == "s0"
    # 2 cores are left in all: a 2-core + 1-core request is busy, and holds nothing after
    assert (
        errnum(inst, "sched.alloc", {"jobspec": kinds_spec((2, 0, 1), (1, 0, 1))})[0] == errno.EBUSY
    )
    n, msg = errnum(inst, "sched.alloc", {"jobspec": kinds_spec((4, 0, 3), (1, 0, 1))})
    assert n == errno.ENODEV and "13 cores" in msg and "12 cores" in msg, msg
    n, msg = errnum(inst, "sched.alloc", {"jobspec": kinds_spec((1, 2, 1), (1, 0, 1))})
    assert n == errno.ENODEV and "slot" in msg and "2 gpus" in msg, msg
    left = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 2))})
    assert held(left["nodes"]) == (2, 0)
    inst.rpc("sched.cancel", {"id": left["id"]})
    # a reservation books the largest shape for every slot
    r = inst.rpc(
        "sched.alloc",
        {"jobspec": kinds_spec((2, 0, 1), (1, 0, 2)), "op": "allocate_orelse_reserve"},
    )
    assert r["status"] == "RESERVED" and held(r["nodes"]) == (6, 0) and "slots" not in r
    inst.rpc("sched.cancel", {"id": r["id"]})
    # partial cancel by ranks frees that rank of every kind
    rank = kinds[2][0]["rank"]
    out = inst.rpc("sched.cancel", {"id": a["id"], "ranks": str(rank)})
    assert out["freed"] == str(rank)
    whole = inst.rpc("sched.alloc", {"jobspec": spec(4, 1, hosts=f"node{rank}")})
    inst.rpc("sched.cancel", {"id": whole["id"]})
    inst.rpc("sched.cancel", {"id": a["id"]})
    assert inst.rpc("sched.list", {})["allocations"] == []


def test_cli_alloc_allocs_cancel(inst):
    env = {"FLUXNODE_URI": inst.broker_uri(0), "PATH": "/usr/bin:/bin"}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "fluxnode", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    out = run("alloc", "--slots", "2", "--cores-per-slot", "2")
    assert out.returncode == 0, out.stderr
    alloc_id = int(out.stdout.split()[1].rstrip(":"))
    assert "ALLOCATED" in out.stdout and "node" in out.stdout
    listing = run("allocs")
    assert (
        listing.returncode == 0 and str(alloc_id) in listing.stdout and "NCORES" in listing.stdout
    )
    bad = run("alloc", "--nodes", "2", "--slots", "3")
    assert bad.returncode != 0 and "not a multiple" in bad.stderr and "Traceback" not in bad.stderr
    done = run("cancel", str(alloc_id))
    assert done.returncode == 0 and "freed" in done.stdout
    again = run("cancel", str(alloc_id))
    assert again.returncode != 0 and "not found" in again.stderr


def test_tcp_client_with_curve(inst):
    with Client.connect(inst.tcp_uri(0), curve_cert=inst.cert_path) as c:
        assert "allocations" in c.rpc("sched.list", {})


def test_allocations_survive_a_leader_restart(tmp_path):
    with Instance(
        size=2,
        tmp_path=tmp_path,
        modules=None,
        resources={k: RESOURCES[k] for k in ("node0", "node1")},
        tbon={"torpid_min": "0.2s", "torpid_max": "1s"},
    ) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 20, what="2 ranks")
        a = inst.rpc(
            "sched.alloc", {"jobspec": spec(4, 1, hosts="node1"), "labels": {"group": "keep"}}
        )
        b = inst.rpc("sched.alloc", {"jobspec": spec(3, 1, hosts="node0")})
        inst.rpc("sched.cancel", {"id": b["id"]})
        m = inst.rpc(
            "sched.alloc",
            {
                "jobspec": kinds_spec((1, 0, 1), (1, 1, 1), hosts="node0"),
                "labels": {"group": "mixed"},
            },
        )
        allocs = restart_leader(inst, 2)
        assert [(x["id"], x["labels"], x["nodes"]) for x in allocs] == [
            (a["id"], {"group": "keep"}, a["nodes"]), (m["id"], {"group": "mixed"}, m["nodes"])]
        # node1 is still fully held, and node0's GPU and 2 of its cores: nothing is handed out twice
        assert errnum(inst, "sched.alloc", {"jobspec": spec(1, 1, hosts="node1")})[0] == errno.EBUSY
        assert errnum(inst, "sched.alloc", {"jobspec": spec(1, 1, gpus=1)})[0] == errno.EBUSY
        c = inst.rpc("sched.alloc", {"jobspec": spec(2, 1)})
        assert c["id"] > m["id"] and c["nodes"][0]["hostname"] == "node0"


def test_down_ranks_are_never_allocated(tmp_path):
    res = {f"node{i}": {"cores": 2} for i in range(3)}
    with Instance(size=3, tmp_path=tmp_path, modules=None, resources=res,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 3, 20, what="3 ranks")
        inst.kill(2)
        wait_for(
            lambda: inst.rpc("sched.resource-status")["down"]["execution"]["R_lite"],
            30,
            what="rank 2 down",
        )
        a = inst.rpc("sched.alloc", {"jobspec": spec(2, 2)})
        assert sorted(n["hostname"] for n in a["nodes"]) == ["node0", "node1"]
        assert errnum(inst, "sched.alloc", {"jobspec": spec(1, 1)})[0] == errno.EBUSY
        listed = inst.rpc("resource.list")
        assert {e["hostname"] for e in listed["allocated"]} == {"node0", "node1"}
        assert [e["hostname"] for e in listed["down"]] == ["node2"]


def test_binder_cli_errors_are_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fluxnode",
            "binder",
            "--kubeconfig",
            str(tmp_path / "missing"),
            "--uri",
            "tcp://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "cannot load Kubernetes configuration" in out.stderr
