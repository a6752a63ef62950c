"""Labels of requests of one type that meet on a vertex (issue 35).

Fluxion's select walk writes a request's label on each vertex of its type that it
completes (dfu_impl_t::dom_dfv, into the vertex's ephemeral store), and the JGF writers
show it. Two labelled requests of one type can reach one vertex only through
``-T flexible``'s or-slots: the plain traverser refuses same-type siblings before it
labels anything (``test``: "siblings in jobspec request same resource type"). The
flexible traverser's ``dom_slot`` walks the or-slots' children as one list with one
request per type (its ``pre_union``): of a type's alternatives, the first with the
largest ``count.min`` -- not the largest count a range allows. That request's count
decides where a first-match walk stops, and its label is the one every vertex of the
type it completes keeps, whichever slot shape then wins.

Expected outputs are Fluxion v0.54.0's (tests/scheduler/data/labels/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.rq_run import rq

DATA = Path(__file__).parent / "data" / "labels"
# two nodes of four cores each (the rv1exec reader: cluster0 -> node -> core)
GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}],
    "nodelist": ["node[0-1]"], "starttime": 0, "expiration": 0}}


def _range(most: int) -> dict:
    return {"min": 1, "max": most, "operator": "+", "operand": 1}


def _or_slots(count_a, count_b) -> dict:
    """A node with two or-slots, one of cores labelled ``a``, one labelled ``b``."""
    def slot(label, count, core_label):
        return {"type": "slot", "count": 1, "label": label,
                "with": [{"type": "core", "count": count, "label": core_label}]}
    return {"version": 9999,
            "resources": [{"type": "node", "count": 1,
                           "with": [slot("s1", count_a, "a"), slot("s2", count_b, "b")]}],
            "tasks": [{"command": ["app"], "slot": "s1", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": 3600}}}


CASES = {
    # equal count.min: the first alternative is kept (its label on all six cores)
    "eq": _or_slots(2, 2),
    # 1..4 cores beside exactly 2: count.min 1 < 2, so the union takes b's 2 cores;
    # taking the range (its effective max, 4) found no slot under first
    "rng": _or_slots(_range(4), 2),
    # 2 beside 1..9: a's 2 is kept (count.min 2 > 1), label a
    "rng2": _or_slots(2, _range(9)),
}


@pytest.mark.parametrize("policy", ["first", "low"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_or_slots_of_one_type_explore_the_largest_minimum(tmp_path, case, policy):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GRAPH))
    spec = tmp_path / f"{case}.json"
    spec.write_text(json.dumps(CASES[case]))
    out, err, rc = rq(tmp_path, graph, f"match allocate {spec}\n" * 3 + "quit\n",
                      "-f", "rv1exec", "-T", "flexible", "-P", policy, "-F", "jgf")
    assert rc == 0
    assert out == (DATA / f"or_{case}.{policy}.out").read_text()
    assert err == (DATA / f"or_{case}.{policy}.err").read_text()
