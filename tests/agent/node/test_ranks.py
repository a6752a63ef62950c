"""Stable ranks and node selection (pure planning over nodes as the emulator serves them)."""

from __future__ import annotations

import pytest
from fluxnode.agent.node.ranks import RankMap, plan
from fluxnode.agent.node.selection import NodeSelection, is_control_plane


def step(current: RankMap, members: list[str], joinable: list[str] | None = None) -> RankMap:
    return plan(current, set(members), members if joinable is None else joinable)


def test_new_nodes_are_appended_in_join_order():
    m = step(RankMap(), ["a", "b", "c"])
    assert m.hosts == ("a", "b", "c") and not m.vacant
    m2 = step(m, ["a", "b", "c", "d"], ["d", "a", "b", "c"])
    assert m2.hosts == ("a", "b", "c", "d")
    assert step(m2, ["a", "b", "c", "d"]) is m2  # no change: same object, nothing to write


def test_a_departed_node_leaves_a_vacancy_and_others_keep_their_rank():
    m = step(RankMap(), ["a", "b", "c", "d"])
    m = step(m, ["a", "c", "d"])
    assert m.hosts == ("a", "b", "c", "d") and m.vacant == {1}
    assert m.rank_of("b") is None and m.rank_of("c") == 2 and m.rank_of("d") == 3
    m = step(m, ["a", "c", "d", "e"], ["e"])  # the next newcomer fills the vacancy
    assert m.hosts == ("a", "e", "c", "d") and not m.vacant


def test_a_returning_node_gets_its_old_rank_back_and_names_stay_distinct():
    m = step(RankMap(), ["a", "b", "c", "d", "e"])
    m = step(m, ["a", "d", "e"])  # b and c leave: ranks 1 and 2 vacant
    assert m.vacant == {1, 2}
    m = step(m, ["a", "c", "d", "e"], ["c"])  # c comes back: its own rank 2, not the lowest (1)
    assert m.hosts == ("a", "b", "c", "d", "e") and m.vacant == {1}
    m = step(m, ["a", "d", "e", "x"], ["x"])  # c leaves again, x fills rank 1
    assert m.hosts == ("a", "x", "c", "d", "e") and m.vacant == {2}
    m = step(m, ["a", "d", "e", "x"], [])
    m2 = step(m, ["a", "d", "e", "x", "c"], ["c"])  # back into rank 2
    assert m2.hosts == ("a", "x", "c", "d", "e") and not m2.vacant


def test_vacancy_never_duplicates_a_live_name():
    # the only way a live node could share a vacant slot's name: it joined while its old slot
    # was taken; the vacancy then gets a placeholder so broker.toml hosts stay distinct
    m = plan(RankMap(("a", "b", "b", "d"), frozenset({1})), {"a", "b", "d"}, ["a", "b", "d"])
    assert len(set(m.hosts)) == len(m.hosts) and m.hosts[1] == "vacant-1"


def test_trailing_vacancies_shrink_the_overlay():
    m = step(RankMap(), ["a", "b", "c", "d"])
    m = step(m, ["a", "b"])
    assert m.hosts == ("a", "b") and not m.vacant
    m = step(m, ["a"])
    assert m.size == 1


def test_leader_stays_while_it_lives_and_is_replaced_when_gone():
    m = step(RankMap(), ["a", "b", "c"])
    m = step(m, ["b", "c", "a"], ["c", "b", "a"])
    assert m.rank_of("a") == 0
    m = step(m, ["b", "c"])  # the leader's node is gone: the highest rank takes over rank 0
    assert m.hosts == ("c", "b") and not m.vacant
    assert step(m, []).size == 0


def test_not_ready_members_keep_their_rank_but_do_not_join():
    m = step(RankMap(), ["a", "b"], ["a"])
    assert m.hosts == ("a",)
    m = step(
        RankMap(("a", "b")), ["a", "b"], ["a"]
    )  # b went NotReady: still a member, keeps rank 1
    assert m.hosts == ("a", "b") and not m.vacant


def test_rank_map_round_trip_and_bad_input():
    m = RankMap(("a", "b", "c"), frozenset({1}), 42)
    assert RankMap.from_json(m.to_json()) == m
    with pytest.raises(ValueError, match="ranks.json"):
        RankMap.from_json('{"hosts": ["a"], "vacant": [3]}')
    with pytest.raises(ValueError, match="ranks.json"):
        RankMap.from_json("not json")
    with pytest.raises(ValueError, match="distinct"):
        RankMap.from_json('{"hosts": ["a", "a"]}')


def test_node_selection(kube):
    kube.add_node("w2")
    kube.add_node("w1")
    kube.add_node("cp", control_plane=True)
    kube.add_node(
        "tainted-cp",
        taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
    )
    kube.add_node("cordoned", unschedulable=True)
    kube.add_node("down", ready=False)
    nodes = {n["metadata"]["name"]: n for n in kube.list("nodes")}
    # older nodes join first; creationTimestamp has one-second resolution, so names break ties
    for name in nodes:
        nodes[name]["metadata"]["creationTimestamp"] = "2020-01-01T00:00:01Z"
    # a cordoned node is a member (a cordon drains it in the scheduler; it keeps its broker)
    assert NodeSelection().joinable(nodes) == ["cordoned", "w1", "w2"]
    nodes["w2"]["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    assert (
        is_control_plane(nodes["cp"])
        and is_control_plane(nodes["tainted-cp"])
        and not is_control_plane(nodes["w1"])
    )
    default = NodeSelection()
    assert sorted(default.members(nodes)) == ["cordoned", "down", "w1", "w2"]
    assert default.joinable(nodes) == ["w2", "cordoned", "w1"]  # creation order, then name
    assert NodeSelection(include_control_plane=True).joinable(nodes) == [
        "w2",
        "cordoned",
        "cp",
        "tainted-cp",
        "w1",
    ]
