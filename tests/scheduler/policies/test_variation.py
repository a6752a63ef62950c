# ruff: noqa: E501  (GraphML lines)
"""The ``variation`` policy (Fluxion's ``var_aware_t``): vertices score by their
``perf_class`` property, lower first.

Fluxion reads the property with ``std::stoi`` and takes 9999 (the worst class) when it
is missing, has no number, or lies outside 0..9999 (dfu_match_var_aware.cpp). The node
orders below are Fluxion's own resource-query output (flux-sched v0.54.0-8, built
beside the project) for the same graph and commands.

The variation policy keeps walk outcomes like the other exhaustive policies (the
subtree cache; in fast mode the root index), so a property set after a match must
reach them: ``Traverser.set_property``.
"""

from __future__ import annotations

import re

import pytest
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from support.rq_run import rq
from support.sched_graphs import grug_document, jobspec

# flat0 > node[8] > core[2]
GRUG = grug_document("""  <graph id="flat" edgedefault="directed">
    <node id="cluster"><data key="root">1</data><data key="type">cluster</data><data key="basename">flat</data></node>
    <node id="node"><data key="type">node</data><data key="basename">node</data></node>
    <node id="core"><data key="type">core</data><data key="basename">core</data></node>
    <edge id="e1" source="cluster" target="node"><data key="multi_scale">8</data></edge>
    <edge id="e2" source="node" target="core"><data key="multi_scale">2</data></edge>
  </graph>
""")

# one node, exclusively, one core of it in the slot
NODE_X = jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [
    {"type": "slot", "count": 1, "label": "default", "with": [{"type": "core", "count": 1}]}]}])


@pytest.fixture
def files(tmp_path):
    import yaml

    g = tmp_path / "flat.graphml"
    g.write_text(GRUG)
    j = tmp_path / "node1x.yaml"
    j.write_text(yaml.safe_dump(NODE_X))
    return g, j


def _nodes(out: str) -> list[str]:
    """The node each match took, from rv1_nosched's nodelists."""
    return re.findall(r'"nodelist": \["(node\d+)"\]', out)


def test_perf_class_is_read_as_std_stoi(tmp_path, files):
    g, j = files
    values = ["12abc", "+5", "1e3", "0x1A", "1_0", "\u0663", "-0", "99999999999"]
    cmds = "".join(f"set-property /flat0/node{i} perf_class={v}\n" for i, v in enumerate(values))
    cmds += f"match allocate {j}\n" * 8
    out, err, rc = rq(tmp_path, g, cmds, "-P", "variation", "-F", "rv1_nosched")
    assert rc == 0, err
    # classes 12, 5, 1, 0, 1, 9999 (no ASCII digit), 0, 9999 (out of int's range)
    assert _nodes(out) == ["node3", "node6", "node2", "node4", "node1", "node0", "node5", "node7"]


def test_a_property_set_after_a_match_counts_in_exact_mode(tmp_path, files):
    g, j = files
    cmds = (f"match allocate {j}\n"
            "set-property /flat0/node5 perf_class=3\n"
            f"match allocate {j}\n"
            "set-property /flat0/node2 perf_class=1\n"
            "set-property /flat0/node6 perf_class=2\n"
            f"match allocate {j}\nmatch allocate {j}\n"
            "cancel 2\n"
            "set-property /flat0/node3 perf_class=0\n"
            f"match allocate {j}\nmatch allocate {j}\n")
    out, err, rc = rq(tmp_path, g, cmds, "-P", "variation", "-F", "rv1_nosched")
    assert rc == 0, err
    assert _nodes(out) == ["node0", "node5", "node2", "node6", "node3", "node5"]


def test_a_property_set_after_a_match_counts_in_fast_mode(tmp_path, files):
    g, _j = files
    t = FastTraverser(read_grug(str(g)), Policy.parse("variation", stable_ties=True))
    node = {v.name: v for v in t.g.vertices if v.type == "node"}
    classes = dict.fromkeys(node, 9999)
    free = set(node)

    def take() -> str:
        got = [e.vertex.name for e in t.match(NODE_X).selection if e.vertex.type == "node"]
        # the oracle: the best (lowest) class, the lowest id among equals (fast mode's ties)
        want = min(free, key=lambda n: (classes[n], int(n[4:])))
        assert got == [want]
        free.discard(want)
        return want

    def prop(name: str, pc: int) -> None:
        classes[name] = pc
        t.set_property(node[name], "perf_class", str(pc))

    assert take() == "node0"
    prop("node5", 3)
    assert take() == "node5"
    prop("node2", 1)
    prop("node6", 2)
    assert [take(), take()] == ["node2", "node6"]
    prop("node7", 0)
    prop("node1", 4)
    assert [take(), take(), take(), take()] == ["node7", "node1", "node3", "node4"]
