"""Regressions found by issue 11's hardening and property tests (topology, FSD)."""

from __future__ import annotations

import pytest
from fluxnode.broker_conf import fsd, topology


def test_json_subtree_of_a_long_chain_does_not_recurse():
    # kary:1 over 3000 ranks raised RecursionError (overlay.topology on such an instance)
    t = topology.Topology.from_spec("kary:1", 3000)
    tree = t.json_subtree(0)
    assert tree["size"] == 3000
    depth, node = 0, tree
    while node["children"]:
        (node,) = node["children"]
        depth += 1
    assert depth == 2999 and node == {"rank": 2999, "size": 1, "children": []}


def test_json_subtree_shape_is_unchanged():
    t = topology.Topology.from_spec("kary:2", 5)
    assert t.json_subtree(1) == {"rank": 1, "size": 3, "children": [
        {"rank": 3, "size": 1, "children": []}, {"rank": 4, "size": 1, "children": []}]}


def test_huge_fanout_is_a_topology_error():
    with pytest.raises(topology.TopologyError, match="too large"):
        topology.validate_spec("kary:" + "1" * 5000)


@pytest.mark.parametrize("parents", [{1: ""}, {1: None}, {1: True}, {"1": 0}, {1: 0.5}])
def test_custom_parents_of_the_wrong_type_are_topology_errors(parents):
    with pytest.raises(topology.TopologyError):
        topology.Topology.from_spec("custom", 2, parents)


def test_fsd_format_of_the_largest_float():
    x = 1.7976931348623157e308  # in ms it overflowed to inf: OverflowError
    assert fsd.parse(fsd.format(x)) == x


@pytest.mark.parametrize("text", ["1e309", "1.8e308d", "1e400ms"])
def test_fsd_parse_refuses_overflow(text):
    with pytest.raises(fsd.FSDError, match="too large"):
        fsd.parse(text)


def test_fsd_parse_of_a_huge_integer():
    with pytest.raises(fsd.FSDError, match="too large"):
        fsd.parse(10**400)
