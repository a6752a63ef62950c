"""resource-query after the graph grows (`attach`) or shrinks (`remove`), as Fluxion v0.54
keeps its subtree filters and its count of nodes up (issue 35, the --more batch
9000-9499). The expected outputs are Fluxion's, pasted from its binary; the commands are
in data/graph_changes/README.md:

    resource-query -L tests/scheduler/data/hwloc-one-node.xml -f hwloc -F simple -d \\
        -p ALL:node -t expected_NAME.out < NAME.in   # {data} replaced by the directory
"""

from __future__ import annotations

from pathlib import Path

from support.rq_run import rq

DATA = Path(__file__).parent / "data" / "graph_changes"
GRAPH = Path(__file__).parent / "data" / "hwloc-one-node.xml"


def _run(tmp_path, name: str) -> tuple[str, str, int]:
    cmds = (DATA / f"{name}.in").read_text().replace("{data}", str(DATA))
    return rq(tmp_path, GRAPH, cmds, "-f", "hwloc", "-F", "simple", "-p", "ALL:node")


def test_leaf_cores_attached_count_at_the_cluster_from_the_next_initialize(tmp_path):
    """The hwloc graph's cores have PUs below them, so `core` is no pruning type until
    `attach` brings a node whose cores are leaves. Fluxion's prime walk then makes `core`
    a type of the cluster's filter when it reaches node9's core, having passed tiny7's two
    cores uncounted: the cluster's filter holds 1 core, and a request with a cluster that
    needs 2 cores is pruned there (Unsatisfiable, though tiny7 has 2). The second attach
    primes again with `core` a pruning type from the start: 4 cores, Satisfiable."""
    out, err, rc = _run(tmp_path, "leaf_cores")
    assert (rc, err) == (0, "")
    assert out == (DATA / "expected_leaf_cores.out").read_text()


def test_nodes_up_is_fluxions_counter_that_attach_leaves_alone(tmp_path):
    """Fluxion counts the nodes up at load and changes the count only on set-status: with
    tiny7 down, node9 attached up is not counted, so a match for one node finds none
    (EBUSY before any walk), even allocate_orelse_reserve."""
    out, err, rc = _run(tmp_path, "nodes_up")
    assert rc == 0
    assert err == (DATA / "expected_nodes_up.err").read_text()
    assert out == (DATA / "expected_nodes_up.out").read_text()
