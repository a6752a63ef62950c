"""``remove RANKS false`` reads RANKS as flux-core's idset_decode does (issue 35, fresh
random case r9010): a range must end above its start (``parse_range``: ``1-1`` and
``2-1`` are refused) and each element must lie above the ones before it
(``append_element``: ``3,1`` is refused), where RFC 22 alone would read all three.
``[0-0]`` is refused for the first reason. Each refusal is "failed to decode ranks."
and removes nothing.

Expected: Fluxion v0.54's answer, ``resource-query -L g.json -f rv1exec -d -t OUT <
COMMANDS`` with the files below (2026-11-28).
"""

from __future__ import annotations

import json

from support.rq_run import rq

GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-1"}}],
    "nodelist": ["node[0-3]"], "starttime": 0, "expiration": 0}}
COMMANDS = """\
remove 1-1 false
remove 2-1 false
remove 3,1 false
remove [0-0] false
remove 1-2 false
find status=up
quit
"""
EXPECTED = """\
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
      ---------core0[1:x]
      ---------core1[1:x]
      ------node3[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="status=up"
INFO: =============================
"""
EXPECTED_STDERR = "ERROR: failed to decode ranks.\n" * 4


def test_remove_reads_ranks_as_flux_idset_decode(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    out, err, rc = rq(tmp_path, graph, COMMANDS, "-f", "rv1exec")
    assert rc == 0, err
    assert err == EXPECTED_STDERR
    assert out == EXPECTED
