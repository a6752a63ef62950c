"""Restarts keep each slot of a request of slot kinds: the journal and sched.list/info
carry where every slot landed, and a restarted binder gives each unbound pod a slot of
its shape of the one allocation (never a second allocation, never a first-fit over
per-node totals, which fails for some shapes although a split exists)."""

from collections import Counter

import pytest
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.cluster_state import PodInfo
from fluxnode.scheduler.binder.slot_assignment import PodSlot
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from support.binder_cluster import BinderCluster
from support.sched_leader import restart_leader

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for


def kinds_spec(*kinds, hosts=None):
    """A jobspec of several slot kinds: (cores, gpus, count) each."""
    return build_jobspec(
        [SlotKind(c, g, 0, n) for c, g, n in kinds],
        constraints={"hostlist": [hosts]} if hosts else None,
    )


def slots(kinds):
    """Typed slot kinds: (cores, gpus, count) each."""
    return [{"cores": c, "gpus": g, "memory_mib": 0, "count": n} for c, g, n in kinds]


def first_fit(pods, nodes):
    """The split the binder used to make of per-node totals (the test's own, as oracle):
    pods largest first into the first node with room. None when some pod has none."""
    room = {n["hostname"]: len(idset.decode(n["cores"])) for n in nodes}
    for cores in sorted(pods, reverse=True):
        host = next((h for h, free in room.items() if free >= cores), None)
        if host is None:
            return None
        room[host] -= cores
    return room


def test_the_slots_survive_a_leader_restart(tmp_path):
    resources = {
        f"node{i}": {"cores": 4, "gpus": 1 if i == 0 else 0, "memory_mib": 4096} for i in range(2)
    }
    with Instance(size=2, tmp_path=tmp_path, modules=None, resources=resources,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 20, what="2 ranks")
        asked = slots([(3, 0, 1), (1, 1, 1), (1, 0, 2)])
        m = inst.rpc("sched.alloc", {"slots": asked, "labels": {"g": "mixed"}})
        # a jobspec of several kinds is answered with its slots too; one of no slots is not
        spec = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        node = inst.rpc("sched.alloc", {"jobspec": build_jobspec([SlotKind(1, 0, 0, 1)],
                                                                  nnodes=1)})
        assert [len(x.get("slots", [])) for x in (m, spec, node)] == [4, 1, 0]
        assert sorted(Counter(s["kind"] for s in m["slots"]).items()) == [(0, 1), (1, 1), (2, 2)]
        for s in m["slots"]:  # each slot holds its kind's shape
            k = asked[s["kind"]]
            assert (len(idset.decode(s["cores"])), len(idset.decode(s["gpus"]))) == (
                k["cores"], k["gpus"])
        listed = inst.rpc("sched.list", {"labels": {"g": "mixed"}})["allocations"]
        assert [(x["kinds"], x["slots"]) for x in listed] == [(asked, m["slots"])]
        assert inst.rpc("sched.info", {"id": m["id"]})["slots"] == m["slots"]
        allocs = restart_leader(inst, 2)
        assert [(x["id"], x["nodes"], x.get("slots")) for x in allocs] == [
            (m["id"], m["nodes"], m["slots"]), (spec["id"], spec["nodes"], spec["slots"]),
            (node["id"], node["nodes"], None)]
        # a partial cancel drops that rank's slots, and that too is journaled (6 cores of 8
        # span both nodes; the GPU kind is on node0, the only one with a GPU)
        assert [n["hostname"] for n in m["nodes"]] == ["node0", "node1"]
        [gone] = [s["rank"] for s in m["slots"] if s["kind"] == 1]
        inst.rpc("sched.cancel", {"id": m["id"], "ranks": str(gone)})
        restart_leader(inst, 2)
        [x] = wait_for(
            lambda: [a for a in inst.rpc("sched.list", {})["allocations"] if a["id"] == m["id"]],
            30,
            what="replayed again",
        )
        assert x["slots"] == [s for s in m["slots"] if s["rank"] != gone]
        assert [n["rank"] for n in x["nodes"]] == [
            n["rank"] for n in m["nodes"] if n["rank"] != gone
        ]


def bind_like_a_previous_binder(
    c: BinderCluster, pod: dict, slot: PodSlot, alloc_id: int, group: str
) -> None:
    """What a binder that was stopped after its first Binding left behind (its own writer)."""
    writer = PodWriter(
        kube_raw.RawApi(c.kube.api_client(), connections=1), "fluxnode", "previous-binder"
    )
    writer.bind(PodInfo.from_pod(pod), slot, alloc_id, group)


@pytest.mark.parametrize(
    "leader_restart", [False, True], ids=["binder-restart", "binder-and-leader-restart"]
)
def test_restarted_binder_gives_unbound_pods_of_a_heterogeneous_group_their_planned_share(
    tmp_path, leader_restart
):
    # node0 has 4 cores, node1 5. One pod of 3 cores and three of 2 fill 9 of them; the
    # service (policy first) puts the 3-core slot and one 2-core slot on node1 and two
    # 2-core slots on node0. First-fit over the per-node totals would put the 3-core pod
    # on node0 and then has no room for the last 2-core pod.
    with BinderCluster(tmp_path, {"node0": 4, "node1": 5}) as c:
        shapes = {"h-big": 3, "h-0": 2, "h-1": 2, "h-2": 2}
        pods = {
            name: c.create_pod(name, cpu=str(cores), group="h", size=len(shapes))
            for name, cores in shapes.items()
        }
        uid = {name: pod["metadata"]["uid"] for name, pod in pods.items()}
        group = "default/group/h"
        # the allocation a binder asks for (see SchedulingCycle._prepare): one slot kind per
        # shape
        asked = slots([(2, 0, 3), (3, 0, 1)])
        a = c.inst.rpc(
            "sched.alloc",
            {
                "slots": asked,
                "ranks": "0-1",
                "policy": "first",
                "op": "allocate",
                "labels": {
                    "owner": "binder:fluxnode",
                    "kind": "group",
                    "group": group,
                    "pods": sorted(uid.values()),
                },
            },
        )
        share = [(asked[s["kind"]]["cores"], s["hostname"], s["cores"]) for s in a["slots"]]
        assert share == [(2, "node0", "0-1"), (2, "node0", "2-3"), (2, "node1", "0-1"),
                         (3, "node1", "2-4")]
        # one 2-core pod was bound on node1 before the binder stopped
        bind_like_a_previous_binder(c, pods["h-0"], PodSlot(1, "node1", "0-1", ""), a["id"], group)
        left = [{**a["nodes"][0]}, {**a["nodes"][1], "cores": "2-4"}]
        assert first_fit([3, 2, 2], left) is None  # what the rebuild did before it had slots
        if leader_restart:
            c.inst.kill(0)
            c.inst.restart(0)
            wait_for(lambda: len(c.inst.rpc("sched.resource-status")["nodes"]) == 2
                     and c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"], 30,
                     what="restarted leader with both ranks and the allocation replayed")
        binds_before = len(c.kube.requests)
        c.start_binder()
        nodes = c.wait_bound(list(shapes))
        assert nodes == {"h-big": "node1", "h-0": "node1", "h-1": "node0", "h-2": "node0"}
        cores = {}
        for name in shapes:
            ann = c.get_pod(name)["metadata"]["annotations"]
            assert ann["fluxnode.io/allocation"] == str(a["id"]), (name, ann)
            cores[name] = set(idset.decode(ann["fluxnode.io/cores"]))
            assert len(cores[name]) == shapes[name], (name, ann)
            assert (shapes[name], nodes[name], ann["fluxnode.io/cores"]) in share, (name, ann)
        assert cores["h-1"] | cores["h-2"] == {0, 1, 2, 3}
        c.assert_no_overcommit()
        # every pod was bound exactly once (three by the new binder), and nothing else was asked for
        bound = Counter(r.name for r in list(c.kube.requests)[binds_before:]
                        if r.verb == "create" and r.resource_path == "pods/binding")
        assert bound == {"h-big": 1, "h-1": 1, "h-2": 1}
        listed = c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
        assert [(x["id"], x["nodes"], x["slots"]) for x in listed] == [
            (a["id"], a["nodes"], a["slots"])
        ]
        held = c.inst.rpc("sched.resource-status")["allocated"]["execution"]["R_lite"]
        assert sum(len(idset.decode(r["children"]["core"])) for r in held) == 9


def test_after_a_replay_the_slots_name_exactly_the_held_cores(tmp_path):
    # `pad` is freed before the restart, so a replay that re-matched could pin the group on
    # other ids than it was first given: the slots must name exactly the held cores, each
    # slot its own, and nothing held may be handed out again.
    with Instance(
        size=1,
        tmp_path=tmp_path,
        modules=None,
        resources={"node0": {"cores": 4, "memory_mib": 1024}},
        tbon={"torpid_min": "0.2s", "torpid_max": "1s"},
    ) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 1, 20, what="1 rank")
        pad = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        m = inst.rpc("sched.alloc", {"slots": slots([(2, 0, 1), (1, 0, 1)])})
        inst.rpc("sched.cancel", {"id": pad["id"]})
        inst.kill(0)
        inst.restart(0)
        [x] = wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 1
                       and inst.rpc("sched.list", {})["allocations"], 30, what="restarted leader")
        held = set(idset.decode(x["nodes"][0]["cores"]))
        per_kind = {s["kind"]: set(idset.decode(s["cores"])) for s in x["slots"]}
        assert {kind: len(c) for kind, c in per_kind.items()} == {0: 2, 1: 1}
        assert per_kind[0] | per_kind[1] == held and not per_kind[0] & per_kind[1]
        assert x["slots"] == m["slots"]
        assert inst.rpc("sched.info", {"id": m["id"]})["slots"] == x["slots"]
        free = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        assert not set(idset.decode(free["nodes"][0]["cores"])) & held
