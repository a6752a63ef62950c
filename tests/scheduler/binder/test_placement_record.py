"""The binder places pods where it placed them before issue 35 reworked the graph scheduler.

The oracle is tests/data/placements/binder.json, written by bench/placements.py on commit
8aab13a (the last main before issue 35; its README says how): a real instance, the API
emulator and a binder; pods with selectors, node affinity, tolerations, GPUs and memory,
pod groups and Indexed Jobs, created one at a time, finished, nodes cordoned and
uncordoned, each step waited for. Replayed here on the current code, every pod must land on
the recorded node with the recorded cores and GPUs, or wait or be refused as recorded."""

from __future__ import annotations

import pytest
from support.placements import assert_same_steps, bench, recorded

RECORD = recorded("binder")


@pytest.mark.parametrize("policy", bench.BINDER_POLICIES)
def test_every_pod_lands_where_it_was_recorded(policy):
    assert RECORD["seed"] == bench.SEED
    got = bench.binder_stream(policy, RECORD["seed"], RECORD["steps"])
    assert_same_steps(policy, got, RECORD["policies"][policy])
