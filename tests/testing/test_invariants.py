"""THE checker (fluxnode.testing.invariants) names every kind of broken state it is shown, and
stays silent on a sound one; on a live leader it reads sched.list, the journal (read-only)
and pods through the real client, and catches a journal edited behind the leader's back.

Each broken state below is built by hand (or, in the live tests, by damaging the real thing
from outside), so every assertion that "the checker finds X" can fail if the checker goes blind.
"""

from __future__ import annotations

import sqlite3

import pytest
from kubernetes import client as kube_client

from fluxnode.testing.instance import Instance
from fluxnode.testing.invariants import (
    JOURNAL_FILE,
    IdsetParseError,
    Snapshot,
    check,
    gather,
    parse_idset,
    read_journal,
)
from fluxnode.testing.waiting import wait_for


def node(rank, cores, gpus="", memory_mib=0):
    return {"rank": rank, "hostname": f"node{rank}", "cores": cores, "gpus": gpus,
            "memory_mib": memory_mib}


def alloc(alloc_id, *nodes, status="ALLOCATED", labels=None):
    return {"id": alloc_id, "status": status, "at": 0, "nodes": list(nodes),
            "labels": labels or {}}


STATUS = {
    "all": {"version": 1, "execution": {"R_lite": [
        {"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}]}},
    "nodes": [{"rank": r, "hostname": f"node{r}", "cores": 4, "gpus": 1, "memory_mib": 4096,
               "status": "up"} for r in (0, 1)],
}


def snap(allocations, journal=None, pods=None):
    journal = journal if journal is not None else [
        {"id": a["id"], "nodes": a["nodes"], "labels": a["labels"]}
        for a in allocations if a["status"] == "ALLOCATED"]
    return Snapshot(allocations, STATUS, journal, None, pods)


def kinds(violations):
    return sorted(v.kind for v in violations)


def test_idsets_are_parsed_independently_and_strictly():
    assert parse_idset("0-3,7") == {0, 1, 2, 3, 7}
    assert parse_idset("[2,4-5]") == {2, 4, 5}
    assert parse_idset("") == frozenset()
    for bad in ("3-1", "0-2,2", "a", "1-"):
        with pytest.raises(IdsetParseError, match="idset"):
            parse_idset(bad)


def test_a_sound_state_has_no_violation():
    a = [alloc(1, node(0, "0-1", "0", 1024)), alloc(2, node(0, "2-3"), node(1, "0-3", "", 3072)),
         alloc(3, node(0, "0-3"), status="RESERVED")]  # a reservation holds nothing yet
    assert check(snap(a), {1: a[0]["nodes"], 2: a[1]["nodes"]}, exhaustive=True) == []


def test_a_core_or_gpu_in_two_allocations_is_named():
    a = [alloc(1, node(0, "0-1", "0")), alloc(2, node(0, "1-2")), alloc(3, node(0, "3", "0"))]
    found = check(snap(a))
    assert kinds(found) == ["core-twice", "gpu-twice"]
    assert "rank 0 cores [1] are held by allocation 1 and by allocation 2" in str(found)
    assert "rank 0 gpus [0] are held by allocation 1 and by allocation 3" in str(found)


def test_memory_beyond_capacity_and_ids_outside_R_are_named():
    a = [alloc(1, node(1, "0", "", 3072)), alloc(2, node(1, "1", "", 2048)),
         alloc(3, node(0, "4"))]
    found = check(snap(a))
    assert kinds(found) == ["memory-over", "outside-R"]
    assert "rank 1: 5120 MiB allocated" in str(found) and "> 4096 MiB" in str(found)
    assert "rank 0 cores [4], which R does not have" in str(found)


def test_acknowledged_allocations_must_be_there_exactly():
    a = [alloc(1, node(0, "0-1")), alloc(2, node(1, "0"))]
    expected = {1: [node(0, "0-1")], 2: [node(1, "0-1")], 5: [node(0, "3")]}
    found = check(snap(a), expected)
    assert kinds(found) == ["changed", "lost"]
    assert "allocation 2 was acknowledged as rank 1 cores [0-1]" in str(found)
    assert "acknowledged allocation 5 (rank 0 cores [3]) is missing" in str(found)
    # exhaustive: what no client holds is named too
    found = check(snap(a), {1: [node(0, "0-1")]}, exhaustive=True)
    assert kinds(found) == ["unexpected"]


def test_the_journal_must_hold_exactly_the_live_allocations():
    a = [alloc(1, node(0, "0-1")), alloc(2, node(1, "0"))]
    journal = [{"id": 1, "nodes": [node(0, "0")], "labels": {}},
               {"id": 9, "nodes": [node(1, "3")], "labels": {}}]
    found = check(snap(a, journal))
    assert kinds(found) == ["journal-differs", "journal-extra", "journal-missing"]
    assert "allocation 2 (rank 1 cores [0]) is live but not journaled" in str(found)
    unreadable = Snapshot(a, STATUS, None, "sched-journal.sqlite: file is not a database")
    assert kinds(check(unreadable)) == ["journal-unreadable"]


def pod(name, node_name, alloc_id, cores, *, rank=0, group=None, phase="Running"):
    ann = {"fluxnode.io/allocation": str(alloc_id), "fluxnode.io/cores": cores,
           "fluxnode.io/rank": str(rank), "fluxnode.io/gpus": ""}
    if group:
        ann["fluxnode.io/group"] = group
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": ann},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": phase}}


def test_pods_never_share_a_core_and_stay_inside_their_groups_allocation():
    a = [alloc(1, node(0, "0-1"), labels={"group": "default/PodGroup/g"}),
         alloc(2, node(0, "2-3"), labels={"group": "default/PodGroup/h"})]
    sound = [pod("g-0", "node0", 1, "0", group="default/PodGroup/g"),
             pod("g-1", "node0", 1, "1", group="default/PodGroup/g"),
             pod("done", "node0", 1, "0", phase="Succeeded"),  # finished: holds nothing
             {"metadata": {"name": "other"}, "spec": {"nodeName": "node0"}, "status": {}}]
    assert check(snap(a, pods=sound)) == []
    # re-adopted under a new id (the annotation names the old one): inside its group's: fine
    assert check(snap(a, pods=[pod("g-0", "node0", 99, "0", group="default/PodGroup/g")])) == []
    broken = [pod("g-0", "node0", 1, "0-1", group="default/PodGroup/g"),
              pod("g-1", "node0", 1, "1", group="default/PodGroup/g"),
              pod("h-0", "node0", 2, "1", group="default/PodGroup/h"),
              pod("x", "node0", 2, "2", group="default/PodGroup/g"),
              pod("gone", "node1", 7, "0", rank=1)]
    found = check(snap(a, pods=broken))
    text = "\n".join(map(str, found))
    assert "core 1 of node node0 is given to pod default/g-0 and pod default/g-1" in text
    assert "pod default/h-0 holds rank 0 cores [1] under allocation 2, which holds" in text
    assert "pod default/x of group default/PodGroup/g runs under allocation 2" in text
    assert "allocation 7, which is not live, and no live allocation of its group" in text
    assert kinds(found) == ["pod-core-twice", "pod-core-twice", "pod-outside", "pod-outside",
                            "pod-outside"]


FAST_TBON = {"torpid_min": "0.2s", "torpid_max": "1.5s"}


def test_on_a_live_leader_a_journal_edited_behind_its_back_is_caught(tmp_path):
    resources = {f"node{r}": {"cores": 4, "memory_mib": 1024} for r in (0, 1)}
    with Instance(2, tmp_path, modules=None, resources=resources, tbon=FAST_TBON) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 30,
                 what="both ranks in the scheduler graph")
        journal = inst.statedir(0) / JOURNAL_FILE
        spec = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "s0",
                                             "with": [{"type": "core", "count": 3}]}],
                "tasks": [{"command": ["x"], "slot": "s0", "count": {"per_slot": 1}}],
                "attributes": {"system": {"duration": 0}}}
        answers = [inst.rpc("sched.alloc", {"jobspec": spec}) for _ in range(2)]
        expected = {a["id"]: a["nodes"] for a in answers}
        snapshot = gather(inst.rpc, journal)
        assert [r["id"] for r in read_journal(journal)] == sorted(expected)
        assert check(snapshot, expected, exhaustive=True) == []
        # the damage: one journaled allocation removed from outside (a lost commit)
        db = sqlite3.connect(journal)
        db.execute("DELETE FROM allocation WHERE id=?", (answers[0]["id"],))
        db.commit()
        db.close()
        found = check(gather(inst.rpc, journal), expected, exhaustive=True)
        assert [v.kind for v in found] == ["journal-missing"], found
        assert f"allocation {answers[0]['id']} " in found[0].detail


def test_pods_are_read_through_the_real_client(kube, core: kube_client.CoreV1Api):
    kube.create("pods", pod("p", "node0", 3, "0-1"), "default")
    kube.create("pods", pod("q", "node0", 3, "1-2"), "default")
    snapshot = gather(lambda topic, payload: {"allocations": [alloc(3, node(0, "0-2"))]}
                      if topic == "sched.list" else STATUS, core_api=core)
    assert [p["metadata"]["name"] for p in snapshot.pods] == ["p", "q"]
    assert [v.kind for v in check(snapshot)] == ["pod-core-twice"]
