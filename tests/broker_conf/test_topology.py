"""TBON topology tables, checked against flux-core's kary/binomial/mincrit/custom plugins."""

from __future__ import annotations

import pytest
from fluxnode.broker_conf.topology import Topology, TopologyError

# (spec, size, parents by rank, maxlevel)
TABLE = [
    ("kary:0", 5, [None, 0, 0, 0, 0], 1),
    ("kary:1", 4, [None, 0, 1, 2], 3),
    ("kary:2", 7, [None, 0, 0, 1, 1, 2, 2], 2),
    ("kary:2", 8, [None, 0, 0, 1, 1, 2, 2, 3], 3),
    ("kary:3", 10, [None, 0, 0, 0, 1, 1, 1, 2, 2, 2], 2),
    ("kary:32", 3, [None, 0, 0], 1),
    ("kary:2", 1, [None], 0),
    ("binomial", 1, [None], 0),
    ("binomial", 2, [None, 0], 1),
    ("binomial", 8, [None, 0, 0, 2, 0, 4, 4, 6], 3),
    ("binomial", 6, [None, 0, 0, 2, 0, 4], 2),
    ("binomial", 16, [None, 0, 0, 2, 0, 4, 4, 6, 0, 8, 8, 10, 8, 12, 12, 14], 4),
    ("mincrit:2", 7, [None, 0, 0, 1, 2, 1, 2], 2),
    ("mincrit", 5, [None, 0, 0, 0, 0], 1),
    ("mincrit:0", 3, [None, 0, 0], 1),
    ("custom", 4, [None, 0, 0, 0], 1),
]


@pytest.mark.parametrize(("spec", "size", "parents", "maxlevel"), TABLE)
def test_parents_table(spec, size, parents, maxlevel):
    topo = Topology.from_spec(spec, size)
    assert topo.size == size
    assert [topo.parent(r) for r in range(size)] == parents
    assert topo.maxlevel == maxlevel
    for r in range(size):
        assert topo.children(r) == [c for c in range(size) if parents[c] == r]
        level, p = 0, parents[r]
        while p is not None:
            level, p = level + 1, parents[p]
        assert topo.level(r) == level


def test_kary2_formula():
    topo = Topology.from_spec("kary:2", 100)
    assert all(topo.parent(r) == (r - 1) // 2 for r in range(1, 100))


def test_subtree_and_routes():
    topo = Topology.from_spec("kary:2", 7)
    assert topo.subtree(0) == list(range(7))
    assert topo.subtree(1) == [1, 3, 4]
    assert topo.subtree(6) == [6]
    assert topo.ancestors(4) == [1, 0]
    assert topo.child_route(0, 4) == 1
    assert topo.child_route(1, 4) == 4
    assert topo.child_route(2, 4) is None
    assert topo.json_subtree(1) == {
        "rank": 1,
        "size": 3,
        "children": [
            {"rank": 3, "size": 1, "children": []},
            {"rank": 4, "size": 1, "children": []},
        ],
    }


def test_custom_parents():
    # the flux-config-bootstrap(5) three-level example, scaled down: 1 and 4 under 0
    topo = Topology.from_spec("custom", 7, {1: 0, 2: 1, 3: 1, 4: 0, 5: 4, 6: 4})
    assert topo.children(0) == [1, 4]
    assert topo.subtree(4) == [4, 5, 6]
    assert topo.level(6) == 2 and topo.maxlevel == 2


@pytest.mark.parametrize(
    ("spec", "size", "parents", "fragment"),
    [
        ("custom", 4, {1: 2, 2: 3, 3: 1}, "parent cycle: 1 -> 2 -> 3 -> 1"),
        ("custom", 3, {2: 2}, "cannot be its own parent"),
        ("custom", 3, {2: 7}, "parent 7 is not a rank"),
        ("custom", 3, {0: 1}, "rank 0 may not have a parent"),
        ("custom", 3, {5: 0}, "rank 5 is not a rank"),
        ("kary:2", 3, {1: 0}, "does not take explicit parents"),
        ("kary", 3, None, "needs a fanout"),
        ("kary:x", 3, None, "integer >= 0"),
        ("kary:-1", 3, None, "integer >= 0"),
        ("star", 3, None, "unknown scheme 'star'"),
        ("binomial:3", 3, None, "takes no argument"),
        ("custom", 0, None, "invalid topology size 0"),
        ("", 2, None, "invalid topology ''"),
    ],
)
def test_bad_topologies(spec, size, parents, fragment):
    with pytest.raises(TopologyError) as exc:
        Topology.from_spec(spec, size, parents)
    assert fragment in str(exc.value)


def test_bad_rank_queries():
    topo = Topology.from_spec("kary:2", 3)
    for bad in (-1, 3, "1"):
        with pytest.raises(TopologyError, match="not a rank"):
            topo.parent(bad)
