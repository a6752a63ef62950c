"""A job id reused after a match writer failed (issue 35, fresh random case r7327).

``reapi_cli_t::match_allocate`` (flux-sched's reapi_cli_impl.hpp) counts a job id only
after ``writers->emit`` succeeded; the traversal before it has planned the job. So when
the emit fails (``jgf_shorthand`` with an exclusive root: vertices, no edges, ENOENT)
the next match runs under the same id, and Fluxion plans again: both jobs stay in the
planners, ``find jobid-...=1`` finds the vertices of both, and once a match under the id
writes, ``info 1`` and ``cancel`` see only that job. fluxnode's traverser refused the id
("job 1 already exists"); the session now gives the traverser a fresh id for it
(``resource_query/job_ids.py``).

Expected: Fluxion v0.54's answer, ``resource-query -L g.json -f rv1exec -F
jgf_shorthand -d -t OUT < cmds`` with the files below (2026-11-28), its -t file in
``data/rq_writer_error_jobid.out``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support.rq_run import jobspec, rq

GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-1"}}],
    "nodelist": ["node[0-3]"], "starttime": 0, "expiration": 0}}


CORE_SLOT = [{"type": "slot", "count": 1, "label": "default",
              "with": [{"type": "core", "count": 1}]}]
WHOLE_CLUSTER = jobspec([{"type": "cluster", "count": 1, "exclusive": True, "with": [
    {"type": "node", "count": 1, "with": CORE_SLOT}]}], 10)
CORE = jobspec(CORE_SLOT, 60)

COMMANDS = """\
match allocate {cl}
match allocate_orelse_reserve {cl}
find jobid-alloc=1 and names=node3
find jobid-reserved=1 and names=node3
match allocate_orelse_reserve {core}
info 1
cancel 2
find sched-future=reserved and names=core1
quit
"""

# Fluxion's -t output (the JSON lines are jgf_shorthand's)
EXPECTED = (Path(__file__).parent / "data" / "rq_writer_error_jobid.out").read_text()
EXPECTED_STDERR = """\
match_allocate: ERROR: match writer emit: No such file or directory
match_allocate: ERROR: match writer emit: No such file or directory
cancel: ERROR: nonexistent job 2
"""


def test_a_match_after_a_writer_error_plans_again_under_the_same_job_id(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    cl, core = tmp_path / "cl10.yaml", tmp_path / "core.yaml"
    cl.write_text(yaml.safe_dump(WHOLE_CLUSTER, sort_keys=False))
    core.write_text(yaml.safe_dump(CORE, sort_keys=False))
    out, err, rc = rq(tmp_path, graph, COMMANDS.format(cl=cl, core=core),
                      "-f", "rv1exec", "-F", "jgf_shorthand")
    assert rc == 0, err
    assert err == EXPECTED_STDERR
    assert out == EXPECTED
