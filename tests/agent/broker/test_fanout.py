"""Targets and their split by child, shared by rexec and archive.extract (agent/broker/fanout.py).
The expected subtrees are written out by hand for kary:2 on 7 ranks (0 -> 1,2; 1 -> 3,4;
2 -> 5,6) and for flat (0 -> 1..6)."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import pytest
from fluxnode.agent.broker.fanout import SubtreeSplit, target_ranks
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf.topology import Topology


def test_all_and_idsets_and_exclude():
    assert target_ranks("all", 4, "t") == {0, 1, 2, 3}
    assert target_ranks("1,3-5", 8, "t") == {1, 3, 4, 5}
    assert target_ranks("all", 4, "t", exclude="0,2") == {1, 3}


@pytest.mark.parametrize(
    ("ranks", "exclude", "errnum", "message"),
    [
        ("9", None, errno.EHOSTUNREACH, "t: --rank: no such rank 9 (instance size 7)"),
        ("5-9", None, errno.EHOSTUNREACH, "t: --rank: no such rank 7-9 (instance size 7)"),
        ("x", None, errno.EINVAL, "t: --rank 'x': "),
        (3, None, errno.EINVAL, "t: --rank must be an idset or 'all'"),
        ("all", "0-6", errno.EINVAL, "t: no targets (every rank is excluded)"),
        ("all", 5, errno.EINVAL, "t: --exclude must be an idset"),
        ("0-4294967295", None, errno.EINVAL, "t: --rank '0-4294967295': "),
    ],
)
def test_bad_targets_are_named(ranks, exclude, errnum, message):
    with pytest.raises(ServiceError) as exc:
        target_ranks(ranks, 7, "t", exclude=exclude)
    assert exc.value.errnum == errnum
    assert exc.value.errstr.startswith(message), exc.value.errstr


def test_split_by_child_names_only_the_targets_below_each_child():
    state = SimpleNamespace(rank=0, topology=Topology.from_spec("kary:2", 7))
    split = SubtreeSplit(state)
    assert split.subtree(1) == {1, 3, 4} and split.subtree(2) == {2, 5, 6}
    assert split.by_child({0, 3, 6}) == [(1, {3}), (2, {6})]
    assert split.by_child({0}) == []
    state.rank = 2
    assert split.by_child({0, 1, 5, 6}) == [(5, {5}), (6, {6})]


def test_a_new_topology_is_split_afresh():
    state = SimpleNamespace(rank=0, topology=Topology.from_spec("kary:2", 7))
    split = SubtreeSplit(state)
    assert split.subtree(1) == {1, 3, 4}
    state.topology = Topology.from_spec("kary:0", 7)  # config.reload: flat
    assert split.subtree(1) == {1}
    assert split.by_child({3, 4}) == [(3, {3}), (4, {4})]
