"""`attach` as Fluxion's JGF reader unpacks a subgraph (resource_reader_jgf_t::
unpack_vertices / unpack_edges): a document vertex is the graph's vertex only when one of
its paths names a vertex of the same rank; otherwise it is added, even at a path the
graph has, and an edge is added only when it touches a vertex the document added.

So a subgraph that names node0 with rank -1 (the graph's node0 has rank 0) adds a second
node0 with its nic0 below it, out of the tree's reach: Fluxion's matches and finds do not
see the nic (issue 35: fluxnode used to hang nic0 below the graph's node0 and allocate
it). With the node's own rank the nic is found and allocated. The expected outputs are
Fluxion v0.54's (data/attach/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import SHARED
from support.rq_run import rq

DATA = Path(__file__).parent / "data" / "attach"


@pytest.mark.parametrize("which", ["same", "other"])
def test_attach_finds_the_graphs_vertex_by_path_and_rank(tmp_path, tiny_grug, which):
    cmds = (DATA / "cmds.in").read_text().replace("{data}", str(DATA)).replace(
        "ATTACH", f"nic_rank_{which}.json")
    out, err, rc = rq(tmp_path, tiny_grug, cmds, "-P", "high")
    assert (rc, err) == (0, "")
    assert out == (DATA / f"expected_rank_{which}.out").read_text()


def test_a_vertex_of_another_rank_is_a_second_vertex_at_that_path(tmp_path, tiny_grug):
    cmds = (DATA / "cmds.in").read_text().replace("{data}", str(DATA)).replace(
        "ATTACH", "nic_rank_other.json")
    out, _err, _rc = rq(tmp_path, tiny_grug, cmds, "-P", "high")
    assert out.count("INFO: No matching resources found\n") == 2
    assert "nic0" not in out
    assert out.endswith("/tiny0/rack0/node0 is up\n" * 2)


CORPUS = SHARED / "fluxion-corpus" / "data" / "resource"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus data not found at {CORPUS}")
def test_a_subgraph_with_another_root_fails_to_attach(tmp_path):
    """t3028 'can't grow with a different root in the subgraph': the subgraph's root is a
    second containment root, which Fluxion's JGF reader refuses (add_graph_metadata,
    EINVAL) in these words; the graph's own vertices are found as before."""
    cmds = f"attach {CORPUS / 'jgfs' / 'power.json'}\nfind status=up\nquit\n"
    out, err, rc = rq(tmp_path, CORPUS / "jgfs" / "elastic" / "node-test.json", cmds,
                      "-F", "jgf", "-f", "jgf", "-S", "CA", "-P", "low")
    assert rc == 0
    assert err == (DATA / "expected_other_root.err").read_text()
    assert out == (DATA / "expected_other_root.out").read_text()
