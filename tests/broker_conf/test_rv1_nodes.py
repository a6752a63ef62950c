"""`NodesR`: the leader's R kept as its nodes, its JGF written only when read (issue 32).

The oracle for the bytes is a recording: `data/rv1_six_nodes.json` is
``json.dumps(build_R(nodes), separators=(",", ":"))`` (the broker's wire encoding) as
main at 8d2563a wrote it, when the leader held that dict, JGF and all, for these nodes.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from fluxnode.broker_conf.rv1 import NodeResources, NodesR, RError, build_R, parse_R
from support.unlike_nodes import UNLIKE_NODES

RECORDED = Path(__file__).parent / "data" / "rv1_six_nodes.json"

NODES = UNLIKE_NODES


def wire(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_the_JGF_written_when_read_is_the_one_R_held_before():
    recorded = RECORDED.read_text()
    R = NodesR(reversed(NODES))  # registered in any order: R is in rank order
    assert wire(R.to_dict()) == recorded
    assert wire(dict(R)) == recorded  # read key by key, as a Mapping
    assert wire(R["scheduling"]) == wire(json.loads(recorded)["scheduling"])
    assert list(R) == list(json.loads(recorded))
    assert len(R) == 3
    with pytest.raises(KeyError):
        R["nodes"]


def test_the_scheduler_reads_the_same_nodes_from_it_as_from_the_recorded_R():
    recorded = json.loads(RECORDED.read_text())
    R = NodesR(NODES)
    assert parse_R(R) == parse_R(recorded)
    assert parse_R(R) == NODES  # (sorted cores, sockets placed: NodeResources normalizes)
    assert R["execution"] == recorded["execution"]


def test_equal_to_an_R_with_the_same_nodes_and_only_to_it():
    recorded = json.loads(RECORDED.read_text())
    assert NodesR(NODES) == NodesR(list(reversed(NODES)))
    assert NodesR(NODES) == recorded and recorded == NodesR(NODES)
    assert NodesR(NODES) != NodesR(NODES[:-1])
    fewer_cores = [*NODES[:-1], NodeResources(rank=7, hostname="node7", cores=[0], sockets=4,
                                              memory_mib=100)]
    assert NodesR(NODES) != NodesR(fewer_cores)
    other_memory = json.loads(RECORDED.read_text())
    other_memory["scheduling"]["graph"]["nodes"][2]["metadata"]["size"] = 7935
    assert NodesR(NODES) != other_memory
    with pytest.raises(TypeError):
        hash(NodesR(NODES))


def test_a_rank_twice_is_refused_as_build_R_refuses_it():
    twice = [*NODES, NodeResources(rank=2, hostname="again", cores=[0])]
    with pytest.raises(RError, match=r"rank 2 appears twice \('node2' and 'again'\)"):
        build_R(twice)
    with pytest.raises(RError, match=r"rank 2 appears twice \('node2' and 'again'\)"):
        NodesR(twice)


def reachable_containers(root: object) -> int:
    """Dicts, lists and tuples reachable from `root` through them and R's own objects
    (not through classes and modules)."""
    seen: set[int] = set()
    stack = [root]
    containers = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or not isinstance(obj, (dict, list, tuple, NodeResources, NodesR)):
            continue
        seen.add(id(obj))
        containers += type(obj) in (dict, list, tuple)
        stack.extend(gc.get_referents(obj))
    return containers


def test_it_holds_no_dict_per_JGF_vertex():
    """100 nodes of 64 cores and 4 GPUs: their JGF has 7,201 vertices of 3 dicts each and
    7,200 edges of 2; what R keeps is the nodes (their lists) and its execution part (a
    few dicts and lists), however often it is read."""
    nodes = [NodeResources(rank=r, hostname=f"node{r}", cores=list(range(64)), gpus=[0, 1, 2, 3],
                           sockets=2, memory_mib=262144) for r in range(100)]
    R = NodesR(nodes)
    assert len(R["scheduling"]["graph"]["nodes"]) == 100 * 72 + 1
    R.to_dict()
    assert reachable_containers(nodes) == 1 + 100 * 4  # the list, each node's 4 lists
    # R's tuple of the nodes for their list; execution, R_lite, its one entry and that
    # entry's children, nodelist
    assert reachable_containers(R) - reachable_containers(nodes) == 5
