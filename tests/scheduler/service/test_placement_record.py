"""The scheduler service places what it placed before issue 35 reworked the graph scheduler.

The oracle is tests/data/placements/service.json, written by bench/placements.py on commit
8aab13a (the last main before issue 35; its README says how): the same seeded stream of
pods, gangs, jobspecs, cancels and drains is replayed here on the current code under every
match policy, and each step's answer must be the recorded one."""

from __future__ import annotations

import importlib.util
import json

import pytest
from support.paths import REPO

RECORD = REPO / "tests" / "data" / "placements" / "service.json"


def _placements():
    spec = importlib.util.spec_from_file_location("placements", REPO / "bench" / "placements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


placements = _placements()
recorded = json.loads(RECORD.read_text())


def test_the_record_is_of_this_stream():
    assert recorded["seed"] == placements.SEED
    assert recorded["nodes"] == placements.service_record([], placements.SEED, 0)["nodes"]
    assert sorted(recorded["policies"]) == sorted(placements.POLICIES)


@pytest.mark.parametrize("policy", placements.POLICIES)
def test_every_answer_is_the_recorded_one(policy):
    want = recorded["policies"][policy]
    got = placements.service_stream(policy, recorded["seed"], recorded["steps"])
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"{policy}: step {step} differs from the record"
