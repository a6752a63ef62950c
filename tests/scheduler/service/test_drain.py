"""Drained nodes in the scheduler service (Flux's `flux resource drain` meaning): nothing new is
placed on them, running allocations stay, the drain survives a leader restart, and requests
that need them are busy, never unsatisfiable. Real brokers; the oracle is what each answer
names (ranks, ids), compared with the drains the test made."""

from __future__ import annotations

import errno

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from support.sched_leader import restart_leader

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

RESOURCES = {f"node{i}": {"cores": 4, "sockets": 1, "memory_mib": 4096} for i in range(3)}


def spec(cores: int, count: int = 1, nnodes: int | None = None) -> dict:
    return build_jobspec([SlotKind(cores, 0, 0, count)], nnodes=nnodes)


@pytest.fixture
def inst(tmp_path):
    with Instance(size=3, tmp_path=tmp_path, modules=None, resources=RESOURCES,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 3, 20,
                 what="3 ranks in the graph")
        yield inst


def error(inst, topic: str, payload: dict) -> tuple[int, str]:
    with pytest.raises(RPCError) as info:
        inst.rpc(topic, payload)
    return info.value.errnum, info.value.errstr


def ranks_of(answer: dict) -> set[int]:
    return {n["rank"] for n in answer["nodes"]}


def drain_list(inst) -> dict[int, dict]:
    return {d["rank"]: d for d in inst.rpc("sched.resource-status")["drain"]}


def test_a_drained_node_gets_nothing_new_and_keeps_what_runs(inst):
    running = inst.rpc("sched.alloc", {"jobspec": spec(4)})  # a whole node
    (busy,) = ranks_of(running)
    idle, usable = sorted({0, 1, 2} - {busy})
    targets = f"{min(busy, idle)},{max(busy, idle)}"
    assert inst.rpc("sched.drain", {"targets": targets, "reason": "maintenance"}) == {
        "drained": targets.replace(",", "-") if abs(busy - idle) == 1 else targets}
    drained = drain_list(inst)
    assert set(drained) == {busy, idle}
    assert drained[busy]["state"] == "draining" and drained[idle]["state"] == "drained"
    assert drained[busy]["reason"] == "maintenance" and drained[busy]["source"] == "operator"
    # Only the third node is usable: four 1-core requests land there, the fifth is busy (it
    # would fit the machine), never unsatisfiable.
    for _ in range(4):
        assert ranks_of(inst.rpc("sched.alloc", {"jobspec": spec(1)})) == {usable}
    errnum, errstr = error(inst, "sched.alloc", {"jobspec": spec(1)})
    assert errnum == errno.EBUSY, errstr
    errnum, _ = error(inst, "sched.alloc", {"jobspec": spec(1, 12)})  # 12 cores > 4 usable
    assert errnum == errno.EBUSY
    errnum, _ = error(inst, "sched.alloc", {"jobspec": spec(1, 13)})  # > 12 in the machine
    assert errnum == errno.ENODEV
    # The running allocation is untouched and can be cancelled; then its node is "drained".
    assert inst.rpc("sched.info", {"id": running["id"]})["status"] == "ALLOCATED"
    inst.rpc("sched.cancel", {"id": running["id"]})
    assert drain_list(inst)[busy]["state"] == "drained"
    # Undrain: that node is usable again, and is the only one with free cores.
    assert inst.rpc("sched.undrain", {"targets": str(busy)})["undrained"] == str(busy)
    assert ranks_of(inst.rpc("sched.alloc", {"jobspec": spec(1)})) == {busy}


def test_drain_modes_as_flux_resource_drain(inst):
    inst.rpc("sched.drain", {"targets": "node1", "reason": "first"})
    first = drain_list(inst)[1]
    errnum, errstr = error(inst, "sched.drain", {"targets": "1", "reason": "second"})
    assert errnum == errno.EEXIST and "node1 already drained" in errstr
    inst.rpc("sched.drain", {"targets": "1", "reason": "second", "mode": "update"})
    assert drain_list(inst)[1]["reason"] == "first"
    inst.rpc("sched.drain", {"targets": "1", "reason": "third", "mode": "overwrite"})
    again = drain_list(inst)[1]
    assert again["reason"] == "third" and again["timestamp"] == first["timestamp"]
    wait_for(lambda: __import__("time").time() > first["timestamp"] + 0.01, 1)
    inst.rpc("sched.drain", {"targets": "1", "reason": "fourth", "mode": "force-overwrite"})
    assert drain_list(inst)[1]["timestamp"] > first["timestamp"]
    errnum, errstr = error(inst, "sched.undrain", {"targets": "2"})
    assert errnum == errno.EINVAL and "node2 not drained" in errstr
    assert inst.rpc("sched.undrain", {"targets": "1-2", "mode": "force"})["undrained"] == "1"


def test_undrain_by_source_keeps_an_operators_drain(inst):
    inst.rpc("sched.drain", {"targets": "0", "reason": "disk", "source": "operator"})
    inst.rpc("sched.drain", {"targets": "0-1", "reason": "cordoned", "mode": "update",
                             "source": "kubernetes"})
    sources = {r: d["source"] for r, d in drain_list(inst).items()}
    assert sources == {0: "operator", 1: "kubernetes"}
    answer = inst.rpc("sched.undrain", {"targets": "0-1", "source": "kubernetes"})
    assert answer == {"undrained": "1", "kept": "0"}
    assert set(drain_list(inst)) == {0}


@pytest.mark.parametrize(
    "payload, words",
    [
        ({}, "targets: required"),
        ({"targets": "7"}, "rank(s) 7 are not in the instance"),
        ({"targets": "0-99999999"}, "targets:"),
        ({"targets": "nosuch[1-2]"}, "nosuch[1-2] not in the instance"),
        ({"targets": "0", "mode": "sideways"}, "mode: unknown 'sideways'"),
        ({"targets": "0", "reason": "x" * 300}, "reason: at most 256 characters"),
        ({"targets": "0", "reason": 5}, "reason: must be a string"),
    ],
)
def test_bad_drain_requests_are_named(inst, payload, words):
    errnum, errstr = error(inst, "sched.drain", payload)
    assert errnum == errno.EINVAL and words in errstr, errstr
    assert drain_list(inst) == {}


def test_drained_nodes_survive_a_leader_restart(inst):
    held = inst.rpc("sched.alloc", {"jobspec": spec(2)})
    (busy,) = ranks_of(held)
    other = next(r for r in (0, 1, 2) if r != busy)
    (usable,) = {0, 1, 2} - {busy, other}
    inst.rpc("sched.drain", {"targets": f"node[{min(busy, other)},{max(busy, other)}]",
                             "reason": "rack 7 power"})
    restart_leader(inst, 3)
    drained = drain_list(inst)
    assert set(drained) == {busy, other} and drained[other]["reason"] == "rack 7 power"
    assert drained[busy]["state"] == "draining"  # the replayed allocation is still there
    assert inst.rpc("sched.info", {"id": held["id"]})["status"] == "ALLOCATED"
    assert ranks_of(inst.rpc("sched.alloc", {"jobspec": spec(4)})) == {usable}


def test_use_drained_holds_what_already_runs_on_a_drained_node(inst):
    inst.rpc("sched.drain", {"targets": "1"})
    constrained = build_jobspec([SlotKind(2, 0, 0, 1)], constraints={"hostlist": ["node1"]})
    errnum, _ = error(inst, "sched.alloc", {"jobspec": constrained})
    assert errnum == errno.EBUSY
    answer = inst.rpc("sched.alloc", {"jobspec": constrained, "use_drained": True})
    assert ranks_of(answer) == {1}
    # The drain is back in force for everyone else at once.
    errnum, _ = error(inst, "sched.alloc", {"jobspec": constrained})
    assert errnum == errno.EBUSY
    # A hold of what already runs there is not work that drains: the node is "drained",
    # not "draining" for as long as (say) a DaemonSet pod runs on it, also after a restart.
    assert drain_list(inst)[1]["state"] == "drained"
    restart_leader(inst, 3)
    assert drain_list(inst)[1]["state"] == "drained"
    held = inst.rpc("sched.info", {"id": answer["id"]})
    assert held["status"] == "ALLOCATED" and held["use_drained"] is True


def test_resource_status_leaves_the_node_list_out_until_it_changes(inst):
    """`nodes_since`: a reader that has the node list as of `nodes_version` gets no list
    again until it changes (a drain marks a node), then the new one; a version from elsewhere
    gets the list."""
    first = inst.rpc("sched.resource-status")
    version = first["nodes_version"]
    again = inst.rpc("sched.resource-status", {"nodes_since": version})
    assert "nodes" not in again and again["nodes_version"] == version
    assert again["allocated"] == first["allocated"] and again["drain"] == first["drain"]
    assert inst.rpc("sched.resource-status", {"nodes_since": "elsewhere.0"})["nodes"] \
        == first["nodes"]
    inst.rpc("sched.drain", {"targets": "1", "reason": "maintenance"})
    changed = inst.rpc("sched.resource-status", {"nodes_since": version})
    assert changed["nodes_version"] != version
    assert [n["rank"] for n in changed["nodes"] if n["drained"]] == [1]
    assert "nodes" not in inst.rpc("sched.resource-status",
                                   {"nodes_since": changed["nodes_version"]})
