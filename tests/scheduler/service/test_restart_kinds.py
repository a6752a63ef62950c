"""Restarts keep a heterogeneous group's per-kind placement: the journal and sched.list/info
carry where each slot kind landed, and a restarted binder gives each unbound pod exactly
its planned share of the one allocation (never a second allocation, never first-fit over
per-node totals, which fails for some shapes although a split exists)."""

import sqlite3
from collections import Counter

import pytest
from fluxnode.agent.kube import raw as kube_raw
from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.cluster_state import PodInfo
from fluxnode.scheduler.binder.slot_assignment import AssignmentError, PodSlot, assign
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.journal import Journal, JournalEntry
from support.binder_cluster import BinderCluster
from support.sched_leader import restart_leader

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

OLD_SCHEMA = """
CREATE TABLE allocation (id INTEGER PRIMARY KEY, jobspec TEXT NOT NULL, policy TEXT NOT NULL,
                         R TEXT NOT NULL, nodes TEXT NOT NULL, labels TEXT NOT NULL,
                         created REAL NOT NULL);
CREATE TABLE counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO allocation VALUES (7, '{"version": 1}', 'first', '{}',
                               '[{"rank": 0, "cores": "0-1"}]', '{"g": "old"}', 1.0);
INSERT INTO counter VALUES ('alloc', 1000);
"""

KINDS = [{"label": "s0", "count": 1, "slot": {"cores": 2, "gpus": 0, "memory_mib": 0},
          "nodes": [{"rank": 0, "hostname": "node0", "cores": "0-1", "gpus": "", "memory_mib": 0}]}]


def test_a_journal_from_before_kinds_is_read_and_upgraded(tmp_path):
    db = sqlite3.connect(tmp_path / "sched.db")
    db.executescript(OLD_SCHEMA)
    db.close()
    j = Journal(tmp_path / "sched.db")
    [old] = j.entries()
    assert (old.id, old.nodes, old.labels, old.kinds) == (
        7,
        [{"rank": 0, "cores": "0-1"}],
        {"g": "old"},
        None,
    )
    new = j.next_id()
    assert new > 1000
    j.record(
        JournalEntry(new, {"version": 1}, "first", {}, KINDS[0]["nodes"], {"g": "new"}, 2.0, KINDS)
    )
    j.shrink(old.id, {}, [])  # an entry without kinds stays without
    j.close()
    j = Journal(tmp_path / "sched.db")
    assert [(e.id, e.kinds) for e in j.entries()] == [(7, None), (new, KINDS)]
    j.shrink(new, {}, [], [{**KINDS[0], "nodes": []}])
    assert j.entries()[1].kinds[0]["nodes"] == []
    j.close()


def kinds_spec(*kinds, hosts=None):
    """A jobspec of several slot kinds: (cores, gpus, count) each."""
    return build_jobspec(
        [SlotKind(c, g, 0, n) for c, g, n in kinds],
        constraints={"hostlist": [hosts]} if hosts else None,
    )


def test_the_per_kind_placement_survives_a_leader_restart(tmp_path):
    resources = {
        f"node{i}": {"cores": 4, "gpus": 1 if i == 0 else 0, "memory_mib": 4096} for i in range(2)
    }
    with Instance(size=2, tmp_path=tmp_path, modules=None, resources=resources,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 20, what="2 ranks")
        m = inst.rpc(
            "sched.alloc",
            {"jobspec": kinds_spec((3, 0, 1), (1, 1, 1), (1, 0, 3)), "labels": {"g": "mixed"}},
        )
        one = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        assert "kinds" in m and "kinds" not in one
        assert {k["label"]: k["slot"] for k in m["kinds"]} == {
            "s0": {"cores": 3, "gpus": 0, "memory_mib": 0},
            "s1": {"cores": 1, "gpus": 1, "memory_mib": 0},
            "s2": {"cores": 1, "gpus": 0, "memory_mib": 0},
        }
        listed = inst.rpc("sched.list", {"labels": {"g": "mixed"}})["allocations"]
        assert [x["kinds"] for x in listed] == [m["kinds"]]
        assert inst.rpc("sched.info", {"id": m["id"]})["kinds"] == m["kinds"]
        assert "kinds" not in inst.rpc("sched.info", {"id": one["id"]})
        allocs = restart_leader(inst, 2)
        assert [(x["id"], x["nodes"], x.get("kinds")) for x in allocs] == [
            (m["id"], m["nodes"], m["kinds"]), (one["id"], one["nodes"], None)]
        assert inst.rpc("sched.info", {"id": m["id"]})["kinds"] == m["kinds"]
        # a partial cancel drops that rank from every kind, and that too is journaled (7 cores
        # of 8 span both nodes; the GPU kind is on node0, the only one with a GPU)
        assert [n["hostname"] for n in m["nodes"]] == ["node0", "node1"]
        [gone] = [n["rank"] for k in m["kinds"] if k["label"] == "s1" for n in k["nodes"]]
        inst.rpc("sched.cancel", {"id": m["id"], "ranks": str(gone)})
        restart_leader(inst, 2)
        [x] = wait_for(
            lambda: [a for a in inst.rpc("sched.list", {})["allocations"] if a["id"] == m["id"]],
            30,
            what="replayed again",
        )
        expected = [
            {**k, "nodes": [n for n in k["nodes"] if n["rank"] != gone]} for k in m["kinds"]
        ]
        assert x["kinds"] == expected
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
        # the allocation a binder asks for (see Binder._prepare): one slot kind per shape
        kinds = sorted(Counter((cores, 0, 0) for cores in shapes.values()).items())
        spec = build_jobspec(
            [SlotKind(cr, g, m, n) for (cr, g, m), n in kinds],
            constraints={"hostlist": ["node[0-1]"]},
            name=group,
        )
        a = c.inst.rpc(
            "sched.alloc",
            {
                "jobspec": spec,
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
        share = {k["slot"]["cores"]: {n["hostname"]: n for n in k["nodes"]} for k in a["kinds"]}
        assert {h: n["cores"] for h, n in share[3].items()} == {"node1": "2-4"}
        assert {h: n["cores"] for h, n in share[2].items()} == {"node0": "0-3", "node1": "0-1"}
        # one 2-core pod was bound on node1 before the binder stopped
        bind_like_a_previous_binder(c, pods["h-0"], PodSlot(1, "node1", "0-1", ""), a["id"], group)
        unbound = {uid[n]: (shapes[n], 0, 0) for n in ("h-big", "h-1", "h-2")}
        left = [{**a["nodes"][0]}, {**a["nodes"][1], "cores": "2-4"}]
        with pytest.raises(AssignmentError):
            assign(unbound, left)  # what the rebuild did before it knew the kinds
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
            assert cores[name] <= set(idset.decode(share[shapes[name]][nodes[name]]["cores"])), (
                name,
                ann,
            )
        assert cores["h-1"] | cores["h-2"] == {0, 1, 2, 3}
        c.assert_no_overcommit()
        # every pod was bound exactly once (three by the new binder), and nothing else was asked for
        bound = Counter(r.name for r in list(c.kube.requests)[binds_before:]
                        if r.verb == "create" and r.resource_path == "pods/binding")
        assert bound == {"h-big": 1, "h-1": 1, "h-2": 1}
        listed = c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
        assert [(x["id"], x["nodes"], x["kinds"]) for x in listed] == [
            (a["id"], a["nodes"], a["kinds"])
        ]
        held = c.inst.rpc("sched.resource-status")["allocated"]["execution"]["R_lite"]
        assert sum(len(idset.decode(r["children"]["core"])) for r in held) == 9


def test_a_replay_that_re_picks_core_ids_keeps_the_kinds_consistent(tmp_path):
    # `pad` is freed before the restart, so the replay may pin the group on other ids than
    # it was first given: whatever it picks, the kinds must name exactly the held cores,
    # each kind its own, and nothing held may be handed out again.
    with Instance(
        size=1,
        tmp_path=tmp_path,
        modules=None,
        resources={"node0": {"cores": 4, "memory_mib": 1024}},
        tbon={"torpid_min": "0.2s", "torpid_max": "1s"},
    ) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 1, 20, what="1 rank")
        pad = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        m = inst.rpc("sched.alloc", {"jobspec": kinds_spec((2, 0, 1), (1, 0, 1))})
        inst.rpc("sched.cancel", {"id": pad["id"]})
        inst.kill(0)
        inst.restart(0)
        [x] = wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 1
                       and inst.rpc("sched.list", {})["allocations"], 30, what="restarted leader")
        held = set(idset.decode(x["nodes"][0]["cores"]))
        per_kind = {k["label"]: set(idset.decode(k["nodes"][0]["cores"])) for k in x["kinds"]}
        assert {label: len(c) for label, c in per_kind.items()} == {"s0": 2, "s1": 1}
        assert per_kind["s0"] | per_kind["s1"] == held and not per_kind["s0"] & per_kind["s1"]
        assert inst.rpc("sched.info", {"id": m["id"]})["kinds"] == x["kinds"]
        free = inst.rpc("sched.alloc", {"jobspec": kinds_spec((1, 0, 1))})
        assert not set(idset.decode(free["nodes"][0]["cores"])) & held
