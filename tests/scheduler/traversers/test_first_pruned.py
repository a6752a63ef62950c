"""The first-match walk's memory of pruned vertices (``FastTraverser._pruned``).

A child the first-match walk turns down at once is turned down again without its walk
until an update or release walk, or a status change, touches it. The oracle is the plain
``Traverser``, which walks every child every time: on random streams of allocations,
cancels and vertices going down and up, both give the same placements, the same visit
counts (Fluxion's preorder/postorder) and the same errno. Derandomized
(support.fuzz.PROFILE): hypothesis prints the falsifying stream.
"""

from __future__ import annotations

from fluxnode.scheduler.policies.policy import Policy
from fluxnode.scheduler.readers.grug import read_grug
from fluxnode.scheduler.traversers.dfu import NoMatch, Traverser
from fluxnode.scheduler.traversers.dfu_fast import FastTraverser
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fuzz import EXAMPLES, PROFILE
from support.sched_graphs import grug_recipe, jobspec

# c0 > node[6] > socket[2] > core[2]
GRUG = grug_recipe("c", ("cluster", "node", 6), ("node", "socket", 2),
                   ("socket", "core", 2, 1))


def _slot(n: int, with_: list) -> dict:
    return {"type": "slot", "count": n, "label": "default", "with": with_}


REQUESTS = [
    jobspec([_slot(1, [{"type": "core", "count": 1}])]),
    jobspec([_slot(1, [{"type": "core", "count": 3}])]),
    jobspec([{"type": "node", "count": 1, "exclusive": True,
              "with": [_slot(1, [{"type": "core", "count": 2}])]}]),
    jobspec([{"type": "node", "count": 2, "with": [
        _slot(1, [{"type": "socket", "count": 1, "with": [{"type": "core", "count": 1}]}])]}]),
    jobspec([_slot(1, [{"type": "core", "count": 1}])], duration=60),
    # non-exclusive nodes under an exclusive cluster
    jobspec([{"type": "cluster", "count": 1, "exclusive": True, "with": [
        {"type": "node", "count": 1, "exclusive": False,
         "with": [_slot(1, [{"type": "core", "count": 1}])]}]}]),
]
STEP = st.one_of(
    st.tuples(st.just("alloc"), st.integers(0, len(REQUESTS) - 1), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 1000), st.booleans()),
    st.tuples(st.just("toggle"), st.integers(0, 1000), st.booleans()),
)


def _outcome(t: Traverser, js: dict, jobid: int, reserve: bool):
    try:
        res = t.match(js, "allocate_orelse_reserve" if reserve else "allocate", jobid=jobid)
        got = (res.status, res.at, [(e.vertex.uniq_id, e.needs, e.exclusive)
                                    for e in res.selection])
    except NoMatch as exc:
        got = ("no match", type(exc).__name__)
    return got, t.preorder, t.postorder, t.errno


@settings(PROFILE, max_examples=max(EXAMPLES, 300))
@given(policy=st.sampled_from(["first", "firstnodex"]),
       steps=st.lists(STEP, min_size=1, max_size=60))
def test_the_kept_prunes_change_nothing_but_the_time(tmp_path_factory, policy, steps):
    path = tmp_path_factory.mktemp("g") / "g.graphml"
    path.write_text(GRUG)
    fast = FastTraverser(read_grug(str(path)), Policy.parse(policy))
    plain = Traverser(read_grug(str(path)), Policy.parse(policy))
    live: list[int] = []
    jobid = 0
    for kind, n, flag in steps:
        if kind == "cancel":
            if live:
                j = live.pop(n % len(live))
                for t in (fast, plain):
                    t.cancel(j)
            continue
        if kind == "toggle":
            vs = [v for v in fast.g.vertices if v.parent is not None and v.type != "core"]
            v = vs[n % len(vs)]
            status = "up" if v.status == "down" else "down"
            for t in (fast, plain):
                t.set_status(v.path, status)
            continue
        jobid += 1
        got = _outcome(fast, REQUESTS[n], jobid, flag)
        assert got == _outcome(plain, REQUESTS[n], jobid, flag), (jobid, n, flag)
        if got[0][0] != "no match":
            live.append(jobid)


def test_a_full_graph_churns_as_the_plain_walk(tmp_path):
    """The case the memory is for, written out: every node taken whole, then one job
    cancelled and one core asked for, again and again, with a node going down and up
    between. The freed node was remembered as pruned; forgetting it is what lets the
    next match find it."""
    path = tmp_path / "g.graphml"
    path.write_text(GRUG)
    fast = FastTraverser(read_grug(str(path)), Policy.parse("firstnodex"))
    plain = Traverser(read_grug(str(path)), Policy.parse("firstnodex"))
    core = REQUESTS[0]
    for jobid in range(1, 8):  # 6 nodes: the 7th finds none
        assert _outcome(fast, core, jobid, False) == _outcome(plain, core, jobid, False)
    jobid = 7
    for victim in (3, 1, 8, 5, 10, 2):
        for t in (fast, plain):
            t.cancel(victim)
        if victim == 5:
            for status in ("down", "up"):
                for t in (fast, plain):
                    t.set_status("/c0/node2", status)
        jobid += 1
        got = _outcome(fast, core, jobid, False)
        assert got == _outcome(plain, core, jobid, False), victim
        assert got[0][0] == "ALLOCATED", victim  # the freed node, found
