"""The members of declared groups as a replica's pod informer sees them (group_members.py):
what the webhook counts against a group's size. The oracle is Kubernetes' pod lifecycle: a
pod that Succeeded or Failed, or has a deletionTimestamp, is on its way out and must not
keep its replacement out."""

from __future__ import annotations

from fluxnode.scheduler.binder.group_members import GroupMembers
from fluxnode.scheduler.binder.podgroup import GroupKey

G = GroupKey("ns", "group", "g")


def pod(uid: str, group: str | None = "g", phase: str = "Pending", deleting: bool = False,
        node: str = "", queue: str | None = "batch") -> dict:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    if queue:
        labels["fluxnode.io/queue"] = queue
    meta: dict = {"name": f"p-{uid}", "namespace": "ns", "uid": uid, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_live_members_are_counted_ended_and_deleting_ones_are_not():
    members = GroupMembers()
    members.apply("SYNC", [pod("a"), pod("b", phase="Running", node="n1"), pod("c", None)])
    assert members.live_count(G) == 2
    members.apply("MODIFIED", pod("a", phase="Failed"))
    members.apply("ADDED", pod("d", deleting=True))
    assert members.live_count(G) == 1
    assert sorted(m.uid for m in members.snapshot()[G]) == ["a", "b", "d"]
    members.apply("DELETED", pod("b", phase="Running", node="n1"))
    assert members.live_count(G) == 0


def test_a_pod_that_changes_group_moves_and_a_sync_forgets_what_went():
    members = GroupMembers()
    members.apply("ADDED", pod("a"))
    members.apply("MODIFIED", pod("a", group="h"))
    assert members.live_count(G) == 0
    assert members.live_count(GroupKey("ns", "group", "h")) == 1
    members.apply("SYNC", [pod("b")])
    assert members.live_count(GroupKey("ns", "group", "h")) == 0
    assert members.live_count(G) == 1


def test_the_snapshot_holds_only_groups_opted_in_with_the_queue_label():
    members = GroupMembers()
    members.apply("SYNC", [pod("a"), pod("b", group="plain", queue=None)])
    plain = GroupKey("ns", "group", "plain")
    assert list(members.snapshot()) == [G]
    assert members.live_count(plain) == 1  # counted all the same
    members.apply("MODIFIED", pod("b", group="plain"))
    assert sorted(members.snapshot(), key=str) == [G, plain]
    members.apply("MODIFIED", pod("b", group="plain", queue=None))
    assert list(members.snapshot()) == [G]
