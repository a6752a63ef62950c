"""The seeded schedule (fluxnode.testing.fault_schedule): a seed fixes the plan, every shape is
a valid jobspec, and the runner stops with the seed and step log when the leader loses an
acknowledged allocation (a journal row removed from outside, then kill -9 of rank 0)."""

from __future__ import annotations

import sqlite3

import pytest
from fluxnode.scheduler.jobspec.jobspec import Jobspec

from fluxnode.testing.fault_schedule import (
    SEED_ENV,
    FaultRunner,
    Planned,
    choose_seed,
    node_resources,
    plan,
)
from fluxnode.testing.instance import Instance
from fluxnode.testing.invariants import JOURNAL_FILE
from fluxnode.testing.waiting import wait_for


def test_a_seed_fixes_the_plan_and_other_seeds_differ():
    assert plan(7, 200) == plan(7, 200)
    assert plan(7, 50) == plan(7, 200)[:50]
    assert plan(7, 200) != plan(8, 200)
    ops = {p.op for p in plan(7, 400)}
    assert {"alloc", "cancel", "partial-cancel", "kill-leader", "kill-leader-inflight",
            "kill-leader-outage", "kill-interior", "kill-leaf", "kill-hold"} <= ops


def test_every_planned_shape_is_a_valid_jobspec_fitting_a_node_set():
    shapes = {p.shape for p in plan(11, 2000) if p.shape is not None}
    assert len({str(s) for s in shapes}) > 10
    for shape in shapes:
        Jobspec.parse(shape.jobspec())
        assert 1 <= shape.cores <= 8 and shape.gpus <= 2


def test_the_seed_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(SEED_ENV, raising=False)
    assert choose_seed(default=7) == 7  # a test's fixed seed unless asked for another
    monkeypatch.setenv(SEED_ENV, "0x2a")
    assert choose_seed() == 42 and choose_seed(default=7) == 42
    monkeypatch.setenv(SEED_ENV, "random")
    drawn = {choose_seed(default=7) for _ in range(4)}
    assert 7 not in drawn and len(drawn) > 1
    monkeypatch.setenv(SEED_ENV, "forty-two")
    with pytest.raises(ValueError, match=SEED_ENV):
        choose_seed()


def test_a_lost_allocation_stops_the_run_with_the_seed_and_steps(tmp_path):
    with Instance(2, tmp_path, modules=None, resources=node_resources(2),
                  tbon={"torpid_min": "0.2s", "torpid_max": "1.5s"}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 30,
                 what="both ranks in the scheduler graph")
        runner = FaultRunner(inst, 5, recovery_timeout=20)
        steps = [p for p in plan(5, 400) if p.op == "alloc"][:3]
        for i, step in enumerate(steps):
            runner.step(Planned(i, "alloc", step.pick, step.part, step.shape))
        assert runner.report.ok and len(runner.expected) >= 1, runner.report.replay_text()
        victim = min(runner.expected)
        db = sqlite3.connect(inst.statedir(0) / JOURNAL_FILE)
        db.execute("DELETE FROM allocation WHERE id=?", (victim,))
        db.commit()
        db.close()
        report = runner.run([Planned(3, "kill-leader", 0.0, 0.0)])
        assert [v.kind for v in report.violations] == ["lost"], report.replay_text()
        text = report.replay_text()
        assert text.startswith(f"seed 5 ({SEED_ENV}=5 replays it); steps:")
        assert f"acknowledged allocation {victim} " in text
        assert "step 3: kill -9 rank 0, restart" in text
