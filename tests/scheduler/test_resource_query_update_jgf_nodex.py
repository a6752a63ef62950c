"""``update ... jgf`` under a node-exclusive policy (issue 35, --flex batch r15282).

Fluxion's JGF reader plans the vertices the document marks exclusive itself
(``resource_reader_jgf_t::update_vtx_plan``: a span of the vertex's size, the job in its
``allocations``), and the update walk that follows runs with ``full`` false, so
``upd_plan`` plans nothing more. Under ``lonodex`` that walk takes the node whole and
writes all of it, yet what the document did not mark exclusive (the node, its other
core) stays free now: ``find sched-now=free`` lists it. The node's x_checker still
holds the job (``by_excl``), so a later core is not found there.

Expected output: Fluxion v0.54.0's resource-query, run on 2026-11-29 as the test runs
fluxnode (``-L g.json -f rv1exec -P lonodex -F simple -d -t OUT``), stderr empty.
"""

from __future__ import annotations

import json

from support.rq_run import framed_find, framed_match, jobspec, no_match, rq

GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0-1"}}], "nodelist": ["node0"],
    "starttime": 0, "expiration": 0}}


def _vertex(uid: int, type_: str, name: str, path: str, exclusive: bool, rank: int) -> dict:
    return {"id": str(uid), "metadata": {
        "type": type_, "basename": type_, "name": name, "id": 0, "uniq_id": uid,
        "rank": rank, "exclusive": exclusive, "unit": "", "size": 1,
        "paths": {"containment": path}}}


# a match's JGF as a policy that does not take nodes whole writes it: core0 exclusive
UPDATE = {"graph": {
    "nodes": [_vertex(0, "cluster", "cluster0", "/cluster0", False, -1),
              _vertex(1, "node", "node0", "/cluster0/node0", False, 0),
              _vertex(2, "core", "core0", "/cluster0/node0/core0", True, 0)],
    "edges": [{"source": "0", "target": "1", "metadata": {"subsystem": "containment"}},
              {"source": "1", "target": "2", "metadata": {"subsystem": "containment"}}]}}

EXPECTED = framed_match("""\
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
""", 1) + framed_find("""\
      ---------core1[1:x]
      ------node0[1:x]
      ---cluster0[1:x]
""", "sched-now=free") + no_match(2) + framed_find("""\
      ---------core0[1:x]
      ------node0[1:x]
      ---cluster0[1:x]
""", "sched-now=allocated")


def test_what_the_jgf_leaves_shared_stays_free_under_lonodex(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    update = tmp_path / "up.json"
    update.write_text(json.dumps(UPDATE))
    core = tmp_path / "core.json"
    core.write_text(json.dumps(jobspec(
        [{"type": "slot", "count": 1, "label": "default",
          "with": [{"type": "core", "count": 1}]}], 60)))
    out, err, rc = rq(tmp_path, graph,
                      f"update allocate jgf {update} 1 0 60\nfind sched-now=free\n"
                      f"match allocate {core}\nfind sched-now=allocated\nquit\n",
                      "-f", "rv1exec", "-P", "lonodex", "-F", "simple")
    assert (out, err, rc) == (EXPECTED, "", 0)
