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

The same union's counts are what prunes an or-slot walk: ``prime_jobspec`` of the
flexible traverser sums a level's requests as the plain one does, but lowers each type
to an or-slot's count when smaller, and drops to 0 a type the level has so far that
the slot lacks. So the order of the alternatives decides whether a type one of them
lacks can prune (last test).

Expected outputs are Fluxion v0.54.0's (tests/scheduler/data/labels/README.md, and
pasted below with their command).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.rq_run import framed_match, no_match, rq

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


# Two nodes of four cores and a GPU; both GPUs taken first (GPUS), then a cluster with a
# node of two or-slots, "small" (2 cores, a GPU) and "big" (3 cores), in either order.
# `gpu` is a leaf type no filter names, tracked at the cluster (prime_pruning_filter).
# small then big: the GPU drops to 0 when big comes, nothing prunes, big fits on node1;
# big then small: the GPU comes last and stays 1, so the cluster's filter (no GPU free)
# prunes the walk. Fluxion v0.54.0, 2026-11-29:
#   resource-query -L g.json -f rv1exec -T flexible -P first -F simple -d -t OUT
# with "match allocate gpus.json", "match allocate ORDER.json", "quit".
GPU_GRAPH = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}],
    "nodelist": ["node[0-1]"], "starttime": 0, "expiration": 0}}
GPUS = {"version": 9999,
        "resources": [{"type": "slot", "count": 2, "label": "default",
                       "with": [{"type": "gpu", "count": 1}]}],
        "tasks": [{"command": ["app"], "slot": "default", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 3600}}}
GPUS_TAKEN = framed_match("""\
      ---------gpu0[1:x]
      ------node0[1:s]
      ---------gpu0[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
""", 1)
ORDERS = {
    "small_big": GPUS_TAKEN + framed_match("""\
      ---------core1[1:x]
      ---------core2[1:x]
      ---------core3[1:x]
      ------node1[1:s]
      ---cluster0[1:s]
""", 2),
    "big_small": GPUS_TAKEN + no_match(2),
}


def _small_and_big(order: str) -> dict:
    small = {"type": "slot", "count": 1, "label": "small",
             "with": [{"type": "core", "count": 2}, {"type": "gpu", "count": 1}]}
    big = {"type": "slot", "count": 1, "label": "big",
           "with": [{"type": "core", "count": 3}]}
    slots = [small, big] if order == "small_big" else [big, small]
    return {"version": 9999,
            "resources": [{"type": "cluster", "count": 1,
                           "with": [{"type": "node", "count": 1, "with": slots}]}],
            "tasks": [{"command": ["app"], "slot": "small", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": 3600}}}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_an_or_slot_lacking_a_type_stops_it_pruning_only_when_it_comes_later(tmp_path, order):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(GPU_GRAPH))
    (tmp_path / "gpus.json").write_text(json.dumps(GPUS))
    (tmp_path / "order.json").write_text(json.dumps(_small_and_big(order)))
    out, err, rc = rq(tmp_path, graph,
                      f"match allocate {tmp_path / 'gpus.json'}\n"
                      f"match allocate {tmp_path / 'order.json'}\nquit\n",
                      "-f", "rv1exec", "-T", "flexible", "-P", "first", "-F", "simple")
    assert (out, err, rc) == (ORDERS[order], "", 0)
