"""Rules of Fluxion's GRUG reader and match writers that the random conformance cases showed,
each checked on a small graph against what Fluxion's source does (the function is named in the
code under test):

- the GRUG reader numbers node vertices 0, 1, ... in emission order (other vertices keep the
  reader's rank, -1 in resource-query), so R_lite groups by those ranks;
- the JGF writer shows a vertex's `unit` (after `rank`, before `exclusive`); the JGF reader
  does not keep units;
- pretty_simple prints the emission lines last first (each line is pushed to the front).
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
    spec.write_text("""version: 9999
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
""")
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
