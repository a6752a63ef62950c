"""Issue 35's ``--more`` random cases that fluxnode answered unlike Fluxion, one test per
cause, each reduced to the few commands that still differ.

Expected outputs are Fluxion v0.54's (``/work/flux-build/install/bin/resource-query``,
2026-11-29), run with the options and commands each test names, ``-d -t OUT``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support.rq_run import jobspec, rq

DATA = Path(__file__).parent / "data" / "more"
# two cores and a gpu on each of two nodes (the rv1exec reader's graph)
TWO_NODES = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-1", "gpu": "0"}}],
    "nodelist": ["node[0-1]"], "starttime": 0, "expiration": 0}}
CORES_OF_NODE1 = {"version": 1, "execution": {
    "R_lite": [{"rank": "1", "children": {"core": "0-1"}}], "nodelist": ["node1"],
    "starttime": 0, "expiration": 0}}


def _files(tmp_path, **docs) -> dict:
    paths = {}
    for name, doc in docs.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc))
    return paths


# `resource-query -L g.json -f rv1exec -P lonodex -F simple` on
# `update allocate rv1exec u.json 1 0 10`, `find sched-now=allocated`,
# `find sched-now=free` (cases r9098, r9386, r9431)
EXPECTED_UNPLANNED_GPU = """\
      ---------core0[1:x]
      ---------core1[1:x]
      ---------gpu0[1:x]
      ------node1[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ------node1[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="sched-now=allocated"
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ---------gpu0[1:x]
      ------node0[1:x]
      ---------gpu0[1:x]
      ------node1[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="sched-now=free"
INFO: =============================
"""


def test_an_rv1exec_update_plans_only_what_its_reader_reads(tmp_path):
    """The rv1exec reader plans the vertices R names (and a node only when R names all
    of its rank); the update walk after it runs with ``full`` false and plans nothing
    (dfu_impl_t::upd_plan). Under a node-exclusive policy the walk takes the whole node
    (modify_traversal), so gpu0 is written with the job but stays free."""
    f = _files(tmp_path, g=TWO_NODES, u=CORES_OF_NODE1)
    out, err, rc = rq(tmp_path, f["g"], f"update allocate rv1exec {f['u']} 1 0 10\n"
                      "find sched-now=allocated\nfind sched-now=free\nquit\n",
                      "-f", "rv1exec", "-P", "lonodex")
    assert (rc, err) == (0, "")
    assert out == EXPECTED_UNPLANNED_GPU


def _vertex(uid: int, vtype: str, vid: int, rank: int, path: str) -> dict:
    return {"id": str(uid), "metadata": {
        "type": vtype, "basename": vtype, "name": f"{vtype}{vid}", "id": vid,
        "uniq_id": uid, "rank": rank, "exclusive": False, "unit": "", "size": 1,
        "paths": {"containment": path}}}


# a node below a rack: the rv1exec reader looks for R's nodes right below the root
RACKED = {"graph": {"nodes": [
    _vertex(0, "cluster", 0, -1, "/cluster0"),
    _vertex(1, "rack", 0, -1, "/cluster0/rack0"),
    _vertex(2, "node", 0, 0, "/cluster0/rack0/node0"),
    _vertex(3, "core", 0, 0, "/cluster0/rack0/node0/core0")],
    "edges": [{"source": "0", "target": "1"}, {"source": "1", "target": "2"},
              {"source": "2", "target": "3"}]}}
CORE0_OF_NODE0 = {"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0"}}], "nodelist": ["node0"],
    "starttime": 0, "expiration": 0}}
# `resource-query -L g.json -f jgf -F simple` on `update allocate rv1exec u.json 1 0 10`,
# `find sched-now=allocated` (case r9066)
EXPECTED_RACKED = """\
INFO: =============================
INFO: No matching resources found
INFO: JOBID=1
INFO: =============================
INFO: =============================
INFO: EXPRESSION="sched-now=allocated"
INFO: =============================
"""
EXPECTED_RACKED_STDERR = "ERROR: traverser run () returned error \n" + """\
ERROR: add_or_update: couldn't find vertex in graph for node0.
unpack_rank: failed unpacking rank for node0.
"""


def test_an_rv1exec_update_finds_nodes_right_below_the_root(tmp_path):
    """resource_reader_rv1exec_t::find_vertex looks a node up at the root's path and its
    hostname (and a child at its node's path and TYPEID): node0 below rack0 is not
    found, and the update fails planning nothing."""
    f = _files(tmp_path, g=RACKED, u=CORE0_OF_NODE0)
    out, err, rc = rq(tmp_path, f["g"], f"update allocate rv1exec {f['u']} 1 0 10\n"
                      "find sched-now=allocated\nquit\n", "-f", "jgf")
    assert rc == 0
    assert err == EXPECTED_RACKED_STDERR
    assert out == EXPECTED_RACKED


# two cores on each of two nodes; one core, and an R of node0's two cores
TWO_BY_TWO = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-1"}}],
    "nodelist": ["node[0-1]"], "starttime": 0, "expiration": 0}}
CORES_OF_NODE0 = {"version": 1, "execution": {
    "R_lite": [{"rank": "0", "children": {"core": "0-1"}}], "nodelist": ["node0"],
    "starttime": 0, "expiration": 0}}
CORE = jobspec([{"type": "slot", "count": 1, "label": "default",
                 "with": [{"type": "core", "count": 1}]}], 60)


def _remove_case(tmp_path, commands: str, *args: str) -> tuple[str, str, int]:
    f = _files(tmp_path, g=TWO_BY_TWO, u=CORES_OF_NODE0)
    core = tmp_path / "core.yaml"
    core.write_text(yaml.safe_dump(CORE, sort_keys=False))
    return rq(tmp_path, f["g"], commands.format(u=f["u"], core=core), "-f", "rv1exec", *args)


# `resource-query -L g.json -f rv1exec -F simple` (cases r9345, r9446)
EXPECTED_CLEARED_BEFORE_FAILING = """\
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=4
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
INFO: =============================
INFO: EXPRESSION="sched-now=allocated"
INFO: =============================
      ---------core1[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=5
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core0[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=6
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=7
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
INFO: =============================
INFO: JOBID=9
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def test_remove_clears_the_ranks_before_one_it_lacks(tmp_path):
    """dfu_impl_t::remove(root, ranks) clears each rank's vertices in turn (clear_vertex:
    planners reset, tags and span maps emptied) and fails at rank 2, which the graph
    lacks: node0 stays, holding nothing (find sees no allocation), but its x_checker
    keeps job 4's spans, so no match takes its cores (job 7); the rv1exec reader's
    update checks the schedule planners only and takes them (job 9)."""
    out, err, rc = _remove_case(
        tmp_path, "update allocate rv1exec {u} 4 0 60\nremove 0-2 false\n"
        "find sched-now=allocated\n" + "match allocate {core}\n" * 3
        + "update allocate rv1exec {u} 9 0 60\nquit\n")
    assert rc == 0
    assert err == ("ERROR: can't partial cancel subgraph \n"
                   "ERROR: remove: 2 not found in by_rank map.\n")
    assert out == EXPECTED_CLEARED_BEFORE_FAILING


# `resource-query -L g.json -f rv1exec -F simple -p cluster:core`
EXPECTED_REDUCED_BY_ALL = """\
      ---------core1[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core0[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=2
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core1[1:x]
      ------node0[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core1[1:x]
      ------node0[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="sched-now=allocated"
INFO: =============================
      ---------core0[1:x]
      ------node0[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=4
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=5
INFO: =============================
"""


def test_remove_takes_every_jobs_units_from_each_jobs_ancestor_spans(tmp_path):
    """After clearing rank 1, remove gives back from each job's span in each ancestor's
    subtree filter all the units allocated on the rank, every job's (2 cores): job 1's
    one-core span at cluster0 cannot lose 2 (planner_multi_reduce_span: EINVAL) and
    the remove fails there, rank 1 cleared and kept."""
    out, err, rc = _remove_case(
        tmp_path, "match allocate {core}\n" * 3 + "remove 1 false\n"
        "find sched-now=allocated\n" + "match allocate {core}\n" * 2 + "quit\n",
        "-p", "cluster:core")
    assert rc == 0
    assert err == ("ERROR: can't partial cancel subgraph \n"
                   "ERROR: mod_agfilter: planner_multi_reduce_span returned -1.\n"
                   "cluster0 Invalid argument.\nremove: cluster0: cancel_vertex failed.\n")
    assert out == EXPECTED_REDUCED_BY_ALL


# two cores of one slot, labeled "b"
LABELED = jobspec([{"type": "slot", "count": 1, "label": "default",
                    "with": [{"type": "core", "count": 2, "label": "b"}]}], 60)


def _label_case(tmp_path, commands: str) -> tuple[str, str, int]:
    f = _files(tmp_path, g=TWO_BY_TWO, u=CORES_OF_NODE1)
    paths = {"u": f["u"]}
    for name, spec in (("lab", LABELED), ("core", CORE)):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(spec, sort_keys=False))
    return rq(tmp_path, f["g"], commands.format(**paths), "-f", "rv1exec", "-F", "jgf",
              "-P", "low")


# in data/more: `resource-query -L g.json -f rv1exec -F jgf -P low` (cases r9057, r9215,
# r9303, r9304, r9359, r9413)
EXPECTED_KEPT_LABELS = (DATA / "kept_labels.out").read_text()


def test_a_vertex_keeps_the_label_an_earlier_walk_wrote(tmp_path):
    """dom_dfv writes a labeled request's label into each vertex of its type it
    completes (its ephemeral store) and the match writers write the store as it is, stale
    or not: the satisfiability walk labels every core, and later matches of an unlabeled
    core write "b". ``find`` clears the store of each vertex it writes (node0's core0,
    not core1)."""
    out, err, rc = _label_case(
        tmp_path, "match satisfiability {lab}\nmatch allocate {core}\n"
        "find sched-now=allocated\n" + "match allocate {core}\n" * 2 + "quit\n")
    assert (rc, err) == (0, "")
    assert out == EXPECTED_KEPT_LABELS


# in data/more: `resource-query -L g.json -f rv1exec -F jgf -P low` (cases r9386, r9406)
EXPECTED_UPDATE_LABELS = (DATA / "update_labels.out").read_text()


def test_an_update_writes_the_labels_an_earlier_match_left(tmp_path):
    """The labeled match completes all four cores and takes node0's; the update of
    node1's cores after it walks no request and writes the "b" they kept."""
    out, err, rc = _label_case(
        tmp_path, "match allocate {lab}\nupdate allocate rv1exec {u} 5 0 60\nquit\n")
    assert (rc, err) == (0, "")
    assert out == EXPECTED_UPDATE_LABELS


# a node exclusively, for longer than the graph lasts (the match fails)
TOO_LONG = jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [
    {"type": "slot", "count": 1, "label": "default",
     "with": [{"type": "core", "count": 1}]}]}], 4000000000)
# a match's JGF of node1's core0, the node shared
CORE0_OF_NODE1_JGF = {"graph": {"nodes": [
    {"id": "0", "metadata": {"type": "cluster", "id": 0, "rank": -1, "exclusive": False,
                             "size": 1, "paths": {"containment": "/cluster0"}}},
    {"id": "4", "metadata": {"type": "node", "id": 1, "rank": 1, "exclusive": False,
                             "size": 1, "paths": {"containment": "/cluster0/node1"}}},
    {"id": "5", "metadata": {"type": "core", "id": 0, "rank": 1, "exclusive": True,
                             "size": 1, "paths": {"containment": "/cluster0/node1/core0"}}}],
    "edges": [{"source": "0", "target": "4"}, {"source": "4", "target": "5"}]}}
# `resource-query -L g.json -f rv1exec -F simple` (case r12000)
EXPECTED_LEAKED_UPDATE = """\
INFO: =============================
INFO: No matching resources found
INFO: JOBID=1
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ------node1[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def test_an_update_takes_whole_a_type_a_failed_request_left_exclusive(tmp_path):
    """A request failing while it is built (a duration past the graph's end) leaves its
    exclusive types in the matcher's set (see Traverser.leaked_xtypes); the update walk
    of a later ``update`` takes a vertex of such a type whole (modify_traversal), so
    node1 and core1 are written exclusive though the JGF names node1 shared."""
    f = _files(tmp_path, g=TWO_BY_TWO, j=CORE0_OF_NODE1_JGF)
    spec = tmp_path / "long.yaml"
    spec.write_text(yaml.safe_dump(TOO_LONG, sort_keys=False))
    out, err, rc = rq(tmp_path, f["g"], f"match allocate {spec}\n"
                      f"update allocate jgf {f['j']} 3 0 60\nquit\n", "-f", "rv1exec")
    assert rc == 0
    assert err == "match_allocate: ERROR: traverser: Invalid argument\n"
    assert out == EXPECTED_LEAKED_UPDATE


# `resource-query -L g.json -f rv1exec -F simple` (case r12030)
EXPECTED_COUNTED_UP_TO = """\
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=RESERVED
INFO: SCHEDULED AT=10
INFO: =============================
INFO: =============================
INFO: No matching resources found
INFO: JOBID=1
INFO: =============================
      ---------core1[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=2
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core0[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
      ---------core0[1:x]
      ---------core1[1:x]
      ------node0[1:x]
      ---------core0[1:x]
      ------node1[1:x]
      ---cluster0[1:x]
INFO: =============================
INFO: EXPRESSION="jobid-alloc=3"
INFO: =============================
"""


def test_a_match_counted_up_to_an_updated_job_id_plans_under_it_too(tmp_path):
    """``update`` sets the job counter past its job (3 here, then 1 by the failed one):
    the counter counts up to 3 again and Fluxion's match plans under it though job 3
    exists (reapi_cli_t::match_allocate checks nothing); ``find jobid-alloc=3`` sees
    both jobs' vertices."""
    f = _files(tmp_path, g=TWO_BY_TWO, u=CORES_OF_NODE0)
    core = tmp_path / "core.yaml"
    core.write_text(yaml.safe_dump(CORE, sort_keys=False))
    out, _err, rc = rq(tmp_path, f["g"], f"update reserve rv1exec {f['u']} 3 10 60\n"
                       f"update allocate rv1exec {f['u']} 1 10 10\n"
                       + f"match allocate {core}\n" * 2 + "find jobid-alloc=3\nquit\n",
                       "-f", "rv1exec")
    assert rc == 0
    assert out == EXPECTED_COUNTED_UP_TO
