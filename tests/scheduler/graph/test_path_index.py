"""The path index: ``lookup`` and ``path_count`` against paths worked out from the tree.

The GRUG reader leaves most leaves out of ``by_path`` (they are found under their
parent, see ResourceGraph.index_leaves). The oracle here does not use the index: each
vertex's containment path is rebuilt from the names on its parent chain, its other
subsystems' paths are read off the vertex, and every path maps to the vertices that
have it. Every path must look up to exactly those vertices, and the count of distinct
paths (what resource-query -e prints as Fluxion's by_path size) must match.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from fluxnode.scheduler.graph.resource_graph import CONTAINMENT, ResourceGraph
from fluxnode.scheduler.readers.grug import read_grug
from support.paths import SHARED
from support.sched_graphs import TINY_GRUG, grug_document, grug_vertices

GRUGS = SHARED / "fluxion-corpus" / "data" / "resource" / "grugs"

# Siblings that share names: a socket gets cores from two recipe vertices that both
# have basename "core" and ids from 0 (core0..core1 twice), and id_scope -1 gives every
# gpu the bare name "gpu". Fluxion's by_path holds both vertices under such a path.
CLASHING = grug_document(
    '  <graph id="clash" edgedefault="directed">\n'
    + grug_vertices(("cluster", "cluster", "c"), ("node", "node", "node"),
                    ("socket", "socket", "socket"), ("core", "core", "core"),
                    ("core2", "core", "core"), ("gpu", "gpu", "gpu"))
    + """\
    <edge id="e1" source="cluster" target="node"><data key="multi_scale">2</data></edge>
    <edge id="e2" source="node" target="socket"><data key="multi_scale">2</data></edge>
    <edge id="e3" source="socket" target="core"><data key="multi_scale">2</data></edge>
    <edge id="e4" source="socket" target="core2"><data key="multi_scale">3</data></edge>
    <edge id="e5" source="socket" target="gpu"><data key="id_scope">-1</data>
      <data key="multi_scale">2</data></edge>
  </graph>
""")


# A power tree whose paths repeat the containment tree's: its cores' path
# /c0/node0/core0 is a containment core's too, and that core is a leaf found through its
# parent (not in by_path). Both must look up under the path.
SHADOWING = grug_document(
    '  <graph id="shadow" edgedefault="directed">\n'
    + grug_vertices(("cluster", "cluster", "c"), ("node", "node", "node"),
                    ("core", "core", "core"))
    + """\
    <node id="pcluster"><data key="root">1</data><data key="type">cluster</data>
      <data key="basename">c</data><data key="subsystem">power</data></node>
    <node id="pnode"><data key="type">node</data><data key="basename">node</data>
      <data key="subsystem">power</data></node>
    <node id="pcore"><data key="type">pcore</data><data key="basename">core</data>
      <data key="subsystem">power</data></node>
    <edge id="e1" source="cluster" target="node"><data key="multi_scale">2</data></edge>
    <edge id="e2" source="node" target="core"><data key="multi_scale">2</data></edge>
    <edge id="p1" source="pcluster" target="pnode"><data key="e_subsystem">power</data>
      <data key="multi_scale">2</data></edge>
    <edge id="p2" source="pnode" target="pcore"><data key="e_subsystem">power</data>
      <data key="multi_scale">2</data></edge>
  </graph>
""")


def expected_paths(g) -> dict[str, set[int]]:
    """path -> uniq_ids of the vertices that have it, without the index."""
    want: dict[str, set[int]] = defaultdict(set)
    stack = [(g.root, "/" + g.root.name)]  # the containment tree, from its root
    while stack:
        v, path = stack.pop()
        want[path].add(v.uniq_id)
        stack += [(c, f"{path}/{c.name}") for c in v.children]
    for v in g.vertices:  # other subsystems' paths, as the reader set them
        for ssys, p in v.paths.items():
            if ssys != CONTAINMENT:
                want[p].add(v.uniq_id)
    return want


def check_index(g) -> None:
    want = expected_paths(g)
    for path, uids in want.items():
        got = [v.uniq_id for v in g.lookup(path)]
        assert sorted(got) == sorted(uids), path
    assert g.path_count() == len(want)
    assert g.lookup("/no/such/path") == []
    # the name index: every vertex under its name, in creation order
    names: dict[str, list[int]] = defaultdict(list)
    for v in g.vertices:
        names[v.name].append(v.uniq_id)
    assert {n: [v.uniq_id for v in vs] for n, vs in g.by_name.items()} == names


def graphs_to_check() -> list[tuple[str, str]]:
    docs = [("tiny", TINY_GRUG), ("clashing", CLASHING), ("shadowing", SHADOWING)]
    if GRUGS.is_dir():
        docs += [(p.name, p.read_text()) for p in sorted(GRUGS.glob("*.graphml"))]
    return docs


@pytest.mark.parametrize(("name", "doc"), graphs_to_check(), ids=lambda x: x[:40])
def test_every_path_looks_up_to_the_vertices_that_have_it(tmp_path: Path, name: str,
                                                          doc: str) -> None:
    path = tmp_path / f"{name}.graphml"
    path.write_text(doc)
    check_index(read_grug(path))


def test_leaves_are_found_through_their_parent_and_clashes_stay_in_the_index(
        tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.graphml"
    tiny.write_text(TINY_GRUG)
    g = read_grug(tiny)
    # the 16 cores, 4 gpus and 8 memory vertices are leaves with names of their own
    assert g.leaf_paths == 28
    assert "/tiny0/rack0/node1/socket1/core7" not in g.by_path
    assert [v.name for v in g.lookup("/tiny0/rack0/node1/socket1/core7")] == ["core7"]
    clash = tmp_path / "clash.graphml"
    clash.write_text(CLASHING)
    g = read_grug(clash)
    sock = "/c0/node0/socket0"
    assert sorted(v.uniq_id for v in g.lookup(f"{sock}/core0")) == sorted(
        v.uniq_id for v in g.lookup(sock)[0].children if v.name == "core0")
    assert len(g.lookup(f"{sock}/core0")) == 2 and len(g.lookup(f"{sock}/gpu")) == 2
    assert len(g.lookup(f"{sock}/core2")) == 1


def test_a_vertex_added_at_a_leafs_path_and_a_leaf_removed(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.graphml"
    tiny.write_text(TINY_GRUG)
    g = read_grug(tiny)
    count = g.path_count()
    leaf = g.lookup("/tiny0/rack0/node0/socket0/core1")[0]
    extra = g.add_vertex("core", "core", "core1", 1)
    g.set_path(extra, CONTAINMENT, leaf.path)  # same path as a leaf found via its parent
    assert {v.uniq_id for v in g.lookup(leaf.path)} == {leaf.uniq_id, extra.uniq_id}
    assert g.path_count() == count  # one path, two vertices
    other = g.lookup("/tiny0/rack0/node1/socket1/core4")[0]
    g.remove_vertex(other)
    assert g.lookup(other.path) == [] and g.path_count() == count - 1


def built_by_hand():
    """cluster0 -> node0, node1 -> core0, core1, gpu0 each, and node1's second core0 (a
    clash), made the way the service's flat graph is: every path set and in by_path
    (no index_leaves), as the strings a builder formats."""
    g = ResourceGraph()
    root = g.add_vertex("cluster", "cluster", "cluster0", 0)
    g.set_path(root, CONTAINMENT, "/cluster0")
    g.roots[CONTAINMENT] = root
    for n in range(2):
        node = g.add_vertex("node", "node", f"node{n}", n, rank=n)
        g.set_path(node, CONTAINMENT, f"/cluster0/node{n}")
        g.add_edge(root, node)
        kids = [("core", 0), ("core", 1), ("gpu", 0)] + ([("core", 0)] if n else [])
        for type_, i in kids:
            v = g.add_vertex(type_, type_, f"{type_}{i}", i, rank=n)
            g.set_path(v, CONTAINMENT, f"/cluster0/node{n}/{type_}{i}")
            g.add_edge(node, v)
    return g


def test_compacted_leaves_keep_their_paths_and_lookups() -> None:
    g = built_by_hand()
    before = {v.uniq_id: v.path for v in g.vertices}
    count = g.path_count()
    g.compact_paths()
    # the leaves alone at their paths left by_path and keep no string: 5 of the 6
    # leaves with a path of their own (node1's two core0 share theirs: they stay listed)
    assert len(g.by_path) == count - 5 and g.leaf_paths == 5
    assert sum(v._path is None for v in g.vertices) == 5
    assert {v.uniq_id: v.path for v in g.vertices} == before
    assert g.path_count() == count
    check_index(g)
    # a new vertex at a compacted leaf's path: both are found under it
    leaf = g.lookup("/cluster0/node0/core1")[0]
    extra = g.add_vertex("core", "core", "core1", 1)
    g.set_path(extra, CONTAINMENT, "/cluster0/node0/core1")
    assert {v.uniq_id for v in g.lookup(leaf.path)} == {leaf.uniq_id, extra.uniq_id}
    assert g.path_count() == count
    # a parent given another path: its compacted children keep theirs
    node1 = g.lookup("/cluster0/node1")[0]
    gpu = g.lookup("/cluster0/node1/gpu0")[0]
    node1.path = "/elsewhere/node1"
    assert gpu.path == "/cluster0/node1/gpu0"
    # a compacted leaf removed: its path goes, the vertex keeps it
    core = g.lookup("/cluster0/node0/core0")[0]
    g.remove_vertex(core)
    assert g.lookup("/cluster0/node0/core0") == [] and core.path == "/cluster0/node0/core0"
    assert g.path_count() == count - 1
