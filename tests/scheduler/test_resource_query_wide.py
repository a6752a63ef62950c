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
