"""`fluxnode resource-query` as a subprocess: output file, errors, no tracebacks."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from support.rq_run import rq
from support.sched_graphs import R_TWO_NODES, cores


def test_match_cancel_and_info_blocks(tmp_path, tiny_grug):
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump(cores(1)))
    out, err, rc = rq(
        tmp_path,
        tiny_grug,
        f"match allocate {js}\nmatch allocate_orelse_reserve {js}\ncancel 1 stats\nquit\n",
        "-P",
        "high",
    )
    assert rc == 0 and err == ""
    assert out.startswith("      ---------------core7[1:x]\n      ------------socket1[1:s]\n")
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n" in out
    assert 'INFO: CANCEL PREORDER COUNT="' in out


def test_errors_go_to_stderr_without_traceback(tmp_path, tiny_grug):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nresources: 7\n")
    out, err, rc = rq(tmp_path, tiny_grug,
                      f"match allocate {tmp_path}/missing.yaml\nmatch bogus x\nmatch allocate\n"
                      f"cancel 42\nmatch allocate {bad}\nget-status /nope\nquit\n")
    assert rc == 0
    assert "ERROR: can't open" in err and "ERROR: unknown subcmd bogus" in err
    assert "ERROR: malformed command" in err and "ERROR: nonexistent job 42" in err
    assert "Traceback" not in err
    assert "Could not find path /nope in resource graph." in out


def test_bad_graph_and_policy_are_one_line_errors(tmp_path, tiny_grug):
    junk = tmp_path / "junk.graphml"
    junk.write_text("not xml")
    _out, err, rc = rq(tmp_path, junk, "quit\n")
    assert rc != 0 and err.count("\n") == 1 and err.startswith("ERROR:")
    _out, err, rc = rq(tmp_path, tiny_grug, "quit\n", "-P", "sideways")
    assert rc != 0 and err.startswith("ERROR:") and "Traceback" not in err


def test_find_and_status(tmp_path, tiny_grug):
    out, err, rc = rq(tmp_path, tiny_grug,
                      "set-status /tiny0/rack0/node1 down\nget-status /tiny0/rack0/node1\n"
                      "find status=down\nquit\n")
    assert rc == 0 and err == ""
    assert "/tiny0/rack0/node1 is down\n" in out
    assert "---------node1[1:x]\n" in out and 'INFO: EXPRESSION="status=down"' in out


def test_partial_cancel_refuses_a_jgf_whose_ranks_disagree_with_the_graph(tmp_path):
    """A release document naming a vertex with another rank than the graph's frees
    nothing (as Fluxion); a consistent one frees that rank."""
    graph = tmp_path / "R.json"
    graph.write_text(json.dumps(R_TWO_NODES))
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump(cores(4, nodes=2)))

    def release(rank: int) -> str:
        doc = tmp_path / f"release-{rank}.json"
        doc.write_text(json.dumps({"graph": {"nodes": [{"id": "1", "metadata": {
            "type": "node", "name": "n0", "rank": rank,
            "paths": {"containment": "/cluster0/n0"}}}], "edges": []}}))
        return str(doc)

    out, err, rc = rq(tmp_path, graph,
                      f"match allocate {js}\npartial-cancel 1 jgf {release(-1)}\n"
                      "find sched-now=allocated\n"
                      f"partial-cancel 1 jgf {release(0)}\nfind sched-now=allocated\nquit\n",
                      "-f", "rv1exec")
    assert rc == 0
    assert err.count("ERROR: error encountered while removing job 1") == 1
    first, second = out.split('INFO: EXPRESSION="sched-now=allocated"')[:2]
    held = first.rsplit("INFO: SCHEDULED AT=Now", 1)[1]
    assert "n0[" in held and "n1[" in held          # the bad document freed nothing
    assert "n0[" not in second and "n1[" in second  # the good one freed rank 0 only


def test_elapse_time_writes_what_fluxion_writes_where_it_writes_it(tmp_path, tiny_grug):
    """-e: the load block and each match's ELAPSE and visit counts. The expected lines
    (times masked) are what Fluxion's resource-query (flux-sched fd257f7) printed for the
    same graph and commands: most go to standard output even with -t, but a failed
    match's ELAPSE goes to the -t file."""
    import re
    import subprocess
    import sys

    one, big = tmp_path / "one.yaml", tmp_path / "big.yaml"
    one.write_text(yaml.safe_dump(cores(1)))
    big.write_text(yaml.safe_dump(cores(10000)))
    out_file = tmp_path / "out.R"
    proc = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource-query", "-L", str(tiny_grug), "-d", "-e",
         "-t", str(out_file)],
        input=f"match allocate {one}\nmatch allocate {big}\nmatch satisfiability {one}\nquit\n",
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    stdout = proc.stdout.splitlines()
    assert re.fullmatch(r"INFO: Graph Load Time: \d\S*", stdout[0])
    elapse = re.compile(r"INFO: ELAPSE=\d+\.\d{6}")  # std::to_string of a double
    timed = [i for i, line in enumerate(stdout) if line.startswith("INFO: ELAPSE=")]
    assert timed == [9, 14] and all(elapse.fullmatch(stdout[i]) for i in timed)
    assert [line for i, line in enumerate(stdout) if i and i not in timed] == [
        "INFO: Vertex Count: 36",
        "INFO: Edge Count: 35",
        "INFO: by_type Key-Value Pairs: 7",
        "INFO: by_name Key-Value Pairs: 20",
        "INFO: by_path Key-Value Pairs: 36",
        "INFO: number of vertices with rank -1: 34",
        "INFO: number of vertices with rank 0: 1",
        "INFO: number of vertices with rank 1: 1",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
        "INFO: PREORDER VISIT COUNT=8",
        "INFO: POSTORDER VISIT COUNT=5",
    ]
    failed = out_file.read_text().split("INFO: No matching resources found\n")[1]
    assert re.match(r"INFO: JOBID=2\nINFO: ELAPSE=\d+\.\d{6}\nINFO: =+\n", failed)
    assert out_file.read_text().count("ELAPSE") == 1


@pytest.mark.xfail(strict=True, reason="locality is still run as `high`: Fluxion's "
                   "greater_interval_first_t orders the root's candidates by the interval "
                   "of consecutive scores they fall in (docs/scheduler.md, Left to do)")
def test_locality_orders_the_roots_candidates_by_interval_not_by_score(tmp_path, tiny_grug):
    """Fluxion's `locality` is not `high`: its dom_finish_graph merges the candidates'
    scores into intervals (boost::icl) and chooses by interval, so two free nodes (one
    interval) tie and keep their order, node0 first, where `high` takes node1. The
    picks below are what Fluxion's resource-query (flux-sched v0.54.0-8-gfd257f71)
    printed for this graph and stream."""
    js = tmp_path / "job.yaml"
    js.write_text(yaml.safe_dump({
        "version": 1, "attributes": {"system": {"duration": 3600}},
        "resources": [{"type": "node", "count": 1, "with": [
            {"type": "slot", "count": 1, "label": "task", "with": [
                {"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}]}]}],
        "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}))
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate {js}\n" * 3 + "quit\n",
                      "-P", "locality")
    assert rc == 0 and err == ""
    picks = re.findall(r"(core\d+|node\d+)\[", out)
    assert picks == ["core7", "node0", "core3", "node0", "core7", "node1"]
