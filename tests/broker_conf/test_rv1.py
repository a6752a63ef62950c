"""RFC 20 R version 1 with Fluxion JGF: build, parse, round trip, errors."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from fluxnode.broker_conf import rv1
from fluxnode.broker_conf.rv1 import NodeResources, RError

NODES = [
    NodeResources(rank=0, hostname="kind-control-plane", cores=[0, 1, 2, 3], memory_mib=7936),
    NodeResources(rank=1, hostname="kind-worker", cores=[0, 1, 2, 3], memory_mib=7936),
    NodeResources(
        rank=2,
        hostname="kind-worker2",
        cores=[0, 1, 2, 3, 4, 5, 6, 7],
        gpus=[0, 1],
        sockets=2,
        memory_mib=64000,
    ),
    NodeResources(
        rank=3,
        hostname="kind-worker3",
        cores=[0, 2, 4, 1, 3, 5],
        sockets=2,
        core_sockets=[0, 0, 0, 1, 1, 1],
        memory_mib=1024,
    ),
]


def test_build_R_execution():
    R = rv1.build_R(NODES)
    assert R["version"] == 1
    ex = R["execution"]
    assert ex["R_lite"] == [
        {"rank": "0-1", "children": {"core": "0-3"}},
        {"rank": "2", "children": {"core": "0-7", "gpu": "0-1"}},
        {"rank": "3", "children": {"core": "0-5"}},
    ]
    assert ex["nodelist"] == ["kind-control-plane,kind-worker,kind-worker[2-3]"]
    assert ex["starttime"] == 0.0 and ex["expiration"] == 0.0
    json.dumps(R)  # JSON-serializable


def test_build_R_jgf_shape():
    graph = rv1.build_R(NODES)["scheduling"]["graph"]
    by_path = {v["metadata"]["paths"]["containment"]: v for v in graph["nodes"]}
    assert by_path["/cluster0"]["metadata"]["rank"] == -1
    node = by_path["/cluster0/kind-worker2"]["metadata"]
    assert (node["type"], node["basename"], node["name"], node["id"], node["rank"]) == (
        "node",
        "kind-worker",
        "kind-worker2",
        2,
        2,
    )
    mem = by_path["/cluster0/kind-worker2/memory0"]["metadata"]
    assert (mem["type"], mem["size"], mem["unit"]) == ("memory", 64000, "MiB")
    assert "/cluster0/kind-worker2/socket1/core7" in by_path
    assert "/cluster0/kind-worker2/socket1/gpu1" in by_path
    assert "/cluster0/kind-worker3/socket1/core1" in by_path  # explicit core->socket mapping kept
    core = by_path["/cluster0/kind-worker2/socket0/core0"]
    assert set(core["metadata"]) == {
        "type",
        "basename",
        "name",
        "id",
        "uniq_id",
        "rank",
        "exclusive",
        "unit",
        "size",
        "paths",
    }
    assert core["id"] == str(core["metadata"]["uniq_id"])
    ids = [v["id"] for v in graph["nodes"]]
    assert len(set(ids)) == len(ids)
    parent_of = {e["target"]: e["source"] for e in graph["edges"]}
    assert all(e["metadata"] == {"subsystem": "containment"} for e in graph["edges"])
    assert len(parent_of) == len(ids) - 1  # a tree: every vertex but cluster0 has one parent
    socket = by_path["/cluster0/kind-worker2/socket0"]
    assert parent_of[core["id"]] == socket["id"]


def test_round_trip():
    assert rv1.parse_R(rv1.build_R(NODES)) == NODES
    assert rv1.parse_R(json.loads(json.dumps(rv1.build_R(NODES)))) == NODES


def test_round_trip_through_asdict():
    """The overlay sends NodeResources as dataclasses.asdict over JSON."""
    for n in NODES:
        assert NodeResources(**json.loads(json.dumps(dataclasses.asdict(n)))) == n


def test_parse_without_scheduling_falls_back_to_R_lite():
    R = rv1.build_R(NODES)
    del R["scheduling"]
    nodes = rv1.parse_R(R)
    assert [(n.rank, n.hostname, n.cores, n.gpus, n.sockets, n.memory_mib) for n in nodes] == [
        (n.rank, n.hostname, n.cores, n.gpus, 1, 0) for n in NODES]


def test_non_contiguous_ranks():
    nodes = [NodeResources(rank=r, hostname=f"n{r}", cores=[0]) for r in (0, 2, 5)]
    R = rv1.build_R(nodes)
    assert R["execution"]["R_lite"] == [{"rank": "0,2,5", "children": {"core": "0"}}]
    assert R["execution"]["nodelist"] == ["n[0,2,5]"]
    assert rv1.parse_R(R) == nodes


def test_empty():
    R = rv1.build_R([])
    assert R["execution"]["R_lite"] == [] and rv1.parse_R(R) == []


def test_default_socket_spread():
    n = NodeResources(rank=0, hostname="a", cores=list(range(8)), gpus=[0, 1], sockets=2)
    assert n.socket_cores(0) == [0, 1, 2, 3] and n.socket_cores(1) == [4, 5, 6, 7]
    assert n.socket_gpus(0) == [0] and n.socket_gpus(1) == [1]


def test_fluxion_old_edge_style_is_read():
    R = rv1.build_R(NODES)
    for e in R["scheduling"]["graph"]["edges"]:
        e["metadata"] = {"name": {"containment": "contains"}}
    assert rv1.parse_R(R) == NODES


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"rank": -1}, "rank must be a non-negative integer"),
        ({"hostname": ""}, "hostname must be a non-empty string"),
        ({"hostname": "a b"}, "invalid hostname"),
        ({"cores": [0, 0]}, "has duplicates"),
        ({"cores": [-1]}, "not a non-negative integer"),
        ({"cores": "0-x"}, "invalid idset"),
        ({"sockets": 0}, "sockets must be an integer >= 1"),
        ({"memory_mib": -5}, "memory_mib must be a non-negative integer"),
        ({"memory_mib": 1.5}, "memory_mib must be a non-negative integer"),
        ({"core_sockets": [0]}, "core_sockets has 1 entries for 2 cores"),
        ({"core_sockets": [0, 3]}, "names socket 3 but the node has 1 socket"),
    ],
)
def test_bad_node_resources(kwargs, fragment):
    args = {"rank": 0, "hostname": "a", "cores": [0, 1], **kwargs}
    with pytest.raises(RError) as exc:
        NodeResources(**args)
    assert fragment in str(exc.value)


def test_duplicate_rank():
    with pytest.raises(RError, match="rank 0 appears twice"):
        rv1.build_R([NodeResources(0, "a", [0]), NodeResources(0, "b", [0])])


def mutated(fn):
    R = copy.deepcopy(rv1.build_R(NODES))
    fn(R)
    return R


@pytest.mark.parametrize(
    ("R", "fragment"),
    [
        ([], "R must be a JSON object"),
        ({"version": 2}, "version: must be 1, not 2"),
        ({"version": 1}, "execution: missing"),
        ({"version": 1, "execution": {"R_lite": {}}}, "execution.R_lite: must be list"),
        (
            mutated(lambda R: R["execution"]["R_lite"][1].pop("rank")),
            "execution.R_lite[1].rank: missing",
        ),
        (
            mutated(lambda R: R["execution"]["R_lite"][1].update(rank="2-")),
            "execution.R_lite[1]: invalid idset '2-'",
        ),
        (
            mutated(lambda R: R["execution"]["R_lite"][1]["children"].update(core="x")),
            "execution.R_lite[1]: invalid idset 'x'",
        ),
        (
            mutated(lambda R: R["execution"]["R_lite"][1]["children"].update(nic="0")),
            "unknown resource type 'nic'",
        ),
        (
            mutated(lambda R: R["execution"]["R_lite"][2].update(rank="2")),
            "rank 2 appears in more than one",
        ),
        (mutated(lambda R: R["execution"].update(nodelist=["a"])), "1 hostnames for 4 ranks (0-3)"),
        (
            mutated(lambda R: R["execution"].update(nodelist=["a[1-"])),
            "execution.nodelist: invalid hostlist",
        ),
        (
            mutated(lambda R: R["execution"].update(nodelist="a")),
            "must be a list of hostlist strings",
        ),
        (
            mutated(lambda R: R["execution"]["R_lite"][1]["children"].update(core="0-6")),
            "rank 2 (kind-worker2) has cores 0-7 gpus 0-1 in the graph but cores 0-6",
        ),
        (
            mutated(lambda R: R["scheduling"]["graph"]["edges"][0].update(target="999")),
            "scheduling.graph.edges[0].target: no vertex with id '999'",
        ),
        (
            mutated(
                lambda R: next(
                    v
                    for v in R["scheduling"]["graph"]["nodes"]
                    if v["metadata"]["type"] == "memory"
                )["metadata"].update(unit="furlong")
            ),
            "unknown unit 'furlong'",
        ),
        (mutated(lambda R: R["scheduling"].pop("graph")), "scheduling.graph: missing"),
    ],
)
def test_malformed_R(R, fragment):
    with pytest.raises(RError) as exc:
        rv1.parse_R(R)
    assert fragment in str(exc.value)
