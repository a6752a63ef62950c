"""Rules of Fluxion's GRUG reader and match writers that the random conformance cases showed,
each checked on a small graph against what Fluxion's source does (the function is named in the
code under test):

- the GRUG reader numbers node vertices 0, 1, ... in emission order (other vertices keep the
  reader's rank, -1 in resource-query), so R_lite groups by those ranks;
- the JGF writer shows a vertex's `unit` (after `rank`, before `exclusive`); the JGF reader
  does not keep units;
- pretty_simple prints the emission lines last first (each line is pushed to the front);
- resource-query keeps one writer for the session: what a writer cannot write (rv1 without
  R_lite, JGF vertices without edges, rlite with no node gathered) stays in it and leads the
  next answer, and a failing emit fails the match (no jobid used) or the find;
- R_lite entries come in the byte order of their children text (a std::map key).
"""

from __future__ import annotations

import json
from pathlib import Path

from fluxnode.scheduler.readers.grug import read_grug
from support.paths import REPO
from support.rq_run import rq

TINY = REPO / "example" / "tiny.graphml"
NODE_SLOT = """version: 9999
resources:
  - type: node
    count: 1
    with:
      - type: socket
        count: 1
        with:
          - type: slot
            count: 1
            label: default
            with:
              - type: core
                count: 2
              - type: memory
                count: 1
attributes:
  system:
    duration: 3600
tasks:
  - command: ["app"]
    slot: default
    count:
      per_slot: 1
"""


def test_grug_node_vertices_are_ranked_in_emission_order():
    g = read_grug(TINY)
    nodes = [v for v in g.vertices if v.type == "node"]
    assert [v.rank for v in nodes] == list(range(len(nodes))) == [0, 1]
    assert {v.rank for v in g.vertices if v.type != "node"} == {-1}
    assert [v.rank for v in read_grug(TINY, rank=7).vertices if v.type == "node"] == [0, 1]


def test_rv1_groups_by_node_rank_and_jgf_shows_units(tmp_path: Path):
    spec = tmp_path / "node.yaml"
    spec.write_text(NODE_SLOT)
    out, err, rc = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", "rv1")
    assert rc == 0, err
    r = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (node,) = r["execution"]["nodelist"]  # node0 has rank 0, node1 rank 1 (not -1)
    assert r["execution"]["R_lite"][0]["rank"] == node.removeprefix("node") != "-1"
    memory = [n["metadata"] for n in r["scheduling"]["graph"]["nodes"]
              if n["metadata"]["type"] == "memory"]
    assert memory and all(m["unit"] == "GB" for m in memory)
    assert list(memory[0]).index("unit") == list(memory[0]).index("rank") + 1


def test_pretty_simple_is_the_emission_order_reversed(tmp_path: Path):
    spec = tmp_path / "node.yaml"
    spec.write_text(NODE_SLOT)
    simple, _, _ = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", "simple")
    pretty, _, _ = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", "pretty_simple")

    def lines(text: str) -> list[str]:
        return [ln.strip() for ln in text.splitlines() if ln.startswith("      ")]

    emitted = [ln.replace(":x]", ":exclusive]").replace(":s]", ":shared]")
               for ln in lines(simple)]
    assert lines(pretty) == list(reversed(emitted))
    assert len({ln.split("[")[0].strip("-") for ln in lines(pretty)}) > 3


def test_a_jobspec_that_fails_to_parse_consumes_no_jobid(tmp_path: Path):
    """reapi_cli_t::match_allocate returns before incr_job_counter on a jobspec error, and
    run_match leaves `sat` true: the next match gets the same jobid, and `match
    satisfiability` of the bad jobspec says "Satisfiable"."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(NODE_SLOT.split("attributes:")[0] + "tasks: []\n")
    good = tmp_path / "good.yaml"
    good.write_text(NODE_SLOT)
    out, err, rc = rq(tmp_path, TINY, f"match allocate {bad}\nmatch allocate {good}\n"
                      f"match satisfiability {bad}\nquit\n")
    assert rc == 0 and "Jobspec error for 1" in err, err
    assert out.count("INFO: JOBID=1\n") == 2 and "JOBID=2" not in out, out
    assert "INFO: Satisfiable request" in out


def test_rv1_of_a_whole_node_only_allocation_is_empty(tmp_path: Path):
    """rv1_match_writers_t::emit_json writes nothing when R_lite is empty: a slot of one node
    with nothing below it selected (the node's cores pruned away from the request)."""
    spec = tmp_path / "node-only.yaml"
    spec.write_text(NODE_ONLY)
    for fmt in ("rv1", "rv1_nosched"):
        out, err, rc = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", fmt)
        assert rc == 0 and "INFO: RESOURCES=ALLOCATED" in out, err
        assert not [ln for ln in out.splitlines() if ln.startswith("{")], out
    out, _, _ = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", "jgf")
    assert '"type": "node"' in out  # the node itself was selected


def _post_order(vertices_and_levels):
    from fluxnode.scheduler.traversers.dfu_impl import Emit
    return [Emit(v, 1, True, lvl) for v, lvl in vertices_and_levels]


def test_rlite_nodelist_names_only_nodes_with_cores_or_gpus_emitted():
    """rlite_match_writers_t::emit_gatherer gathers a node only when its reducer (cores,
    GPUs emitted before it) is set: a node selected whole, with nothing below it, is in
    neither R_lite nor the nodelist."""
    from fluxnode.scheduler import writers
    g = read_grug(TINY)
    node0, node1 = sorted((v for v in g.vertices if v.type == "node"), key=lambda v: v.rank)
    core = next(v for v in g.walk(node1) if v.type == "core")
    socket = core.parent
    sel = _post_order([(node0, 1), (core, 3), (socket, 2), (node1, 1), (g.root, 0)])
    R = writers.rv1_nosched(sel)
    assert R["execution"]["nodelist"] == [node1.name]
    assert [x["rank"] for x in R["execution"]["R_lite"]] == [str(node1.rank)]


def test_rlite_writer_prints_the_bare_array(tmp_path: Path):
    """rlite_match_writers_t::emit dumps the R_lite array, not an object holding it."""
    spec = tmp_path / "node.yaml"
    spec.write_text(NODE_SLOT)
    out, err, rc = rq(tmp_path, TINY, f"match allocate {spec}\nquit\n", "-F", "rlite")
    assert rc == 0, err
    first = out.splitlines()[0]
    assert isinstance(json.loads(first), list) and json.loads(first)[0]["children"]["core"]


# -- resource-query's one writer object: what it cannot write stays for the next answer --

NODE_ONLY = """version: 9999
resources:
  - type: slot
    count: 1
    label: default
    with:
      - type: node
        count: 1
attributes:
  system:
    duration: 60
tasks:
  - command: ["app"]
    slot: default
    count:
      per_slot: 1
"""
TOO_BIG = NODE_SLOT.replace("type: node\n    count: 1", "type: node\n    count: 5")


def _json_lines(text: str) -> list:
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith(("{", "["))]


def test_rv1_keeps_the_jgf_of_an_answer_without_r_lite_for_the_next_answer(tmp_path: Path):
    """rv1_match_writers_t::emit / emit_json return 0 without writing when R_lite or the JGF
    is empty, and clear neither: a whole-node match (no core, so nothing gathered) writes
    nothing, and its vertices and edges lead the scheduling graph of the next answer. The
    same commands under -F jgf show what each traversal emitted on its own."""
    node_only, slot = tmp_path / "node-only.yaml", tmp_path / "slot.yaml"
    node_only.write_text(NODE_ONLY)
    slot.write_text(NODE_SLOT)
    cmds = f"match allocate {node_only}\nmatch allocate {slot}\nquit\n"
    jgf_out, err, rc = rq(tmp_path, TINY, cmds, "-F", "jgf")
    assert rc == 0, err
    first, second = (j["graph"] for j in _json_lines(jgf_out))
    rv1_out, err, rc = rq(tmp_path, TINY, cmds, "-F", "rv1")
    assert rc == 0, err
    (R,) = _json_lines(rv1_out)  # the whole-node match wrote nothing
    assert rv1_out.index("JOBID=1") < rv1_out.index("{") < rv1_out.index("JOBID=2")
    assert R["scheduling"]["graph"] == {"nodes": first["nodes"] + second["nodes"],
                                        "edges": first["edges"] + second["edges"]}
    # R_lite is the second match's own: the first one's node had no core gathered
    from fluxnode.broker_conf import idset
    cores = [n["metadata"]["id"] for n in second["nodes"] if n["metadata"]["type"] == "core"]
    (node,) = [n["metadata"] for n in second["nodes"] if n["metadata"]["type"] == "node"]
    assert R["execution"]["R_lite"] == [
        {"rank": str(node["rank"]), "children": {"core": idset.encode(sorted(cores))}}]
    assert R["execution"]["nodelist"] == [f"node{node['id']}"]
    # and once written the writer is empty: a third answer carries nothing stale
    out3, _, _ = rq(tmp_path, TINY, cmds.replace("quit", f"match allocate {slot}\nquit"),
                    "-F", "rv1")
    third = _json_lines(out3)[1]["scheduling"]["graph"]["nodes"]
    assert [n["metadata"]["paths"] for n in third][-1] == {"containment": "/tiny0"}
    assert sum(n["id"] == "0" for n in third) == 1


def test_rv1_find_without_r_lite_writes_nothing_and_keeps_its_vertices(tmp_path: Path):
    """dom_find_dfv emits the root (and edges to it) for a find naming only the root; the
    rv1 writer has no R_lite so emit_json writes nothing (the expression lines are still
    written) and the root vertex heads the next match's scheduling graph."""
    slot = tmp_path / "slot.yaml"
    slot.write_text(NODE_SLOT)
    out, err, rc = rq(tmp_path, TINY, f"find names=tiny0\nmatch allocate {slot}\nquit\n",
                      "-F", "rv1")
    assert rc == 0 and not err, err
    assert out.startswith('INFO: =============================\nINFO: EXPRESSION="names=tiny0"')
    (R,) = _json_lines(out)
    nodes = R["scheduling"]["graph"]["nodes"]
    # the find's root (emitted exclusive, with no edge: the root has no parent) comes first,
    # the match's own emission after it ends with the root again (not exclusive)
    assert nodes[0]["id"] == "0" and nodes[0]["metadata"]["exclusive"] is True
    assert nodes[-1]["id"] == "0" and "exclusive" not in nodes[-1]["metadata"]
    assert sum(n["id"] == "0" for n in nodes) == 2


def test_jgf_vertices_without_edges_fail_with_enoent_and_stay(tmp_path: Path):
    """jgf_match_writers_t::check_array_sizes: vertices but no edges is ENOENT and the arrays
    are kept. The find naming only the root fails (cmd_find writes no expression lines);
    every match after it emits into the same writer: a failed match (EBUSY) and a
    satisfiability check add nothing, so their emit fails too, which match_allocate reports
    before incr_job_counter (the jobid is not used) and run_match reads ENOENT as
    unsatisfiable; a match that places its job adds edges, and the stale root comes first."""
    slot, big = tmp_path / "slot.yaml", tmp_path / "big.yaml"
    slot.write_text(NODE_SLOT)
    big.write_text(TOO_BIG)
    out, err, rc = rq(tmp_path, TINY, f"find names=tiny0\nmatch allocate {big}\n"
                      f"match satisfiability {slot}\nmatch allocate {slot}\nquit\n", "-F", "jgf")
    assert rc == 0
    assert "EXPRESSION" not in out
    assert err.splitlines() == [
        "find: ERROR: find writer emit: No such file or directory",
        "match_allocate: ERROR: match writer emit: No such file or directory",
        "match_allocate: ERROR: match writer emit: No such file or directory",
    ]
    assert "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=1\n" \
        in out
    assert "INFO: Unsatisfiable request\nINFO: =============================\n" in out
    (J,) = _json_lines(out)
    assert out.index("{") < out.index("INFO: RESOURCES=ALLOCATED")
    assert out.count("JOBID=1\n") == 2 and "JOBID=2" not in out
    nodes = J["graph"]["nodes"]
    assert nodes[0]["id"] == "0" and nodes[0]["metadata"]["exclusive"] is True
    assert sum(n["id"] == "0" for n in nodes) == 2


def test_rlite_with_no_node_gathered_fails_with_einval(tmp_path: Path):
    """rlite_match_writers_t::emit_json fails with EINVAL when no node was gathered (none
    emitted after cores or GPUs of it). So under -F rlite a match that places nothing, or
    places a node without cores, reports "match writer emit: Invalid argument" and uses no
    jobid, and run_match does not read EINVAL as unsatisfiable; a find with nothing gathered
    fails the same way and writes no expression lines."""
    big = tmp_path / "big.yaml"
    big.write_text(TOO_BIG)
    out, err, rc = rq(tmp_path, TINY, f"match allocate {big}\nfind names=tiny0\nquit\n",
                      "-F", "rlite")
    assert rc == 0
    assert err.splitlines() == ["match_allocate: ERROR: match writer emit: Invalid argument",
                                "find: ERROR: find writer emit: Invalid argument"]
    assert "Unsatisfiable" not in out and "EXPRESSION" not in out
    assert "INFO: JOBID=1\n" in out
    # a satisfiability check gathers nothing either: its ENODEV gives way to the writer's
    # EINVAL, which run_match does not read as unsatisfiable
    out, err, rc = rq(tmp_path, TINY, f"match satisfiability {big}\nquit\n", "-F", "rlite")
    assert "INFO: Satisfiable request" in out
    assert err == "match_allocate: ERROR: match writer emit: Invalid argument\n"
    out, _, _ = rq(tmp_path, TINY, f"match satisfiability {big}\nquit\n", "-F", "simple")
    assert "INFO: Unsatisfiable request" in out


def test_r_lite_entries_come_in_the_byte_order_of_their_children():
    """rlite_match_writers_t::fill walks m_gl_gatherer, a std::map from each gathered node's
    children text (json_dumps of the compressed ids) to its ranks: entries are ordered by
    that text, so rank 1 with cores 0-3 comes before rank 0 with cores 2-3."""
    from fluxnode.scheduler import writers
    g = read_grug(TINY)
    node0, node1 = sorted((v for v in g.vertices if v.type == "node"), key=lambda v: v.rank)

    def cores(node, ids):
        return [(c, 3) for c in g.walk(node) if c.type == "core" and c.id in ids]

    sel = _post_order(cores(node0, {2, 3}) + [(node0, 1)]
                      + cores(node1, {0, 1, 2, 3}) + [(node1, 1), (g.root, 0)])
    assert writers.rlite(sel) == [
        {"rank": str(node1.rank), "children": {"core": "0-3"}},
        {"rank": str(node0.rank), "children": {"core": "2-3"}},
    ]
    # same children, one entry whatever the ranks; "0,2" sorts before "0-1"
    assert [x["children"]["core"] for x in writers.rlite(_post_order(
        cores(node0, {0, 2}) + [(node0, 1)] + cores(node1, {0, 1}) + [(node1, 1)]))] \
        == ["0,2", "0-1"]
