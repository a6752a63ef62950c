"""Subtree filters (the multi-planners that prune a match) under gangs, jobs, cancels.

An update walk gives the fresh vertices of one job that have the same totals and the
same counts below them one shared filter (PlannerMulti.share): a gang's nodes hold one.
A later job on one of them copies it first, a cancel drops it. If a change went through
the shared one, every other holder would report the change too; if a drop lost a span,
a vertex would report free cores that a job holds. The oracle here is a ledger kept
from the matches' selections alone: which cores each live job holds. (Only a walk that
marks KIT_MIN_MARKS edges shares: the first job of each stream is a gang that big.)
"""

from __future__ import annotations

import random

import pytest
from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.readers.rv1 import read_rv1
from fluxnode.scheduler.traversers.dfu import NoMatch
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from support import seeds
from support.sched_graphs import cores, jobspec


def _graph(kind: str, tiny_grug):
    if kind == "sockets":  # 4 nodes of 2 sockets of 4 cores, a GPU and memory
        rack_nodes = '<edge id="e2" source="rack" target="node"><data key="id_scope">1</data>' \
            '<data key="multi_scale">'
        text = tiny_grug.read_text()
        assert text.count(rack_nodes + "2<") == 1
        tiny_grug.write_text(text.replace(rack_nodes + "2<", rack_nodes + "4<"))
        return read_grug(tiny_grug)
    R = {"version": 1, "execution": {  # 6 ranked nodes of 8 cores and 2 GPUs
        "R_lite": [{"rank": "0-5", "children": {"core": "0-7", "gpu": "0-1"}}],
        "nodelist": ["n[0-5]"], "starttime": 0, "expiration": 0}}
    return read_rv1(R)


def _gang(kind: str, nodes: int, per: int) -> dict:
    below = [{"type": "core", "count": per}]
    if kind == "sockets":
        below = [{"type": "socket", "count": 1, "with": below}]
    return jobspec([{"type": "node", "count": nodes, "with": [
        {"type": "slot", "count": 1, "label": "task", "with": below}]}])


def _cores_below(v) -> set[int]:
    out, todo = set(), [v]
    while todo:
        u = todo.pop()
        if u.type == "core":
            out.add(u.uniq_id)
        todo.extend(u.children)
    return out


@pytest.mark.parametrize("kind", ["sockets", "rv1"])
@pytest.mark.parametrize("policy", ["first", "low", "lonode", "high"])
def test_every_subtree_filter_counts_what_the_live_jobs_hold(kind, policy, tiny_grug):
    """After every allocation, cancel and partial cancel of a random stream of gangs,
    whole nodes and single-core jobs, no core is given to two live jobs, each vertex's
    filter reports as used exactly the cores the live jobs' selections hold below it,
    and the vertices of one gang that no later job touched hold one filter between
    them (the nodes and sockets of a gang also share their x_checker and containers:
    a whole node given where a gang holds a core would show in the ledger)."""
    seed = seeds.choose("test_every_subtree_filter_counts_what_the_live_jobs_hold")
    rng = random.Random(seed)
    t = FastTraverser(_graph(kind, tiny_grug), Policy.parse(policy, stable_ties=True))
    inner = [v for v in t.g.walk() if v.children]
    below = {v.uniq_id: _cores_below(v) for v in inner}
    rank_of = {}
    for v in t.g.walk():
        if v.type == "node":
            for cid in _cores_below(v):
                rank_of[cid] = v.rank
    held: dict[int, set[int]] = {}  # live job -> the cores its selections took
    shared_seen = False
    nodes = sum(1 for v in t.g.walk() if v.type == "node")
    for jobid in range(1, 81):
        roll = rng.random()
        if held and roll < 0.25:
            gone = rng.choice(sorted(held))
            t.cancel(gone)
            del held[gone]
        elif held and roll < 0.35 and kind == "rv1":
            job = rng.choice(sorted(held))
            ranks = sorted({rank_of[c] for c in held[job]})
            drop = rng.sample(ranks, rng.randint(1, len(ranks)))
            if t.partial_cancel(job, drop):
                assert all(rank_of[c] in drop for c in held[job]), seed
                del held[job]
            else:
                held[job] = {c for c in held[job] if rank_of[c] not in drop}
        roll = rng.random()
        if jobid == 1:  # the first on a fresh graph: a gang big enough to share kits
            spec = _gang(kind, nodes, 3)  # (marks KIT_MIN_MARKS edges or more)
        elif roll < 0.5:
            spec = _gang(kind, rng.randint(2, nodes), rng.randint(1, 3))
        elif roll < 0.65:  # a whole node: refused where a gang holds a core
            spec = jobspec([{"type": "node", "count": 1, "exclusive": True, "with": [
                {"type": "slot", "count": 1, "label": "task",
                 "with": [{"type": "core", "count": 1}]}]}])
        else:
            spec = cores(rng.randint(1, 3))
        try:
            res = t.match(spec, jobid=jobid)
        except NoMatch:
            continue
        got = {e.vertex.uniq_id for e in res.selection if e.vertex.type == "core"}
        assert all(not (got & mine) for mine in held.values()), (seed, jobid)
        held[jobid] = got
        tagged = [v for v in inner if v.subplan is not None]
        shared_seen |= len({id(v.subplan) for v in tagged}) < len(tagged)
        for v in inner:
            filt = t.agfilter(v) or {}
            if "core" not in filt:
                continue
            used = sum(len(below[v.uniq_id] & mine) for mine in held.values())
            assert filt["core"] == f"used:{used}, total:{len(below[v.uniq_id])}", \
                (seed, jobid, v.path)
    assert shared_seen, seed  # the stream did exercise shared filters
