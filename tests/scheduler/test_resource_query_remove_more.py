"""``remove`` answered as Fluxion v0.54 answers it where a removal fails part way (issue 35,
random case r13091 and what it led to), each expected output pasted from Fluxion's own
binary: ``resource-query -L GRAPH -d -t OUT [-P low] < COMMANDS`` with the graphs and
jobspecs these tests write (2026-11-29). Three causes, from flux-sched's
``dfu_impl_update.cpp`` and ``command.cpp``:

- ``remove RANKS false`` after ``remove PATH true`` took a rank's vertices: the path
  removal leaves the rank's (empty) entry in the by_rank index, so the rank-based
  ``remove_subgraph`` finds no root for it and fails ("can't remove subgraph", the
  traverser's message empty) before it removes anything; node1 stays.
- a job whose reservation holds an ancestor of the removed rank (an exclusive rack):
  ``mod_plan`` refuses to partially cancel a reservation, after erasing its entry (the
  span stays in the rack's planner for good), and the remove stops there.
- what was done before it stopped follows the order of Fluxion's hash maps
  (``hash_order``): ancestors by vertex id, and each ancestor's jobs as its
  unordered_map gives them back, so job 2 (not job 3) is the one whose rack reservation
  is left behind; and a later ``cancel`` walks down through tagged vertices only
  (``mod_dfv``), so what a job holds under the cleared node0 stays held.

And one a partial cancel brings out (random case r14561): Fluxion's reservation loop takes
its candidate times from the first planner of the root's filter only, and that is the
type ``get_my_pruning_types`` lists first (at a cluster, the leaf types no filter names:
``gpu`` here), whose 0-unit span the partial cancel removed; so no time is left to try.
"""

from __future__ import annotations

import json

from support.rq_run import framed_find, framed_match, no_match, rq
from support.sched_graphs import grug_recipe, jobspec

# cluster0 -> node[0-2] (ranks 0-2) -> socket0 -> core[0-2]
NODES = grug_recipe("c", ("cluster", "node", 3), ("node", "socket", 1), ("socket", "core", 3, 1))
# cluster0 -> rack0 -> node[0-1] (ranks 0-1) -> 2 sockets -> 4 cores each
RACK = grug_recipe("cluster", ("cluster", "rack", 1), ("rack", "node", 2),
                   ("node", "socket", 2, 1), ("socket", "core", 4, 1))


def _slot(with_: list) -> dict:
    return {"type": "slot", "count": 1, "label": "default", "with": with_}


JOBSPECS = {
    "core.json": jobspec([_slot([{"type": "core", "count": 1}])], 100),
    "core150.json": jobspec([_slot([{"type": "core", "count": 1}])], 150),
    "rackx.json": jobspec([{"type": "rack", "count": 1, "exclusive": True,
                            "with": [_slot([{"type": "node", "count": 2}])]}], 100),
}

REMOVED_NODE0 = """\
fast=1
      ------------core0[1:x]
      ------------core1[1:x]
      ------------core2[1:x]
      ---------socket0[1:x]
      ------node1[1:x]
      ------------core0[1:x]
      ------------core1[1:x]
      ------------core2[1:x]
      ---------socket0[1:x]
      ------node2[1:x]
      ---c0[1:x]
INFO: =============================
INFO: EXPRESSION="status=up"
INFO: =============================
"""


# node0's subtree, every vertex exclusive
NODE0 = """\
      ---------------core0[1:x]
      ---------------core1[1:x]
      ---------------core2[1:x]
      ---------------core3[1:x]
      ------------socket0[1:x]
      ---------------core4[1:x]
      ---------------core5[1:x]
      ---------------core6[1:x]
      ---------------core7[1:x]
      ------------socket1[1:x]
      ---------node0[1:x]
"""
# what an exclusive rack holds: node0's subtree, node1's, rack0
RACK0 = NODE0 + NODE0.replace("socket0", "socket2").replace("socket1", "socket3") \
    .replace("node0", "node1") + "      ------rack0[1:x]\n"
ONE_CORE = """\
      ---------------core0[1:x]
      ------------socket0[1:s]
      ---------node0[1:s]
      ------rack0[1:s]
      ---cluster0[1:s]
"""
JOB1 = framed_match(ONE_CORE, 1, "ALLOCATED", "Now")


def _reserved(jobid: int, at: int) -> str:
    return framed_match(RACK0 + "      ---cluster0[1:s]\n", jobid, "RESERVED", str(at))


FIND_AFTER_FAILED_REMOVE = framed_find(RACK0 + "      ---cluster0[1:x]\n", "sched-future=reserved")
C2_TAIL = framed_match(ONE_CORE, 4, "RESERVED", "300")
C3_TAIL = framed_match(ONE_CORE.replace("socket0", "socket2").replace("node0", "node1"), 4,
                 "RESERVED", "200")
D_TAIL = framed_find("""\
      ---------------core0[1:x]
      ------------socket0[1:x]
      ---------node0[1:x]
      ------rack0[1:x]
      ---cluster0[1:x]
""", "sched-now=allocated") + framed_find(
    NODE0 + "      ------rack0[1:x]\n      ---cluster0[1:x]\n", "sched-future=reserved")

MOD_PLAN_ERROR = (
    "ERROR: can't partial cancel subgraph \n"
    "ERROR: mod_plan: traverser tried to remove schedule and span after vtx_cancel during "
    "partial cancel:\nrack0 Success.\nremove: rack0: cancel_vertex failed.\n")


def _run(tmp_path, graph: str, commands: str, *args: str) -> tuple[str, str]:
    g = tmp_path / "g.graphml"
    g.write_text(graph)
    for name, doc in JOBSPECS.items():
        (tmp_path / name).write_text(json.dumps(doc))
    out, err, rc = rq(tmp_path, g, commands.replace("@", str(tmp_path) + "/"), *args)
    assert rc == 0, err
    return out, err


def test_ranks_whose_vertices_a_path_removal_took_fail_the_removal(tmp_path):
    out, err = _run(tmp_path, NODES, """\
remove /c0/node0 true
remove 0-1 false
set-property /c0/node1 fast=1
get-property /c0/node1
find status=up
quit
""")
    # the traverser's message is empty, so "ERROR: " ends without a newline
    assert err == "ERROR: can't remove subgraph \nERROR: "
    assert out == REMOVED_NODE0


def test_a_reserved_ancestor_stops_the_rank_removal(tmp_path):
    out, err = _run(tmp_path, RACK, """\
match allocate @core.json
match allocate_orelse_reserve @rackx.json
remove 0 false
find sched-future=reserved
quit
""", "-P", "low")
    assert err == MOD_PLAN_ERROR
    # nothing was removed: node0 and its subtree are still there (cleared, yet listed
    # under the reserved sockets' ancestors)
    assert out == JOB1 + _reserved(2, 100) + FIND_AFTER_FAILED_REMOVE


def _three_jobs(then: str) -> str:
    return ("match allocate @core.json\n"
            "match allocate_orelse_reserve @rackx.json\n"
            "match allocate_orelse_reserve @rackx.json\n"
            f"remove 0 false\n{then}quit\n")


def _three_jobs_out(tail: str) -> str:
    return JOB1 + _reserved(2, 100) + _reserved(3, 200) + tail


def test_the_job_left_reserved_on_the_rack_is_the_hash_maps_first(tmp_path):
    # rack0's jobs come back 1, 2, 3: job 2's reservation fails and stays in rack0's
    # planner after its cancel, so a core for 150 s waits for 300 (job 3 holds
    # node1 from 200, node0 is held under its cleared vertex until 300)
    out, err = _run(tmp_path, RACK, _three_jobs(
        "cancel 2\nmatch allocate_orelse_reserve @core150.json\n"), "-P", "low")
    assert err == MOD_PLAN_ERROR
    assert out == _three_jobs_out(C2_TAIL)


def test_job_3_cancelled_frees_node1_from_200(tmp_path):
    out, err = _run(tmp_path, RACK, _three_jobs(
        "cancel 3\nmatch allocate_orelse_reserve @core150.json\n"), "-P", "low")
    assert err == MOD_PLAN_ERROR
    assert out == _three_jobs_out(C3_TAIL)


def test_a_cancel_does_not_reach_below_the_cleared_node(tmp_path):
    out, err = _run(tmp_path, RACK, _three_jobs(
        "cancel 1\ncancel 2\ncancel 3\nfind sched-now=allocated\n"
        "find sched-future=reserved\n"), "-P", "low")
    assert err == MOD_PLAN_ERROR
    assert out == _three_jobs_out(D_TAIL)


# six nodes of one core and one gpu each (RV1), a job on all six for 10 s
R_SIX = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-5", "children": {"core": "0", "gpu": "0"}}],
    "nodelist": ["node[0-5]"], "starttime": 0, "expiration": 0}}
RANK4 = {"version": 1, "execution": {
    "R_lite": [{"rank": "4", "children": {"core": "0"}}],
    "nodelist": ["node4"], "starttime": 0, "expiration": 0}}
SIX_NODES = framed_match("".join(f"      ------node{i}[1:x]\n" for i in range(6))
                   + "      ---cluster0[1:s]\n", 1, "ALLOCATED", "Now")


def _nodes(n: int) -> dict:
    return jobspec([{"type": "slot", "count": n, "label": "default",
                     "with": [{"type": "node", "count": 1}]}], 10)


def _run_rv1(tmp_path, commands: str) -> tuple[str, str]:
    g = tmp_path / "g.json"
    g.write_text(json.dumps(R_SIX))
    (tmp_path / "pc.json").write_text(json.dumps(RANK4))
    for n in (2, 6):
        (tmp_path / f"n{n}.json").write_text(json.dumps(_nodes(n)))
    out, err, rc = rq(tmp_path, g, commands.replace("@", str(tmp_path) + "/"), "-f", "rv1exec")
    assert rc == 0, err
    return out, err


def test_no_reservation_time_after_a_partial_cancel_took_the_lead_types_span(tmp_path):
    out, err = _run_rv1(tmp_path, """\
match allocate @n6.json
partial-cancel 1 rv1exec @pc.json
match allocate_orelse_reserve @n2.json
match allocate_orelse_reserve @n2.json
quit
""")
    assert err == ""
    assert out == SIX_NODES + no_match(2) + no_match(3)


def test_without_the_partial_cancel_the_job_end_is_a_time_to_try(tmp_path):
    out, err = _run_rv1(tmp_path, "match allocate @n6.json\n"
                                  "match allocate_orelse_reserve @n2.json\nquit\n")
    assert err == ""
    assert out == SIX_NODES + framed_match(
        "      ------node4[1:x]\n      ------node5[1:x]\n      ---cluster0[1:s]\n",
        2, "RESERVED", "10")
