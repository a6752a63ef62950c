"""LiveGraph remembers parsed jobspecs that differ only in their name (the binder's)."""

import dataclasses
import random

import pytest
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.service.errors import Busy, InvalidRequest, Unsatisfiable
from fluxnode.scheduler.service.live_graph import HORIZON, PARSE_CACHE, LiveGraph


def graph(n=4):
    return LiveGraph(build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                            memory_mib=4096) for i in range(n)]))


def fresh(jobspec):
    """What the graph parsed before it remembered anything."""
    spec = Jobspec.parse(jobspec)
    if not spec.duration:
        system = {**(spec.attributes.get("system") or {}), "duration": HORIZON}
        spec = dataclasses.replace(spec, duration=HORIZON,
                                   attributes={**spec.attributes, "system": system})
    return spec, spec.to_dict()


ONE = (SlotKind(1, 0, 0, 1),)


def group(name, kinds=ONE, hosts="sim[0-2]"):
    """A binder's jobspec (by default constrained to 3 of the 4 nodes: a real filter)."""
    return build_jobspec(list(kinds), constraints={"hostlist": [hosts]}, name=name)


@pytest.mark.parametrize("kinds", [(SlotKind(1, 0, 0, 1),),
                                   (SlotKind(1, 0, 0, 2), SlotKind(2, 0, 512, 1))])
def test_a_remembered_parse_equals_a_fresh_one_with_its_own_name(kinds):
    g = graph()
    for name in ("default/pod/a", "default/pod/b", "other/group/c", "default/pod/a"):
        assert g._parse(group(name, kinds))[:2] == fresh(group(name, kinds))
    assert len(g._parsed) == 1  # one entry for the four
    # a different constraint or shape is another entry
    g._parse(build_jobspec(list(kinds), constraints={"hostlist": ["sim[0-1]"]}, name="x"))
    assert len(g._parsed) == 2


def test_the_cached_mappings_are_not_shared_along_the_name():
    g = graph()
    _, a, _ = g._parse(group("a"))
    _, b, _ = g._parse(group("b"))
    assert a["attributes"]["system"]["job"] == {"name": "a"}
    assert b["attributes"]["system"]["job"] == {"name": "b"}


def test_jobspecs_without_a_plain_name_and_text_jobspecs_parse_as_before():
    g = graph()
    no_name = build_jobspec([SlotKind(1)])
    assert g._parse(no_name)[:2] == fresh(no_name)
    odd = build_jobspec([SlotKind(1)])
    odd["attributes"]["system"]["job"] = {"name": "n", "queue": "q"}
    assert g._parse(odd)[:2] == fresh(odd)
    text = (
        "version: 1\nresources: [{type: slot, count: 1, label: s0, with: [{type: core, count: 1}]}]"
        "\ntasks: [{command: [x], slot: s0, count: {per_slot: 1}}]\nattributes: {system: {}}\n"
    )
    assert g._parse(text)[:2] == fresh(text) and g._parse(text)[:2] == fresh(text)
    with pytest.raises(InvalidRequest, match="tasks"):
        g._parse(text.replace("tasks:", "tusks:"))


def test_a_bad_jobspec_is_refused_every_time_and_never_remembered():
    g = graph()
    bad = group("a")
    bad["resources"][0]["count"] = -1
    for _ in range(2):
        with pytest.raises(InvalidRequest, match=r"resources\[0\]\.count"):
            g._parse(bad)
    assert not g._parsed
    # a name that is not a string is not blanked: parsed as it is
    odd_name = group("a")
    odd_name["attributes"]["system"]["job"]["name"] = 7
    assert g._parse(odd_name)[:2] == fresh(odd_name)


def test_the_cache_is_bounded_and_follows_the_limits():
    g = graph()
    for i in range(PARSE_CACHE + 10):
        g._parse(build_jobspec([SlotKind(1, 0, 0, 1 + i)], name="x"))
    assert len(g._parsed) == PARSE_CACHE
    spec = group("a", hosts="sim[0-1]")
    g._parse(spec)
    g.limits = dataclasses.replace(g.limits, max_nodes=5)  # stricter: parsed again, refused
    with pytest.raises(InvalidRequest):
        g._parse(spec)


def test_a_hostlist_naming_every_node_is_matched_without_the_constraint():
    g = graph(4)
    for hosts in ("sim[0-3]", "sim[0-3],other7", "sim[0-1],sim[2-3]"):
        spec, plain, _ = g._parse(group("a", hosts=hosts))
        assert spec.constraints is None  # it filters nothing (and would turn fast mode off)
        assert plain["attributes"]["system"]["constraints"] == {"hostlist": [hosts]}  # kept
    for hosts in ("sim[0-2]", "sim[1-3]", "other[0-3]"):
        spec, _, _ = g._parse(group("a", hosts=hosts))
        assert spec.constraints is not None and spec.constraints.op == "hostlist"
    # a subset stays a filter: no placement outside it, whatever the policy
    for policy in ("first", "lonode", "low", "hinode"):
        g2 = graph(4)
        placed = [g2.allocate(i, group(f"p{i}", hosts="sim[1-2]"), policy, "allocate")
                  for i in range(1, 9)]
        assert {n["hostname"] for p in placed for n in p.nodes} <= {"sim1", "sim2"}
        with pytest.raises(Busy):
            g2.allocate(9, group("p9", hosts="sim[1-2]"), policy, "allocate")


def test_a_grown_graph_forgets_which_hostlists_named_every_node():
    small = build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                   memory_mib=4096) for i in range(2)])
    g = LiveGraph(small)
    assert g._parse(group("a", hosts="sim[0-1]"))[0].constraints is None
    bigger = build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(4)),
                                    memory_mib=4096) for i in range(3)])
    assert g.grow(bigger) == [2]
    spec, _, _ = g._parse(group("a", hosts="sim[0-1]"))
    assert spec.constraints is not None  # sim2 is not in it: a filter now
    placed = [g.allocate(i, group(f"p{i}", hosts="sim[0-1]"), "lonode", "allocate")
              for i in range(1, 9)]
    assert {n["hostname"] for p in placed for n in p.nodes} <= {"sim0", "sim1"}


def test_allocations_through_the_cache_place_and_cancel_as_before():
    g = graph(2)
    placed = [g.allocate(i, group(f"p{i}"), "first", "allocate") for i in range(1, 9)]
    assert all(p.status == "ALLOCATED" for p in placed)
    assert [p.jobspec["attributes"]["system"]["job"]["name"] for p in placed] == [
        f"p{i}" for i in range(1, 9)]
    with pytest.raises(Busy):
        g.allocate(9, group("p9"), "first", "allocate")


def outcome(g, jobid, jobspec, policy, op="allocate"):
    try:
        p = g.allocate(jobid, jobspec, policy, op)
    except (Busy, Unsatisfiable) as exc:
        return type(exc).__name__, str(exc)
    return p.status, p.at, sorted((n["hostname"], n["cores"]) for n in p.nodes)


@pytest.mark.parametrize("seed", range(6))
def test_a_hostlist_leaving_out_a_few_nodes_places_as_the_constraint_does(seed):
    """Matched as down nodes (fast) or with the constraint (exact): the same outcome,
    placement, refusal and message, step by step, and never a node the hostlist leaves
    out."""
    rng = random.Random(seed)
    fast, exact = graph(10), graph(10)
    exact.excluded_as_down = 0  # always the constraint
    excluding = fast._match_excluding
    used = []

    def counted(*a):
        used.append(1)
        return excluding(*a)

    fast._match_excluding = counted
    live, ops = [], []
    for jobid in range(1, 120):
        if live and rng.random() < 0.3:
            gone = live.pop(rng.randrange(len(live)))
            fast.cancel(gone)
            exact.cancel(gone)
            continue
        allowed = sorted(rng.sample(range(10), rng.choice([10, 9, 8, 7, 3])))
        hosts = ",".join(f"sim{i}" for i in allowed)
        spec = group(f"p{jobid}", (SlotKind(rng.choice([1, 2, 3]), 0, 0, rng.choice([1, 2, 4])),),
                     hosts=hosts)
        policy = rng.choice(["first", "lonode", "low", "hinode", "high"])
        op = rng.choice(["allocate", "allocate_orelse_reserve"])  # the binder's usual op
        got = outcome(fast, jobid, spec, policy, op)
        assert got == outcome(exact, jobid, spec, policy, op), (jobid, hosts, policy, op)
        if got[0] in ("ALLOCATED", "RESERVED"):
            assert {h for h, _ in got[2]} <= {f"sim{i}" for i in allowed}
            live.append(jobid)
            ops.append(got[0])
    assert used  # the fast path was taken (hostlists leaving out 1-3 nodes)
    assert "RESERVED" in ops or seed > 2  # reservations were made with the constraint
    # every node marked down for a match was set back up in the traverser's graph
    for g in (fast, exact):
        assert all(min(vs, key=lambda v: len(v.path)).status == "up"
                   for vs in g._traverser.g.by_rank.values())


def test_nodes_down_already_stay_down_after_a_match_that_left_them_out():
    g = graph(4)
    g.set_down({2})
    placed = g.allocate(1, group("a", hosts="sim[0-1]"), "lonode", "allocate")
    assert {n["hostname"] for n in placed.nodes} <= {"sim0", "sim1"}

    def status(rank):
        return min(g._traverser.g.by_rank[rank], key=lambda v: len(v.path)).status

    assert [status(r) for r in range(4)] == ["up", "up", "down", "up"]
    # and what fits only on the nodes left out is busy/unsatisfiable as with the constraint
    with pytest.raises(Unsatisfiable):
        g.allocate(2, group("b", (SlotKind(1, 0, 0, 9),), hosts="sim[0-1]"), "lonode", "allocate")
    assert [status(r) for r in range(4)] == ["up", "up", "down", "up"]
