"""What the widened random batches of issue 35 (bench/rq_random.py --wide) found, each as a
rule of Fluxion v0.54's source with the answer of its resource-query binary pasted in.

The binary's runs: flux-sched v0.54.0 built at /work/flux-build, on this test's tiny graph
(conftest's TINY_GRUG written to tiny.graphml) and the one-core jobspec
(support.sched_graphs.cores(1)) as unit.yaml, 2026-11-29, e.g.

    resource-query -L tiny.graphml -d -F jgf -p ALL:node -t out < cmds
"""

from __future__ import annotations

import json

import pytest
import yaml
from support.rq_run import rq
from support.sched_graphs import cores

FIND_CMDS = """match allocate {job}
find status=up and agfilter=t
find jobid-alloc=1 or agfilter=t
quit
"""

# (node ids, (source, target) of the edges) of each find's JGF, as Fluxion wrote them.
# dom_find_dfv writes an edge to every child that was emitted, whether or not the
# vertex itself then is; under agfilter=t a vertex without a subtree filter (under
# ALL:node the nodes have none) or, when the expression names a job, without that job's
# span in it is not emitted (`jobid-alloc=1 or agfilter=t` is true of every vertex).
FIND_JGF = {
    "ALL:node": [
        (["4", "5", "6", "7", "1", "0"],
         [("2", "4"), ("2", "5"), ("3", "6"), ("3", "7"), ("0", "1")]),
        (["7", "1", "0"], [("3", "7"), ("0", "1")]),
    ],
    "ALL:core": [
        (["4", "5", "2", "6", "7", "3", "1", "0"],
         [("2", "4"), ("2", "5"), ("1", "2"), ("3", "6"), ("3", "7"), ("1", "3"),
          ("0", "1")]),
        (["7", "3", "1", "0"], [("3", "7"), ("1", "3"), ("0", "1")]),
    ],
}


def _graphs(text: str) -> list[tuple[list[str], list[tuple[str, str]]]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            g = json.loads(line)["graph"]
            out.append(([n["id"] for n in g["nodes"]],
                        [(e["source"], e["target"]) for e in g["edges"]]))
    return out


@pytest.mark.parametrize("prune", sorted(FIND_JGF))
def test_find_writes_the_edges_of_its_walk(tmp_path, tiny_grug, prune):
    """r8023 (seeds 8000-8299): `-S C+PA -p ALL:node` then `find agfilter=t` under
    jgf_shorthand; fluxnode had rebuilt the edges from the emitted vertices' levels and
    lost those below a vertex left out."""
    job = tmp_path / "unit.yaml"
    job.write_text(yaml.safe_dump(cores(1)))
    out, err, rc = rq(tmp_path, tiny_grug, FIND_CMDS.format(job=job), "-F", "jgf",
                      "-p", prune)
    assert (rc, err) == (0, "")
    assert _graphs(out)[1:] == FIND_JGF[prune]


ONE_CORE = """      ---------------core7[1:x]
      ------------socket1[1:s]
      ---------node1[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
INFO: =============================
INFO: JOBID=1
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""
ABORT_STDERR = ("terminate called after throwing an instance of 'std::out_of_range'\n"
                "  what():  no element available\n")
# the same commands with the default filters (the root has one): no abort
NO_ABORT = ONE_CORE + """INFO: =============================
INFO: No matching resources found
INFO: Unsatisfiable request
INFO: JOBID=2
INFO: =============================
      ---------------core7[1:x]
      ------------socket1[1:s]
      ---------node0[1:s]
      ------rack0[1:s]
      ---tiny0[1:s]
INFO: =============================
INFO: JOBID=3
INFO: RESOURCES=ALLOCATED
INFO: SCHEDULED AT=Now
INFO: =============================
"""


def _site_graph(tmp_path, tiny_grug):
    """The tiny graph with a root of type `site`: no leaf type is anchored at it (Fluxion
    anchors them at `cluster`), so `-p rack:node` leaves it without a subtree filter, as
    it leaves power.graphml's power panel under `-S PA`."""
    site = tmp_path / "site.graphml"
    site.write_text(tiny_grug.read_text().replace(
        '<data key="type">cluster<', '<data key="type">site<'))
    for name, n in (("unit.yaml", 1), ("eight.yaml", 8)):
        (tmp_path / name).write_text(yaml.safe_dump(cores(n)))
    return site


@pytest.mark.parametrize("op", ["satisfiability", "allocate_with_satisfiability",
                                "allocate_orelse_reserve"])
def test_a_root_without_subtree_filter_aborts_where_fluxion_reads_it(tmp_path, tiny_grug, op):
    """dfu_traverser_t::is_satisfiable, and ::schedule once its first walk failed, read
    the root's filter with subplans.at (dom), which throws std::out_of_range when the
    prune filters gave the root none; nothing catches it and resource-query aborts
    (`resource-query -L site.graphml -d -p rack:node -t out < cmds`: exit 134, this
    stderr, the -t output of the commands before). The default filters give the root
    one: the same commands are answered."""
    site = _site_graph(tmp_path, tiny_grug)
    cmds = (f"match allocate {tmp_path}/unit.yaml\nmatch {op} {tmp_path}/eight.yaml\n"
            f"match allocate {tmp_path}/unit.yaml\nquit\n")
    assert rq(tmp_path, site, cmds, "-p", "rack:node") == (ONE_CORE, ABORT_STDERR, 134)
    if op == "allocate_orelse_reserve":
        assert rq(tmp_path, site, cmds) == (NO_ABORT, "", 0)


def test_a_plain_allocate_never_reads_the_root_filter(tmp_path, tiny_grug):
    """`match allocate` fails with EBUSY without reading it (schedule's MATCH_ALLOCATE
    case): Fluxion answers every match."""
    site = _site_graph(tmp_path, tiny_grug)
    cmds = "".join(f"match allocate {tmp_path}/eight.yaml\n" for _ in range(2)) + "quit\n"
    out, err, rc = rq(tmp_path, site, cmds, "-p", "rack:node")
    assert (rc, err, out.count("INFO: No matching resources found\n")) == (0, "", 2)
