"""The service's flat per-node graph: slots of cores + memory, slots wider than a socket,
node -> slot jobspecs and memory exhaustion, on real brokers whose R has 2 sockets x 4 cores."""

import errno
import subprocess
import sys

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.flat_graph import memory_granule_mib
from fluxnode.scheduler.service.module import SchedService
from support.sched_handle import SchedHandle as Handle
from support.sched_leader import restart_leader

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

MEMORY = 4096
GRANULE = memory_granule_mib(MEMORY)  # 32 MiB: 128 memory vertices per node
RESOURCES = {f"node{i}": {"cores": 8, "sockets": 2, "memory_mib": MEMORY} for i in range(2)}



def wire(alloc):
    """An allocation's nodes as sched.list shows them."""
    return [n.to_wire() for n in alloc.nodes]

def spec(cores, count, memory=0, nnodes=None, hosts=None):
    return build_jobspec([SlotKind(cores, 0, memory, count)], nnodes=nnodes,
                         constraints={"hostlist": [hosts]} if hosts else None)


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(
        size=2,
        tmp_path=tmp_path_factory.mktemp("sgraph"),
        modules=None,
        resources=RESOURCES,
        tbon={"torpid_min": "0.2s", "torpid_max": "1s"},
    ) as inst:
        wait_for(
            lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2,
            20,
            what="2 ranks in the graph",
        )
        yield inst


@pytest.fixture
def clean(inst):
    yield inst
    for a in inst.rpc("sched.list")["allocations"]:
        inst.rpc("sched.cancel", {"id": a["id"]})


def errnum(inst, payload):
    with pytest.raises(RPCError) as info:
        inst.rpc("sched.alloc", payload)
    return info.value.errnum, info.value.errstr


def test_R_keeps_sockets_and_the_graph_holds_all_memory(inst):
    R = inst.rpc("resource.R")["R"]
    types = {v["metadata"]["type"] for v in R["scheduling"]["graph"]["nodes"]}
    assert "socket" in types  # R is unchanged; only the service graph is flat
    nodes = inst.rpc("sched.resource-status")["nodes"]
    assert [(n["hostname"], n["cores"], n["memory_mib"]) for n in nodes] == [
        ("node0", 8, MEMORY),
        ("node1", 8, MEMORY),
    ]


def test_slots_of_cores_and_memory(clean):
    inst = clean
    a = inst.rpc("sched.alloc", {"jobspec": spec(1, 4, memory=1024)})
    assert a["status"] == "ALLOCATED"
    assert sum(n["memory_mib"] for n in a["nodes"]) == 4 * 1024
    assert sum(len(idset.decode(n["cores"])) for n in a["nodes"]) == 4
    b = inst.rpc("sched.alloc", {"jobspec": spec(1, 4, memory=1024)})
    assert sum(n["memory_mib"] for n in b["nodes"]) == 4 * 1024
    # all memory is held now; cores are still free but a slot with memory is busy
    n, msg = errnum(inst, {"jobspec": spec(1, 1, memory=GRANULE)})
    assert n == errno.EBUSY and msg.startswith("busy")
    inst.rpc("sched.alloc", {"jobspec": spec(1, 1)})  # a slot without memory still fits
    inst.rpc("sched.cancel", {"id": a["id"]})
    c = inst.rpc("sched.alloc", {"jobspec": spec(1, 2, memory=2048)})
    assert sum(n["memory_mib"] for n in c["nodes"]) == 4096


def test_memory_beyond_any_node_is_unsatisfiable(clean):
    n, msg = errnum(clean, {"jobspec": spec(1, 1, memory=MEMORY + 1)})
    assert n == errno.ENODEV and msg.startswith("unsatisfiable")


def test_memory_only_slot_takes_what_it_asks_rounded_to_a_granule(clean):
    inst = clean
    a = inst.rpc("sched.alloc", {"jobspec": spec(0, 1, memory=100, hosts="node0")})
    [node] = a["nodes"]
    assert node["cores"] == "" and 100 <= node["memory_mib"] < 100 + GRANULE
    b = inst.rpc(
        "sched.alloc", {"jobspec": spec(0, 1, memory=MEMORY - node["memory_mib"], hosts="node0")}
    )
    assert (
        b["nodes"][0]["memory_mib"] == MEMORY - node["memory_mib"]
    )  # the rest of the node, exactly
    assert errnum(inst, {"jobspec": spec(0, 1, memory=1, hosts="node0")})[0] == errno.EBUSY


def test_a_slot_wider_than_one_socket(clean):
    inst = clean
    a = inst.rpc("sched.alloc", {"jobspec": spec(6, 1)})
    assert len(a["nodes"]) == 1 and a["nodes"][0]["cores"] in ("0-5", "2-7")
    b = inst.rpc("sched.alloc", {"jobspec": spec(6, 1)})
    assert b["nodes"][0]["hostname"] != a["nodes"][0]["hostname"]
    assert errnum(inst, {"jobspec": spec(6, 1)})[0] == errno.EBUSY
    assert errnum(inst, {"jobspec": spec(9, 1)})[0] == errno.ENODEV


def test_node_slot_jobspec(clean):
    a = clean.rpc("sched.alloc", {"jobspec": spec(1, 4, nnodes=2)})
    assert [(n["hostname"], len(idset.decode(n["cores"]))) for n in a["nodes"]] == [
        ("node0", 2),
        ("node1", 2),
    ]


def run_cli(inst, *args):
    env = {"FLUXNODE_URI": inst.broker_uri(0), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "fluxnode", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cli_nodes_form_and_memory_slots(clean):
    out = run_cli(clean, "alloc", "--nodes", "2", "--slots", "4", "--cores-per-slot", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "ALLOCATED" in lines[0] and [line.split()[1] for line in lines[2:]] == ["node0", "node1"]
    out = run_cli(
        clean, "alloc", "--slots", "2", "--cores-per-slot", "3", "--memory-per-slot", "1024"
    )
    assert out.returncode == 0, out.stderr
    assert (
        sum(int(line.split()[-1].removesuffix("MiB")) for line in out.stdout.splitlines()[2:])
        == 2048
    )
    out = run_cli(clean, "alloc", "--cores-per-slot", "1", "--memory-per-slot", str(MEMORY * 2))
    assert out.returncode != 0 and "unsatisfiable" in out.stderr and "Traceback" not in out.stderr


def test_memory_allocations_survive_a_leader_restart(tmp_path):
    with Instance(size=2, tmp_path=tmp_path, modules=None, resources=RESOURCES,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 20, what="2 ranks")
        a = inst.rpc("sched.alloc", {"jobspec": spec(2, 1, memory=3000, hosts="node1")})
        [x] = restart_leader(inst, 2)
        assert (x["nodes"], x["restored"]) == (a["nodes"], True)
        left = MEMORY - a["nodes"][0]["memory_mib"]
        assert (
            errnum(inst, {"jobspec": spec(1, 1, memory=left + 1, hosts="node1")})[0] == errno.EBUSY
        )
        assert (
            inst.rpc("sched.alloc", {"jobspec": spec(1, 1, memory=left, hosts="node1")})["status"]
            == "ALLOCATED"
        )


def machine(n):
    return build_R(
        [
            NodeResources(
                rank=i, hostname=f"node{i}", cores=list(range(8)), sockets=2, memory_mib=MEMORY
            )
            for i in range(n)
        ]
    )


def test_graph_growth_and_down_ranks_keep_memory_allocations(tmp_path):
    svc = SchedService(Handle(tmp_path, machine(1)))
    try:
        a = svc.alloc({"jobspec": spec(6, 1, memory=MEMORY)})
        svc.resources_changed(
            machine(2), []
        )  # R grows: node1 added to the live graph, allocations kept
        assert [n["hostname"] for n in svc.graph.capacity()] == ["node0", "node1"]
        assert not svc.allocations[a["id"]].pending and wire(svc.allocations[a["id"]]) == a["nodes"]
        b = svc.alloc({"jobspec": spec(1, 1, memory=1)})
        assert b["nodes"][0]["hostname"] == "node1"  # node0's memory is still held
        svc.resources_changed(machine(2), [1])
        with pytest.raises(Exception) as info:
            svc.alloc({"jobspec": spec(1, 1, memory=1)})
        assert getattr(info.value, "errnum", None) == errno.EBUSY
        svc.resources_changed(machine(2), [])
        assert svc.alloc({"jobspec": spec(1, 1, memory=1)})["nodes"][0]["hostname"] == "node1"
    finally:
        svc.close()


def test_growth_adds_nodes_in_place_keeping_allocations_and_reservations(tmp_path):
    """R that only grows is added to the live graph: the same graph object, nothing
    replayed (the journal untouched), allocations and reservations still held."""
    svc = SchedService(Handle(tmp_path, machine(1)))
    try:
        a = svc.alloc({"jobspec": spec(8, 1)})
        r = svc.alloc({"jobspec": spec(8, 1, hosts="node0"), "op": "allocate_orelse_reserve"})
        assert r["status"] == "RESERVED"
        live, journal = svc.graph, svc.journal.entries()
        svc.resources_changed(machine(3), [])
        assert svc.graph is live  # no rebuild
        assert svc.journal.entries() == journal  # no replay
        assert [n["hostname"] for n in svc.graph.capacity()] == ["node0", "node1", "node2"]
        assert set(svc.allocations) == {a["id"], r["id"]}  # the reservation is kept too
        assert not svc.allocations[a["id"]].pending and wire(svc.allocations[a["id"]]) == a["nodes"]
        b = svc.alloc({"jobspec": spec(8, 2)})
        assert sorted(n["hostname"] for n in b["nodes"]) == [
            "node1",
            "node2",
        ]  # node0 is still held
        with pytest.raises(Exception) as info:
            svc.alloc({"jobspec": spec(1, 1)})
        assert getattr(info.value, "errnum", None) == errno.EBUSY
        svc.cancel({"id": a["id"]})  # its traverser parts survived the growth
        assert svc.alloc({"jobspec": spec(8, 1)})["nodes"][0]["hostname"] == "node0"
    finally:
        svc.close()


def test_changed_resources_rebuild_the_graph_and_replay_the_journal(tmp_path):
    """R whose nodes change (not only grow) gets a new graph, the journal replayed into it
    exactly and reservations dropped (their owner asks again). A node that came back
    smaller than an allocation's record has the ids it still has held; the record is kept
    as it was (the workload runs where it ran), the allocation shown pending."""
    svc = SchedService(Handle(tmp_path, machine(2)))
    try:
        a = svc.alloc({"jobspec": spec(4, 1, hosts="node1")})
        svc.alloc({"jobspec": spec(8, 1, hosts="node0")})
        r = svc.alloc({"jobspec": spec(8, 1, hosts="node0"), "op": "allocate_orelse_reserve"})
        assert r["status"] == "RESERVED"
        live = svc.graph
        smaller = build_R(
            [
                NodeResources(
                    rank=0, hostname="node0", cores=list(range(8)), sockets=2, memory_mib=MEMORY
                ),
                NodeResources(
                    rank=1, hostname="node1", cores=list(range(6)), sockets=2, memory_mib=MEMORY
                ),
            ]
        )
        svc.resources_changed(smaller, [])
        assert svc.graph is not live
        assert r["id"] not in svc.allocations
        replayed = svc.allocations[a["id"]]
        assert a["nodes"][0]["cores"] == "4-7"  # first match on node1: its upper half
        assert replayed.pending == {1} and wire(replayed) == a["nodes"]
        assert wire(svc.journal.entries()[0]) == a["nodes"]
        assert [n["cores"] for n in svc.graph.capacity()] == [8, 6]
        # node1 now has cores 0-5; 4-5 are still held by the allocation, 0-3 are free
        b = svc.alloc({"jobspec": spec(4, 1, hosts="node1")})
        assert b["nodes"][0]["cores"] == "0-3"
        with pytest.raises(Exception) as info:
            svc.alloc({"jobspec": spec(1, 1, hosts="node1")})
        assert getattr(info.value, "errnum", None) == errno.EBUSY
    finally:
        svc.close()


def test_growth_below_a_known_rank_keeps_rank_order(tmp_path):
    """A rank lower than one already in the graph joins late (its node vertex comes after
    the higher rank's): placement is still as on a graph built from all nodes at once."""
    def nodes(*ranks):
        return build_R(
            [
                NodeResources(rank=i, hostname=f"node{i}", cores=list(range(8)), memory_mib=MEMORY)
                for i in ranks
            ]
        )

    svc = SchedService(Handle(tmp_path, nodes(0, 2)))
    try:
        svc.alloc({"jobspec": spec(8, 1, hosts="node0")})
        live = svc.graph
        svc.resources_changed(nodes(0, 1, 2), [])
        assert svc.graph is live
        assert [n["hostname"] for n in svc.graph.capacity()] == ["node0", "node1", "node2"]
        assert svc.alloc({"jobspec": spec(1, 1)})["nodes"][0]["hostname"] == "node1"
    finally:
        svc.close()
