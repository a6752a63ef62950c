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
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from support.rq_run import rq
from support.sched_graphs import grug_recipe, jobspec

# flat0 > node[8] > core[2]
GRUG = grug_recipe("flat", ("cluster", "node", 8), ("node", "core", 2))

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


# deep0 > node[3] > socket[2] > core[4] + gpu[1]
DEEP_GRUG = grug_recipe("deep", ("cluster", "node", 3), ("node", "socket", 2),
                        ("socket", "core", 4, 1), ("socket", "gpu", 1, 1))


def _slot(n: int, with_: list) -> dict:
    return {"type": "slot", "count": n, "label": "default", "with": with_}


REQUESTS = {
    "core": jobspec([_slot(1, [{"type": "core", "count": 1}])]),
    "core+gpu": jobspec([_slot(1, [{"type": "core", "count": 1}, {"type": "gpu", "count": 1}])]),
    "node>core": jobspec([{"type": "node", "count": 1, "with": [
        _slot(1, [{"type": "socket", "count": 1, "with": [{"type": "core", "count": 2}]}])]}]),
    "node-x": jobspec([{"type": "node", "count": 1, "exclusive": True,
                        "with": [_slot(2, [{"type": "core", "count": 1}])]}]),
    "sockets": jobspec([{"type": "socket", "count": 2, "with": [
        _slot(1, [{"type": "core", "count": 1}])]}]),
}

# where the classes sit: every layout puts some below a node, where the walk's
# shortcuts (leaves scored in line, templates) must give way to the plain walk
LAYOUTS = {
    "nodes": lambda v: {"node0": "2", "node1": "0", "node2": "1"}.get(v.name),
    "cores": lambda v: "0" if v.path.endswith(("node1/socket1/core3", "node2/socket0/core2"))
    else None,
    "sockets": lambda v: "1" if v.type == "socket" and v.path.endswith("node2/socket1") else None,
    "gpu": lambda v: "0" if v.type == "gpu" and v.path.endswith("node1/socket1/gpu0") else None,
    "late": lambda v: None,  # set after the first matches (set_property), below
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("shape", sorted(REQUESTS))
def test_fast_mode_takes_what_the_plain_walk_takes(tmp_path, layout, shape):
    """Fast mode (root index, leaves in line, templates) against the plain walk with
    the same tie rule, match after match until the graph is full: the shortcuts must
    change nothing where a perf_class sits below a vertex."""
    g = tmp_path / "deep.graphml"
    g.write_text(DEEP_GRUG)

    def build(cls):
        t = cls(read_grug(str(g)), Policy.parse("variation", stable_ties=True))
        for v in t.g.vertices:
            pc = LAYOUTS[layout](v)
            if pc is not None:
                t.set_property(v, "perf_class", pc)
        return t

    fast, plain = build(FastTraverser), build(Traverser)
    late = [v.path for v in fast.g.vertices if v.type == "core" and v.id == 3]
    for n in range(1, 40):
        if layout == "late" and n == 3:  # classes arrive after matches were kept
            for t in (fast, plain):
                by_path = {v.path: v for v in t.g.vertices}
                for path in late:
                    t.set_property(by_path[path], "perf_class", "0")
        got = []
        for t in (fast, plain):
            try:
                res = t.match(REQUESTS[shape], jobid=n)
                got.append([(e.vertex.path, e.needs) for e in res.selection])
            except NoMatch:
                got.append(None)
        assert got[0] == got[1], (n, got)
        if got[0] is None:
            break
    else:
        pytest.fail("the graph never filled")
