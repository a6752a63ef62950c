"""The journal replay is exact and never partial, and `sched.adopt` holds exactly what it is
told: after a leader restart no core or GPU is in two live allocations, and no journaled
allocation is dropped, whatever order the ranks come back in.

The oracle is independent of the service: `overlaps` reads the answers' per-node idsets
with the tests' own idset parser and finds any (rank, kind, id) named twice.
"""

import errno
import random
import subprocess
import sys

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.module import SchedService
from support import seeds
from support.oracles import parse_idset
from support.sched_handle import SchedHandle as Handle

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

CORES = 4


def spec(cores, count=1, nnodes=None, hosts=None):
    return build_jobspec([SlotKind(cores, 0, 0, count)], nnodes=nnodes,
                         constraints={"hostlist": [hosts]} if hosts else None)


def overlaps(allocations) -> list[str]:
    """Every (rank, core|gpu, id) named by two allocations (each a list of node dicts)."""
    owner: dict[tuple, int] = {}
    found = []
    for alloc_id, nodes in allocations:
        for n in nodes:
            for kind in ("cores", "gpus"):
                for i in parse_idset(n.get(kind) or ""):
                    key = (n["rank"], kind, i)
                    if key in owner:
                        found.append(f"rank {key[0]} {kind} {i}: allocations {owner[key]} and "
                                     f"{alloc_id}")
                    owner[key] = alloc_id
    return found


def machine(ranks):
    return build_R([NodeResources(rank=i, hostname=f"node{i}", cores=list(range(CORES)))
                    for i in ranks])


def wire(alloc):
    """An allocation's nodes as sched.list shows them."""
    return [n.to_wire() for n in alloc.nodes]


def live(svc):
    return [(a.id, wire(a)) for a in svc.allocations.values() if a.status == "ALLOCATED"]


def test_replay_holds_the_recorded_ids_and_ranks_not_back_join_allocated(tmp_path):
    """A journal with holes (allocations freed out of order) replayed into a leader that
    sees only rank 0: the other ranks' parts stay pending, nothing there is handed out,
    and each rank that joins holds exactly its recorded ids again."""
    seed = seeds.choose("test_replay_holds_the_recorded_ids_and_ranks_not_back_join_allocated")
    rng = random.Random(seed)
    svc = SchedService(Handle(tmp_path, machine(range(4)), 4))
    def fill(times, most):
        for _ in range(times):
            try:
                svc.alloc({"jobspec": spec(rng.randint(1, 2), count=rng.randint(1, most))})
            except ServiceError as exc:
                assert exc.errnum == errno.EBUSY, exc.errstr

    fill(12, 3)
    # holes, freed out of order: 4, or all but one when the first few filled the machine
    # (seed 127767699: 6 + 6 + 3 of 16 cores, then nothing else fits)
    ids = sorted(svc.allocations)
    for alloc_id in rng.sample(ids, min(4, len(ids) - 1)):
        svc.cancel({"id": alloc_id})
    fill(6, 2)
    recorded = {a.id: wire(a) for a in svc.allocations.values()}
    assert not overlaps(recorded.items())
    svc.close()

    # the leader restarts: only its own rank is known at first
    svc = SchedService(Handle(tmp_path, machine([0]), 4))
    try:
        assert {a.id: wire(a) for a in svc.allocations.values()} == recorded  # none dropped
        for a in svc.allocations.values():
            assert a.pending == {n.rank for n in a.nodes} - {0}, a
        # everything free on rank 0 goes to new allocations: none overlaps a recorded one
        while True:
            try:
                svc.alloc({"jobspec": spec(1)})
            except ServiceError as exc:
                assert exc.errnum == errno.EBUSY, exc.errstr
                break
        assert not overlaps(live(svc)), seed
        # the ranks come back in a random order, one by one
        order = [1, 2, 3]
        rng.shuffle(order)
        for i in range(len(order)):
            svc.resources_changed(machine([0, *sorted(order[: i + 1])]), [])
            while True:  # take whatever is free on the ranks back so far
                try:
                    svc.alloc({"jobspec": spec(1)})
                except ServiceError as exc:
                    assert exc.errnum == errno.EBUSY, exc.errstr
                    break
            assert not overlaps(live(svc)), (seed, order[: i + 1])
        assert all(not a.pending for a in svc.allocations.values())
        for alloc_id, nodes in recorded.items():
            assert wire(svc.allocations[alloc_id]) == nodes
        # the machine is exactly full: every core of every rank is held once
        held = sum(len(parse_idset(n["cores"])) for _i, nodes in live(svc) for n in nodes)
        assert held == 4 * CORES
    finally:
        svc.close()


def test_partial_cancel_of_a_pending_rank_frees_nothing_twice(tmp_path):
    svc = SchedService(Handle(tmp_path, machine(range(3)), 3))
    a = svc.alloc({"jobspec": spec(CORES, count=3)})
    svc.close()
    svc = SchedService(Handle(tmp_path, machine([0]), 3))
    try:
        assert svc.list({})["allocations"][0]["pending"] == "1-2"
        assert svc.cancel({"id": a["id"], "ranks": "1"})["remaining"] == "0,2"
        svc.resources_changed(machine(range(3)), [])
        # rank 1 was freed while pending: all of it is free; rank 2 joined allocated
        b = svc.alloc({"jobspec": spec(CORES)})
        assert [n["rank"] for n in b["nodes"]] == [1]
        with pytest.raises(ServiceError) as info:
            svc.alloc({"jobspec": spec(1)})
        assert info.value.errnum == errno.EBUSY
    finally:
        svc.close()


def test_adopt_holds_exact_ids_and_names_a_conflict(tmp_path):
    svc = SchedService(Handle(tmp_path, machine(range(2)), 3))
    try:
        x = svc.adopt({"nodes": [{"rank": 0, "cores": "1,3"}, {"rank": 2, "cores": "0-1"}],
                       "labels": {"owner": "test"}})
        assert x["status"] == "ALLOCATED" and x["pending"] == "2"
        assert [(n["rank"], n["cores"]) for n in x["nodes"]] == [(0, "1,3"), (2, "0-1")]
        # rank 0's free cores are 0 and 2, in that order for a first-match policy
        y = svc.alloc({"jobspec": spec(2, hosts="node0")})
        assert y["nodes"][0]["cores"] == "0,2"
        with pytest.raises(ServiceError) as info:
            svc.adopt({"nodes": [{"rank": 1, "cores": "0"}, {"rank": 2, "cores": "1"}]})
        assert info.value.errnum == errno.EBUSY
        assert f"rank 2 core 1 is held by allocation {x['id']}" in info.value.errstr
        assert svc.allocations.keys() == {x["id"], y["id"]}  # the refused one holds nothing
        assert svc.alloc({"jobspec": spec(CORES, hosts="node1")})["nodes"][0]["cores"] == "0-3"
        svc.resources_changed(machine(range(3)), [])  # rank 2 joins: 0-1 held, 2-3 free
        z = svc.alloc({"jobspec": spec(2, hosts="node2")})
        assert z["nodes"][0]["cores"] == "2-3"
        assert not overlaps(live(svc))
    finally:
        svc.close()
    # journaled like any allocation: a restarted leader holds it again, exactly
    svc = SchedService(Handle(tmp_path, machine(range(3)), 3))
    try:
        assert wire(svc.allocations[x["id"]]) == x["nodes"]
        assert not svc.allocations[x["id"]].pending
        with pytest.raises(ServiceError) as info:
            svc.alloc({"jobspec": spec(1)})
        assert info.value.errnum == errno.EBUSY
    finally:
        svc.close()


@pytest.mark.parametrize("payload, problem", [
    ({}, "nodes: must be a non-empty list"),
    ({"nodes": []}, "nodes: must be a non-empty list"),
    ({"nodes": [{"rank": 9, "cores": "0"}]}, "nodes[0].rank: 9 is outside the instance"),
    ({"nodes": [{"rank": -1, "cores": "0"}]}, "nodes[0].rank: must be an integer >= 0"),
    ({"nodes": [{"rank": True, "cores": "0"}]}, "nodes[0].rank: must be an integer >= 0"),
    ({"nodes": [{"rank": 0, "cores": "0"}, {"rank": 0, "cores": "1"}]},
     "nodes[1].rank: rank 0 is listed twice"),
    ({"nodes": [{"rank": 0, "cores": "x"}]}, "nodes[0].cores:"),
    ({"nodes": [{"rank": 0, "cores": 3}]}, "nodes[0].cores: must be an idset string"),
    ({"nodes": [{"rank": 0, "cores": "7"}]}, "nodes: rank 0 (node0) has no core 7"),
    ({"nodes": [{"rank": 2, "cores": "0-70000"}]}, "holds 70001 ids, which exceeds 65536"),
    ({"nodes": [{"rank": 2, "cores": "70000"}]}, "nodes[0].cores: id 70000 is too large"),
    ({"nodes": [{"rank": 0}]}, "nodes[0]: holds nothing"),
    ({"nodes": [{"rank": 0, "cores": "0", "colour": "red"}]}, "nodes[0]: must be an object"),
    ({"nodes": [{"rank": 0, "cores": "0"}], "labels": []}, "labels: must be an object"),
])
def test_adopt_refuses_bad_payloads_naming_what_is_wrong(tmp_path, payload, problem):
    svc = SchedService(Handle(tmp_path, machine(range(2)), 3))
    try:
        with pytest.raises(ServiceError) as info:
            svc.adopt(payload)
        assert info.value.errnum == errno.EINVAL and problem in info.value.errstr, info.value
        assert not svc.allocations and not svc.journal.entries()
    finally:
        svc.close()


def test_leader_kill_9_never_hands_a_recorded_core_out_again(tmp_path):
    """The issue's reproduction on real brokers: 8 brokers (kary:2), an allocation on every
    node, rank 0 killed with SIGKILL and started again on the same statedir. Whatever the
    restarted leader answers, before and after the others rejoin, no core is in two live
    allocations and the first allocation is never dropped."""
    with Instance(8, tmp_path, modules=None, tbon={"torpid_min": "0.2s", "torpid_max": "1.5s"},
                  resources={f"node{i}": {"cores": 2} for i in range(8)}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 8, 30,
                 what="8 ranks in the graph")
        out = subprocess.run(
            [sys.executable, "-m", "fluxnode", "alloc", "--nodes", "8", "--slots", "8",
             "--cores-per-slot", "1"],
            env={**inst.env, "FLUXNODE_URI": inst.uri}, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        [first] = inst.rpc("sched.list")["allocations"]
        inst.kill(0)
        inst.restart(0)
        wait_for(lambda: inst.rpc("sched.list")["allocations"], 30, what="the leader back")
        taken = []
        for _ in range(16):  # ask for every core there is, while the ranks come back
            try:
                a = inst.rpc("sched.alloc", {"jobspec": spec(1)})
                taken.append(a)
            except RPCError as exc:
                assert exc.errnum == errno.EBUSY, exc.errstr
            allocs = inst.rpc("sched.list")["allocations"]
            assert not overlaps([(a["id"], a["nodes"]) for a in allocs])
        allocs = inst.rpc("sched.list")["allocations"]
        assert next(a for a in allocs if a["id"] == first["id"])["nodes"] == first["nodes"]
        assert not overlaps([(a["id"], a["nodes"]) for a in allocs])


def test_unsatisfiable_on_part_of_the_machine_is_busy_until_every_rank_reported(tmp_path):
    """Right after a leader restart the graph holds only the ranks back so far: a request
    that needs the rest is not "never fits" (ENODEV, which makes the binder give up on a
    pod) but busy; once every rank reported, a request that cannot fit is ENODEV."""
    svc = SchedService(Handle(tmp_path, machine([0]), 3))
    try:
        with pytest.raises(ServiceError) as info:
            svc.alloc({"jobspec": spec(CORES, count=3)})
        assert info.value.errnum == errno.EBUSY, info.value.errstr
        assert "ranks 1-2 have not reported their resources yet" in info.value.errstr
        svc.resources_changed(machine(range(3)), [])
        a = svc.alloc({"jobspec": spec(CORES, count=3)})
        assert sorted(n["rank"] for n in a["nodes"]) == [0, 1, 2]
        with pytest.raises(ServiceError) as info:
            svc.alloc({"jobspec": spec(CORES + 1)})
        assert info.value.errnum == errno.ENODEV, info.value.errstr
    finally:
        svc.close()
