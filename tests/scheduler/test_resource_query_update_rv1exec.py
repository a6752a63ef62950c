"""``update ... rv1exec`` writes each node R names exclusive (issue 35, fresh random case
r9131): Fluxion's rv1exec reader marks the edge into every vertex it updates exclusive,
the node's too (``update_edges``), and the update walk writes what the edge says. It
plans the node's own units only when R lists all of it (``update_exclusivity``), so a
later match still shares that node (core1 below, under ``high``).

Expected: Fluxion v0.54's answer, ``resource-query -L g.json -f rv1exec -F simple -P high
-d -t OUT < COMMANDS`` with the files below (2026-11-28).
"""

from __future__ import annotations

import json

import yaml
from support.rq_run import jobspec, rq

GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-1", "gpu": "0"}}],
    "nodelist": ["node[0-3]"], "starttime": 0, "expiration": 0}}
ONE_CORE_OF_NODE0 = {"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0"}}], "nodelist": ["node0"],
    "starttime": 0, "expiration": 0}}
CORE = jobspec([{"type": "slot", "count": 1, "label": "default",
                 "with": [{"type": "core", "count": 1}]}], 60)
EXPECTED = """\
      ---------core0[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core1[1:x]
      ------node0[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=2
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def test_an_rv1exec_update_writes_its_node_exclusive_and_leaves_it_shared(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    r = tmp_path / "u.json"
    r.write_text(json.dumps(ONE_CORE_OF_NODE0))
    core = tmp_path / "core.yaml"
    core.write_text(yaml.safe_dump(CORE, sort_keys=False))
    out, err, rc = rq(tmp_path, graph, f"update allocate rv1exec {r} 1 0 10\n"
                      f"match allocate {core}\nquit\n", "-f", "rv1exec", "-P", "high")
    assert (rc, err) == (0, "")
    assert out == EXPECTED


# `resource-query -L g.json -f rv1exec -F simple -d -t OUT` (Fluxion v0.54), on
# `update reserve rv1exec u.json 1 3600 3600`, then two finds
EXPECTED_RESERVED_UPDATE = """\
      ---------core0[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=RESERVED
INFO: SCHEDULED AT=3600
INFO: =============================
INFO: =============================
INFO: EXPRESSION="sched-future=reserved"
INFO: =============================
      ---------core0[1:x]
      ------node0[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=1"
INFO: =============================
"""


def test_a_reserved_update_keeps_its_spans_as_allocations(tmp_path):
    # the readers' update_data.reserved stays false (r9105): the job reads RESERVED,
    # but its vertices hold it as an allocation, so no vertex is sched-future=reserved
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    r = tmp_path / "u.json"
    r.write_text(json.dumps(ONE_CORE_OF_NODE0))
    out, err, rc = rq(tmp_path, graph, f"update reserve rv1exec {r} 1 3600 3600\n"
                      "find sched-future=reserved\nfind jobid-alloc=1\nquit\n", "-f", "rv1exec")
    assert (rc, err) == (0, "")
    assert out == EXPECTED_RESERVED_UPDATE


WHOLE_NODE0 = {"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0-1", "gpu": "0"}}], "nodelist": ["node0"],
    "starttime": 0, "expiration": 0}}
# Fluxion v0.54's stderr for the commands below (`resource-query -L g.json -f rv1exec
# -F simple -d -t OUT`): the reader's update_vertex refuses a vertex not free during the
# job's window, the node (R naming all of it planned it whole) before its children
EXPECTED_BUSY_STDERR = """\
ERROR: traverser run () returned error \n\
ERROR: update_vertex: core0 is unavailable.
unpack_child: failed unpacking child for core0.
ERROR: traverser run () returned error \n\
ERROR: update_vertex: node0 is unavailable.
unpack_rank: failed unpacking rank for node0.
"""


def test_an_rv1exec_update_of_a_busy_vertex_fails_in_the_readers_words(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    (tmp_path / "u.json").write_text(json.dumps(ONE_CORE_OF_NODE0))
    (tmp_path / "w.json").write_text(json.dumps(WHOLE_NODE0))
    u, w = tmp_path / "u.json", tmp_path / "w.json"
    _out, err, rc = rq(tmp_path, graph, f"update allocate rv1exec {u} 1 0 10\n"
                       f"update allocate rv1exec {u} 2 5 10\n"
                       f"update allocate rv1exec {w} 3 20 10\n"
                       f"update allocate rv1exec {u} 4 25 10\nquit\n", "-f", "rv1exec")
    assert rc == 0
    assert err == EXPECTED_BUSY_STDERR
