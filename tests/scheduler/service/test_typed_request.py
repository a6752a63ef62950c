"""A request of typed slot kinds (the binder's) matches as the RFC 14 jobspec of the same
kinds does (the jobspec parser is the oracle: a separate path to the request tree), its
`ranks` leave out what a hostlist constraint would, and its answer names each slot."""

import random

import pytest
from fluxnode.broker_conf import hostlist
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.live_graph import HORIZON, LiveGraph
from fluxnode.scheduler.service.request import AllocRequest
from fluxnode.scheduler.service.slot_kinds import kind_jobspec


def graph(n=4, gpus=0):
    """A graph whose planner clock stands still (twin graphs compared step by step must see
    the same time; a reservation's start depends on when what it waits for began)."""
    return LiveGraph(build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                            gpus=list(range(gpus)), memory_mib=4096)
                              for i in range(n)]), epoch=0, clock=lambda: 0.0)


def typed(kinds, ranks=None, policy="first", op="allocate"):
    return AllocRequest(kinds=tuple(kinds), ranks=ranks, policy=policy, op=op)


def as_jobspec(kinds, allowed=None, policy="first", op="allocate"):
    """The same request as an RFC 14 jobspec (the binder's wire form before typed kinds)."""
    constraints = None
    if allowed is not None:
        constraints = {"hostlist": [hostlist.encode(f"sim{i}" for i in allowed)]}
    return AllocRequest(jobspec=build_jobspec(list(kinds), constraints=constraints,
                                              duration=HORIZON), policy=policy, op=op)


@pytest.mark.parametrize("kind", [SlotKind(1), SlotKind(2, 1, 512, 3), SlotKind(0, 0, 100, 2)])
def test_a_typed_kind_is_the_request_tree_of_its_parsed_jobspec(kind):
    parsed = Jobspec.parse(build_jobspec([kind], constraints={"hostlist": ["sim[0-2]"]},
                                         duration=HORIZON))
    made = kind_jobspec(kind, "s0", HORIZON, parsed.constraints)
    assert (made.resources, made.tasks, made.duration, made.constraints) == (
        parsed.resources, parsed.tasks, parsed.duration, parsed.constraints)
    assert made.to_dict() == parsed.to_dict()


def outcome(g, jobid, request):
    try:
        p = g.allocate(jobid, request)
    except (Busy, Unsatisfiable) as exc:
        return type(exc).__name__, str(exc)
    return p.status, p.at, [(n.hostname, n.cores, n.gpus, n.memory_mib) for n in p.nodes]


@pytest.mark.parametrize("seed", range(6))
def test_typed_requests_place_as_their_jobspecs_do(seed):
    """Step by step on twin graphs: the typed request (its `ranks` leaving out some nodes,
    some of them drained on both graphs) and its jobspec (a hostlist constraint naming
    the allowed nodes) give the same placement, refusal and message, and never a node
    `ranks` leaves out or a drained one."""
    rng = random.Random(seed)
    fast, exact = graph(10, gpus=1), graph(10, gpus=1)
    live, seen = [], set()
    drained: set[int] = set()
    for jobid in range(1, 120):
        if live and rng.random() < 0.3:
            gone = live.pop(rng.randrange(len(live)))
            fast.cancel(gone)
            exact.cancel(gone)
            continue
        if rng.random() < 0.1:
            drained = set(rng.sample(range(10), rng.choice([0, 1, 2])))
            fast.set_down(set(), drained)
            exact.set_down(set(), drained)
        allowed = sorted(rng.sample(range(10), rng.choice([10, 9, 8, 7, 3])))
        kinds = [SlotKind(rng.choice([1, 2, 3]), rng.choice([0, 0, 1]), rng.choice([0, 300]),
                          rng.choice([1, 2, 4])) for _ in range(rng.choice([1, 1, 2]))]
        if len(kinds) == 2 and kinds[0] == kinds[1]:
            kinds.pop()
        policy = rng.choice(["first", "lonode", "low", "hinode", "high"])
        op = rng.choice(["allocate", "allocate_orelse_reserve"])  # the binder's usual op
        ranks = ",".join(map(str, allowed))
        got = outcome(fast, jobid, typed(kinds, ranks, policy, op))
        if set(range(10)) - set(allowed) <= drained:
            # what `ranks` leaves out is drained anyway: as without `ranks` (busy, not
            # unsatisfiable, when only the drained nodes would do)
            want = outcome(exact, jobid, as_jobspec(kinds, None, policy, op))
        else:
            want = outcome(exact, jobid, as_jobspec(kinds, allowed, policy, op))
        assert got == want, (jobid, allowed, drained, kinds, policy, op)
        seen.add(got[0])
        if got[0] in ("ALLOCATED", "RESERVED"):
            hosts = {h for h, *_ in got[2]}
            assert hosts <= {f"sim{i}" for i in allowed}
            if got[0] == "ALLOCATED":
                assert not hosts & {f"sim{i}" for i in drained}
            live.append(jobid)
    assert {"ALLOCATED", "Busy"} <= seen


def test_ranks_that_leave_out_only_drained_nodes_need_no_constraint():
    """Flux's drain (flux-resource(1)): a request that would fit if the drained nodes were
    up is busy, not unsatisfiable. The binder's `ranks` leave out the nodes Kubernetes will
    not schedule on, which it drains; such a request is busy, as without `ranks`."""
    g = graph(4)
    g.set_down(set(), {2, 3})
    big = [SlotKind(4, count=3)]  # three whole nodes: only two are undrained
    with pytest.raises(Busy):
        g.allocate(1, typed(big, "0-1"))
    g.set_down(set(), {3})  # node 2 back, still left out by `ranks`: the constraint says
    with pytest.raises(Unsatisfiable):
        g.allocate(2, typed(big, "0-1"))
    assert g.allocate(3, typed(big, "0-2")).status == "ALLOCATED"


def test_each_slot_is_one_of_its_kind_and_the_slots_make_up_the_allocation():
    g = graph(3, gpus=2)
    kinds = (SlotKind(1, 0, 0, 3), SlotKind(2, 1, 1000, 2), SlotKind(1, 0, 2000, 1))
    p = g.allocate(1, typed(kinds))
    assert p.kinds == kinds
    per_kind = {}
    for s in p.slots:
        per_kind.setdefault(s.kind, []).append(s.share)
        k = kinds[s.kind]
        assert (len(s.share.cores), len(s.share.gpus)) == (k.cores, k.gpus)
        assert s.share.memory_mib >= k.memory_mib  # whole 32 MiB granules
        assert s.share.memory_mib - k.memory_mib < 32
    assert {i: len(v) for i, v in per_kind.items()} == {0: 3, 1: 2, 2: 1}
    for node in p.nodes:  # disjoint slots whose ids and memory add up to the node's share
        mine = [s.share for s in p.slots if s.share.rank == node.rank]
        cores = [c for s in mine for c in s.cores]
        assert sorted(cores) == list(node.cores) and len(set(cores)) == len(cores)
        assert sorted(g for s in mine for g in s.gpus) == list(node.gpus)
        assert sum(s.memory_mib for s in mine) == node.memory_mib


def test_ranks_leaving_out_every_node_or_a_grown_one_place_nothing_there():
    small = build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                   memory_mib=4096) for i in range(2)])
    g = LiveGraph(small)
    with pytest.raises(Unsatisfiable):
        g.allocate(1, typed([SlotKind(1)], ranks="5-6"))
    with pytest.raises(InvalidRequest, match="ranks"):
        g.allocate(2, typed([SlotKind(1)], ranks="1-"))
    assert g._exclusion("0-1") is None  # names every node: no constraint
    bigger = build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                    memory_mib=4096) for i in range(3)])
    assert g.grow(bigger) == [2]
    placed = [g.allocate(i, typed([SlotKind(1)], ranks="0-1", policy="lonode"))
              for i in range(3, 11)]
    assert {n.hostname for p in placed for n in p.nodes} == {"sim0", "sim1"}
    with pytest.raises(Busy):  # sim2 joined after the caller looked: not its to use
        g.allocate(11, typed([SlotKind(1)], ranks="0-1"))


def test_nodes_down_already_stay_down_after_a_match_that_left_them_out():
    g = graph(4)
    g.set_down({2})
    placed = g.allocate(1, typed([SlotKind(1)], ranks="0-1", policy="lonode"))
    assert {n.hostname for n in placed.nodes} <= {"sim0", "sim1"}

    def status(rank):
        return min(g._traverser.g.by_rank[rank], key=lambda v: len(v.path)).status

    assert [status(r) for r in range(4)] == ["up", "up", "down", "up"]
    # and what fits only on the nodes left out is busy/unsatisfiable as with the constraint
    with pytest.raises(Unsatisfiable):
        g.allocate(2, typed([SlotKind(1, 0, 0, 9)], ranks="0-1", policy="lonode"))
    assert [status(r) for r in range(4)] == ["up", "up", "down", "up"]
