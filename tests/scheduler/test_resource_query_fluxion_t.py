"""Cases of flux-sched's own t/ scripts that run resource-query and are not in the
conformance corpus (their commands are here-documents, their graphs made by flux tools):
t3001's match without_allocating[_future] and t3040's jgf_shorthand / rv1_shorthand
writers. Each test does what the sharness test does, with its checks and its expected
files (``t/data/resource/expected/match_format``, in the shared corpus); the graph the
t3040 script makes with ``flux R encode | flux ion-R encode`` is built here as
``fluxion.resourcegraph.V1`` builds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import SHARED
from support.rq_run import rq

DATA = SHARED / "fluxion-corpus" / "data" / "resource"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"corpus data not found at {DATA}")


def _run(tmp_path, graph, lines: list[str], *args: str) -> str:
    out, err, rc = rq(tmp_path, graph, "".join(f"{line}\n" for line in lines) + "quit\n", *args)
    assert (rc, "Traceback" in err) == (0, False), err
    return out


def test_t3001_match_without_allocating_and_in_the_future(tmp_path):
    """t3001 'resource-query can perform match-without-allocating[_future]': matched on a
    fresh graph without using it up, refused on a full one, matched at 3600 in the future;
    no job id is used by either (command.cpp's print_schedule_info, match_allocate)."""
    grug, js = DATA / "grugs" / "tiny.graphml", DATA / "jobspecs" / "basics" / "test001.yaml"
    out = _run(tmp_path, grug, [f"match without_allocating {js}"]
               + [f"match allocate {js}"] * 4
               + [f"match without_allocating {js}", f"match without_allocating_future {js}"],
               "-S", "CA")
    assert out.count("MATCHED") == 2
    assert out.count("ALLOCATED") == 4
    assert out.count("No matching resources found") == 1
    at = [line for line in out.splitlines() if line.startswith("INFO: SCHEDULED AT")]
    assert "3600" in at[5]  # grep "SCHEDULED AT" | sed -ne 6p | grep 3600
    ids = [line for line in out.splitlines() if line.startswith("INFO: JOBID=")]
    assert ids == [f"INFO: JOBID={i}" for i in (1, 1, 2, 3, 4, 5, 5)]


def test_t3001_without_allocating_future_checks_feasibility_at_the_graphs_end(tmp_path):
    """t3001 'MWOAF must check feasibility at graph end, not now': with every node
    allocated now, a constrained request is matched (as reserved) later, not refused."""
    only_node = DATA / "jobspecs" / "match_format" / "t3040_only_node.yaml"
    constrained = DATA / "jobspecs" / "pruning" / "constrained_node.yaml"
    out = _run(tmp_path, DATA / "grugs" / "tiny.graphml",
               [f"match allocate {only_node}"] * 3
               + [f"match allocate_orelse_reserve {constrained}",
                  f"match without_allocating_future {constrained}"], "-S", "CA")
    blocks = out.split("INFO: =============================\n")
    assert "INFO: JOBID=4\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=3600\n" in blocks
    assert "INFO: JOBID=5\nINFO: RESOURCES=MATCHED\nINFO: SCHEDULED AT=3600\n" in blocks


def _ion_r_jgf(path, hosts: int = 10, cores: int = 8, gpus: int = 2) -> None:
    """The JGF of ``flux R encode --hosts=compute[1-HOSTS] --cores=0-(CORES-1)
    --gpu=0-(GPUS-1) | flux ion-R encode`` (its .scheduling key), as
    fluxion.resourcegraph.V1 writes it: the cluster, then per rank its node (named by
    host, no id) and the node's GPUs, then its cores, uniq_ids in that order, edges
    without metadata."""
    nodes, edges = [], []

    def add(md: dict, parent: int | None) -> int:
        uid = len(nodes)
        nodes.append({"id": str(uid), "metadata": md})
        if parent is not None:
            edges.append({"source": str(parent), "target": str(uid)})
        return uid

    cluster = add({"type": "cluster", "paths": {"containment": "/cluster0"}}, None)
    for rank in range(hosts):
        host = f"/cluster0/compute{rank + 1}"
        node = add({"type": "node", "name": f"compute{rank + 1}", "rank": rank,
                    "paths": {"containment": host}}, cluster)
        for kind, n in (("gpu", gpus), ("core", cores)):
            for i in range(n):
                add({"type": kind, "id": i, "rank": rank,
                     "paths": {"containment": f"{host}/{kind}{i}"}}, node)
    path.write_text(json.dumps({"graph": {"directed": False, "nodes": nodes, "edges": edges}}))


def _first_json(text: str) -> dict:
    return json.loads(text.splitlines()[0])


@pytest.mark.parametrize(("fmt", "policy", "exclusive", "expected"), [
    ("jgf_shorthand", "lonodex", False, "t3040_expected_match1.json"),
    ("jgf_shorthand", "low", False, "t3040_expected_match2.json"),
    ("jgf_shorthand", "high", True, "t3040_expected_match1.json"),
    ("rv1_shorthand", "high", True, "t3040_expected_match1.json"),
    ("rv1_shorthand", "hinodex", False, "t3040_expected_match1.json"),
])
def test_t3040_shorthand_writers(tmp_path, fmt, policy, exclusive, expected):
    """t3040: the shorthand JGF leaves out the cores and GPUs of a node taken exclusively
    (a node-exclusive policy, or ``exclusive: true``) and then names its writer; with
    -P low nothing is left out and there is no ``writer``. rv1_shorthand writes R_lite in
    full (cores and GPUs) and the shorthand JGF under ``scheduling``."""
    graph = tmp_path / "JGF.json"
    _ion_r_jgf(graph)
    js = tmp_path / "t3040.yaml"
    text = (DATA / "jobspecs" / "match_format" / "t3040.yaml").read_text()
    if exclusive:  # the script's sed "4i\    exclusive: true"
        lines = text.splitlines(keepends=True)
        text = "".join(lines[:3] + ["    exclusive: true\n"] + lines[3:])
    js.write_text(text)
    out = _run(tmp_path, graph, [f"match allocate {js}"], "-f", "jgf", "-F", fmt, "-P", policy)
    got = _first_json(out)
    if fmt == "rv1_shorthand":
        assert json.dumps(got["execution"]["R_lite"]).count("core") == 1
        assert '"gpu": "0-1"' in json.dumps(got["execution"]["R_lite"])
        got = got["scheduling"]
    want = json.loads((DATA / "expected" / "match_format" / expected).read_text())
    if expected.endswith("match2.json"):
        assert "writer" not in got  # jq -e ".writer == null"
    assert got == want


def test_t3040_a_shorthand_graph_loads_without_the_vertices_it_left_out(tmp_path):
    """t3040 'emitted jgf_shorthand resource graph can be loaded but has no cores': the
    written shorthand JGF is a graph of the cluster and its nodes; the cores and GPUs
    the jobspec wants are not there, a node-only jobspec is matched."""
    shorthand = tmp_path / "match1.json"
    shorthand.write_text((DATA / "expected" / "match_format" / "t3040_expected_match1.json")
                         .read_text())
    js = DATA / "jobspecs" / "match_format" / "t3040.yaml"
    out = _run(tmp_path, shorthand, [f"match allocate {js}"], "-f", "jgf", "-F", "jgf",
               "-P", "low")
    assert "No matching resources found" in out
    only_node = DATA / "jobspecs" / "match_format" / "t3040_only_node.yaml"
    out = _run(tmp_path, shorthand, [f"match allocate {only_node}"], "-f", "jgf", "-F", "jgf",
               "-P", "low")
    assert "No matching resources found" not in out
    assert "cluster" in out and "node" in out


def test_t3041_the_jgf_shorthand_reader(tmp_path):
    """t3041: a JGF loads with ``-f jgf_shorthand`` (R of a whole-graph match is the
    graph's R); a shorthand JGF (nodes without their cores and GPUs) given to ``update
    allocate jgf_shorthand`` allocates each exclusive node with all below it, which
    ``find sched-now=allocated`` then lists: 320 cores and 80 GPUs."""
    graph = tmp_path / "JGF.json"
    _ion_r_jgf(graph, hosts=20, cores=16, gpus=4)
    js = DATA / "jobspecs" / "load_format" / "t3041.yaml"
    out = _run(tmp_path, graph, [f"match allocate {js}"], "-f", "jgf_shorthand",
               "-F", "rv1_nosched", "-P", "high")
    R = _first_json(out)
    del R["execution"]["starttime"], R["execution"]["expiration"]
    assert R == {"version": 1, "execution": {"R_lite": [
        {"rank": "0-19", "children": {"core": "0-15", "gpu": "0-3"}}],
        "nodelist": ["compute[1-20]"]}}
    out = _run(tmp_path, graph, [f"match allocate {js}"], "-f", "jgf_shorthand",
               "-F", "jgf_shorthand", "-P", "lonodex")
    shorthand = tmp_path / "shorthand.json"
    shorthand.write_text(out.splitlines()[0] + "\n")
    assert "core" not in shorthand.read_text() and "gpu" not in shorthand.read_text()
    assert "compute1" in shorthand.read_text()
    out = _run(tmp_path, graph, [f"update allocate jgf_shorthand {shorthand} 0 0 5",
                                 "f sched-now=allocated"], "-f", "jgf_shorthand", "-F", "jgf",
               "-P", "high")
    allocated = json.loads(out.splitlines()[-4])  # tail -n4 | head -n1
    kinds = [n["metadata"]["type"] for n in allocated["graph"]["nodes"]]
    assert (kinds.count("core"), kinds.count("gpu")) == (320, 80)


@pytest.mark.parametrize("host, loads", [
    ("fluke9223372036854775808", False),  # INT64_MAX + 1
    ("fluke9223372036854775807", True),   # INT64_MAX
    ("fluke0009223372036854775807", True),  # leading zeros do not count
])
def test_t3027_a_node_number_past_int64_fails_to_load(tmp_path, host, loads):
    """t3027 'node num > max(int64_t) must fail to load': Fluxion's split_hostname reads
    the number with std::stoll. Observed from Fluxion v0.54.0 (`flux R encode -r 0 -c 0-93
    -H fluke1 | jq '.execution.nodelist |= ["<host>"]'`, then `resource-query -L R -f
    rv1exec -F rv1_nosched`): exit 1 and ": Runtime error: resource_query_t: ERROR:
    unpack_rank: error splitting hostname=fluke9223372036854775808; " for the first,
    exit 0 for the others."""
    R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0-93"}}],
                                     "starttime": 0, "expiration": 0, "nodelist": [host]}}
    path = tmp_path / "R.json"
    path.write_text(json.dumps(R))
    out, err, rc = rq(tmp_path, path, "quit\n", "-f", "rv1exec", "-F", "rv1_nosched")
    assert "Traceback" not in err
    if loads:
        assert rc == 0, err
    else:
        assert rc == 1
        assert f"error splitting hostname={host}" in err


# Observed from Fluxion v0.54.0: `resource-query -L t/data/resource/jgfs/rabbit.json -f jgf
# -F rv1_nosched -d -t OUT -P high` reading "match allocate
# t/data/resource/jobspecs/advanced/rabbit.yaml" and "quit" (OUT's first line)
RABBIT_RV1_NOSCHED = (
    '{"version": 1, "execution": {"R_lite": [{"rank": "18,20", "children": {"core": "1"}}], '
    '"nodelist": ["hetchy[1018,202]"], "properties": {"pall": "18", "parrypeak": "18", '
    '"rabbit": "20"}, "starttime": 0, "expiration": 3600}}')


def test_t6001_rv1_nosched_gathers_storage_nodes_like_nodes(tmp_path):
    """t6001 'rv1_nosched matches storage_nodes like nodes': the rlite writer gathers
    storage_node as it does node, so the core under the rabbit's storage node is its
    rank's, and the storage node is in the nodelist and the properties."""
    out = _run(tmp_path, DATA / "jgfs" / "rabbit.json",
               [f"match allocate {DATA / 'jobspecs' / 'advanced' / 'rabbit.yaml'}"],
               "-f", "jgf", "-F", "rv1_nosched", "-P", "high")
    assert out.splitlines()[0] == RABBIT_RV1_NOSCHED


def test_t3006_jobspec_labels_on_non_slot_resources_are_in_the_jgf(tmp_path):
    """t3006 'Resource labels in jobspec carry through to JGF R': each vertex a labeled
    non-slot request matched carries ``"ephemeral": {"label": ...}`` (dom_dfv's
    ephemeral insert); slot labels and unlabeled vertices have none."""
    cmds = [f"match allocate {DATA / 'jobspecs' / 'advanced' / 'test006.yaml'}"]
    out = _run(tmp_path, DATA / "grugs" / "disaggr.graphml", cmds,
               "-F", "jgf", "-S", "CA", "-P", "low", "-r", "400000")
    jgf = json.loads(next(ln for ln in out.splitlines() if "INFO" not in ln))
    counts: dict[str, int] = {}
    for n in jgf["graph"]["nodes"]:
        label = str(n["metadata"].get("ephemeral", {}).get("label", "null"))
        counts[label] = counts.get(label, 0) + 1
    expected = (DATA / "expected" / "advanced" / "005.counts").read_text().split()
    assert counts == {k: int(c) for c, k in zip(expected[::2], expected[1::2], strict=True)}


def test_jgf_labels_byte_for_byte_as_fluxion(tmp_path):
    """The rabbit match's JGF (a chassis labeled "default") as Fluxion wrote it
    (tests/scheduler/data/fluxion_t/README.md)."""
    out = _run(tmp_path, DATA / "jgfs" / "rabbit.json",
               [f"match allocate {DATA / 'jobspecs' / 'advanced' / 'rabbit.yaml'}"],
               "-f", "jgf", "-F", "jgf", "-P", "high")
    here = Path(__file__).parent / "data" / "fluxion_t" / "rabbit_high.jgf"
    assert out.splitlines()[0] == here.read_text().rstrip("\n")
