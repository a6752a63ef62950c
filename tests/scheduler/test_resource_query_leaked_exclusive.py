"""A request Fluxion refuses for its duration leaves its exclusive types behind (issue 35,
fresh random cases): ``dfu_traverser_t::run`` (resource/traversers/dfu.cpp) primes the
jobspec, which adds every type asked for exclusively to the matcher's set, then builds
the job's metadata; when that fails (a duration past the graph's end: "traverser:
Invalid argument") it returns before putting the set back, so from then on every vertex
of that type a match takes is taken whole (``dfu_impl_update.cpp``'s emit of shadow
resources), as the ``*nodex`` policies take nodes.

The expected output is Fluxion v0.54's: ``resource-query -L g.json -f rv1exec -F simple
-d -t OUT`` with the commands and files below.
"""

from __future__ import annotations

import json

import yaml
from support.rq_run import jobspec, rq

GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}],
    "nodelist": ["node[0-1]"], "starttime": 0, "expiration": 0}}


CORE = jobspec([{"type": "slot", "count": 1, "label": "default",
               "with": [{"type": "core", "count": 1}]}], 60)
LONG_NODE = jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [
    {"type": "slot", "count": 1, "label": "default",
     "with": [{"type": "core", "count": 1}]}]}], 4000000000)

EXPECTED = """\
      ---------core3[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=2
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ---------core2[1:x]
      ---------core3[1:x]
      ---------gpu0[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=2
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def test_a_node_exclusive_request_refused_for_its_duration_makes_nodes_exclusive(tmp_path):
    """One core, then a node-exclusive request lasting past the graph's end (refused),
    then one core again: that core comes with its whole node, GPU and all."""
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    (tmp_path / "core.yaml").write_text(yaml.safe_dump(CORE))
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(LONG_NODE))
    cmds = "".join(f"match allocate {tmp_path / name}\n"
                   for name in ("core.yaml", "long.yaml", "core.yaml")) + "quit\n"
    out, err, rc = rq(tmp_path, graph, cmds, "-f", "rv1exec", "-F", "simple")
    assert rc == 0
    assert err == "match_allocate: ERROR: traverser: Invalid argument\n"
    assert out == EXPECTED
