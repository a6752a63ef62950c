"""resource-query streams whose expected output is what Fluxion's own resource-query wrote
(flux-sched v0.54.0 built from source, ``resource-query ARGS -d -t out < cmds``
with the graph, jobspecs and commands below), kept byte for byte in tests/scheduler/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import SHARED
from support.rq_run import rq

R2 = {"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0-1"}}],
                                  "nodelist": ["n[0-1]"], "starttime": 0, "expiration": 0}}
NODE_X = {"version": 9999, "resources": [{"type": "node", "count": 1, "exclusive": True, "with": [
    {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}]}],
          "attributes": {"system": {}},
          "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}
ONE_CORE = {"version": 9999, "resources": [{"type": "slot", "count": 1, "label": "s", "with": [
    {"type": "core", "count": 1}]}], "attributes": {"system": {"duration": 60}},
            "tasks": [{"command": ["a"], "slot": "s", "count": {"per_slot": 1}}]}

# -L r2.json -f rv1exec -P low -F jgf_shorthand; cmds: match allocate nx.yaml (NODE_X),
# match allocate sh.yaml (ONE_CORE), find sched-now=allocated, find agfilter=t, quit
SHORTHAND_FIND = (Path(__file__).parent / "data" / "rq_shorthand_find.out").read_text()


def test_find_under_jgf_shorthand_and_agfilter_counts_at_now(tmp_path):
    """find's walk emits every vertex with excl_parent false, so the shorthand writer
    leaves nothing out of it (its ``writer`` was already named by the first match);
    agfilter counts what is planned at the wall clock's now, here the job without a
    duration but not the 60-second one (dom_find_dfv)."""
    graph = tmp_path / "r2.json"
    graph.write_text(json.dumps(R2))
    nx, sh = tmp_path / "nx.yaml", tmp_path / "sh.yaml"
    nx.write_text(json.dumps(NODE_X))
    sh.write_text(json.dumps(ONE_CORE))
    out, err, rc = rq(tmp_path, graph, f"match allocate {nx}\nmatch allocate {sh}\n"
                      "find sched-now=allocated\nfind agfilter=t\nquit\n",
                      "-f", "rv1exec", "-P", "low", "-F", "jgf_shorthand")
    assert (rc, err) == (0, "")
    assert out == SHORTHAND_FIND


DATA = SHARED / "fluxion-corpus" / "data" / "resource"


@pytest.mark.skipif(not DATA.is_dir(), reason=f"corpus data not found at {DATA}")
def test_without_allocating_leaves_first_match_order_as_fluxion_does(tmp_path):
    """t3001's stream under -P first: without_allocating re-weighs no edge whose
    subtree has nothing free and no span (upd_by_outedges' skip), so the allocations after
    it take what they would have. Fluxion: -L grugs/tiny.graphml -S CA -P first, the
    cores and sockets of its six placements (matched, 4 allocated, matched in the future)."""
    js = DATA / "jobspecs" / "basics" / "test001.yaml"
    lines = [f"match without_allocating {js}"] + [f"match allocate {js}"] * 4 + [
        f"match without_allocating {js}", f"match without_allocating_future {js}", "quit"]
    out, err, rc = rq(tmp_path, DATA / "grugs" / "tiny.graphml", "\n".join(lines) + "\n",
                      "-S", "CA", "-P", "first")
    assert (rc, err) == (0, "")
    picked = [line.strip(" -") for line in out.splitlines() if "core" in line]
    assert picked == ["core35[1:x]"] * 3 + ["core17[1:x]"] * 2 + ["core35[1:x]"]
