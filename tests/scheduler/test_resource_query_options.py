"""`fluxnode resource-query`'s options by Fluxion's names: the getopt table of flux-sched's
resource/utilities/resource-query.cpp (``OPTIONS "L:f:W:S:P:T:F:g:o:p:t:r:edh"`` and its
long options), and what its process_args refuses."""

from __future__ import annotations

import pytest
import yaml
from support.rq_run import rq
from support.sched_graphs import cores


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(cores(1)))
    return p


@pytest.mark.parametrize("args", [
    ("--traverser-policy=flexible",), ("-T", "flexible"), ("--traverser-policy", "simple"),
    ("--graph-format=graphml", "--graph-output=g"), ("-g", "DOT", "-o", "g"),
    ("--match-subsystems=ca",), ("-S", "CA"), ("--load-format=grug",),
    ("--match-format=jgf_shorthand",), ("--match-format=rv1_shorthand",),
    ("--reserve-vtx-vec=100",), ("--prune-filters=ALL:core",), ("--match-policy=low",),
])
def test_fluxions_option_names_are_taken(tmp_path, tiny_grug, job, args):
    out, err, rc = rq(tmp_path, tiny_grug, f"match allocate {job}\nquit\n", *args)
    assert (rc, err) == (0, "")
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\n" in out


@pytest.mark.parametrize(("args", "message"), [
    (("-g", "svg"), "[ERROR] unknown format for --graph-format: svg\n"),
    (("-F", "yaml"), "[ERROR] unknown format for --match-format: yaml\n"),
    (("-f", "xml"), "[ERROR] unknown format for --load-format: xml\n"),
])
def test_unknown_formats_are_refused_in_fluxions_words(tmp_path, tiny_grug, args, message):
    _out, err, rc = rq(tmp_path, tiny_grug, "quit\n", *args)
    assert rc != 0 and err == message


def test_rv1exec_force_reads_r_as_rv1exec(tmp_path, job):
    """known_resource_reader takes rv1exec_force, which create_resource_reader makes the
    rv1exec reader."""
    graph = tmp_path / "R.json"
    graph.write_text('{"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": '
                     '{"core": "0-3"}}], "nodelist": ["n[0-1]"], "starttime": 0, '
                     '"expiration": 0}}')
    got = [rq(tmp_path, graph, f"match allocate {job}\nquit\n", "-f", fmt, "-F", "rlite")
           for fmt in ("rv1exec_force", "rv1exec")]
    assert got[0] == got[1]
    out, err, rc = got[0]
    assert (rc, err) == (0, "") and '"children": {"core": ' in out
