"""The scheduler service places what it placed before issue 35 reworked the graph scheduler.

The oracle is tests/data/placements/service.json, written by bench/placements.py on commit
8aab13a (the last main before issue 35; its README says how): the same seeded stream of
pods, gangs, jobspecs, left-out ranks, reservations, cancels and drains is replayed here on
the current code under every match policy, and each step's answer must be the recorded
one."""

from __future__ import annotations

import pytest
from support.placements import assert_same_steps, bench, recorded

RECORD = recorded("service")


def test_the_record_is_of_this_stream():
    assert RECORD["seed"] == bench.SEED
    assert RECORD["nodes"] == bench.service_record([], bench.SEED, 0)["nodes"]
    assert sorted(RECORD["policies"]) == sorted(bench.POLICIES)


@pytest.mark.parametrize("policy", bench.POLICIES)
def test_every_answer_is_the_recorded_one(policy):
    got = bench.service_stream(policy, RECORD["seed"], RECORD["steps"])
    assert_same_steps(policy, got, RECORD["policies"][policy])
