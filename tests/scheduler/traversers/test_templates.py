"""The walk's template shortcut (an untouched leaf parent replayed from the walk of another
of its shape) must leave what the walk leaves, in fast and in exact mode.

In Fluxion's multi-tier storage graph (t3021, mtl3.graphml) a storage unit hangs under its
rack and, by a second containment edge, under the tier above it. A match walks it once
per parent: the rack's request does not name it (the test fails and the unit stays
unvisited), the storage request does and takes its ssds. A template that marked every
replayed unit visited hid the second walk, so the fifth match failed once the first unit
was full. Fluxion's expected output for cmds02 (8 matches, the 9th fails) is the oracle.
"""

from __future__ import annotations

import pytest
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from support.paths import SHARED

DATA = SHARED / "fluxion-corpus" / "data" / "resource"
GRAPH = DATA / "grugs" / "mt-storage" / "mtl3.graphml"
JOB = DATA / "jobspecs" / "mt-storage" / "L3" / "test002.yaml"


@pytest.mark.parametrize("cls", [Traverser, FastTraverser])
@pytest.mark.parametrize("stable", [False, True])
def test_a_unit_left_by_one_parents_walk_is_walked_again_under_the_other(cls, stable):
    if not GRAPH.exists():
        pytest.skip(f"Fluxion's corpus not found at {DATA}")
    t = cls(read_grug(GRAPH), Policy.parse("high", stable_ties=stable))
    job = Jobspec.parse(JOB.read_bytes())
    units = []
    for _ in range(8):
        res = t.match(job)
        units += [e.vertex.name for e in res.selection if e.vertex.type == "mtl1unit"]
    # Fluxion's 002.R.out: four matches in mtl1unit1, then four in mtl1unit0
    assert units == ["mtl1unit1"] * 4 + ["mtl1unit0"] * 4
    with pytest.raises(NoMatch):
        t.match(job)
