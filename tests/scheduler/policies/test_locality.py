"""locality's root choice (policies.locality): by runs of consecutive scores.

The runs here are computed by the test itself from the candidates' scores, not by
RunFloors. Fluxion's own picks on whole streams are in tests/scheduler/
test_resource_query.py (test_locality_*).
"""

from __future__ import annotations

from collections import Counter

from fluxnode.scheduler.policies.locality import RunFloors
from fluxnode.scheduler.policies.scoring import EGroup, Evals
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fuzz import PROFILE

# (score, units) per candidate group; scores crowd a small range so runs form and touch
GROUPS = st.lists(st.tuples(st.integers(2, 40), st.integers(1, 3)), min_size=1, max_size=60)


def run_of(scores: set[int]) -> dict[int, int]:
    """Each score -> the lowest score of its run of consecutive scores (the test's own)."""
    out = {}
    for s in scores:
        low = s
        while low - 1 in scores:
            low -= 1
        out[s] = low
    return out


def evals(groups: list[tuple[int, int]]) -> Evals:
    ev = Evals()
    for score, units in groups:
        ev.add(EGroup(score, units, False))
    return ev


def units_per_run(ev: Evals, runs: dict[int, int]) -> Counter:
    out: Counter = Counter()
    for eg in ev.egroups[:ev.best_i]:
        out[runs[eg.score]] += eg.needs
    return out


@settings(PROFILE, max_examples=300)
@given(groups=GROUPS, data=st.data())
def test_fluxions_choice_by_run_takes_the_runs_that_start_highest(groups, data):
    """Fluxion's order (std::sort by run, ties as libstdc++ leaves them) takes whole runs
    from the one starting highest down; the fast mode's order (score, higher first)
    takes the same number of units from each run."""
    k = data.draw(st.integers(1, sum(u for _, u in groups)), label="k")
    runs = run_of({s for s, _ in groups})
    floors = RunFloors()
    floors.add(s for s, _ in groups)
    exact = evals(groups)
    assert exact.choose_best_k(k, True, partial=True, key=floors.key)
    fast = evals(groups)
    assert fast.choose_best_k(k, True, stable=True)
    got = units_per_run(exact, runs)
    assert sum(got.values()) == k
    assert got == units_per_run(fast, runs)
    # the oracle in full: walk the runs from the highest start, taking all of each
    left = k
    want: Counter = Counter()
    for low in sorted(set(runs.values()), reverse=True):
        have = sum(u for s, u in groups if runs[s] == low)
        take = min(left, have)
        if take:
            want[low] = take
        left -= take
    assert got == want


def test_one_run_keeps_the_walk_order_up_to_sixteen_candidates():
    """libstdc++ sorts up to 16 elements by insertion, which keeps equal ones in place:
    four nodes in one run are taken in walk order, where ``high`` takes the last."""
    groups = [(5, 1), (6, 1), (7, 1), (8, 1), (2, 1)]
    floors = RunFloors()
    floors.add(s for s, _ in groups)
    ev = evals(groups)
    ev.choose_best_k(2, True, partial=True, key=floors.key)
    assert [eg.score for eg in ev.egroups[:2]] == [5, 6]
