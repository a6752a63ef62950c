"""A running Job's slot ledger (job_slots.py), rule by rule, on allocations written as the
service lists them. The oracles are the rules as issue 30 and docs/workloads.md state them
(index i back in its slot; the slots a Job still needs counted as kube's Job controller
counts the pods it will still run, job_controller.go manageJob), not the ledger's code."""

from __future__ import annotations

from fluxnode.scheduler.binder.job_slots import JobSlots, slots_needed
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.jobspec.builder import SlotKind

KEY = GroupKey("default", "job", "sweep.uid")
ONE = SlotKind(1)


def ledger(n: int) -> JobSlots:
    """An allocation of `n` one-core slots, two per node (ranks 0, 1, ...)."""
    kinds = [{"cores": 1, "gpus": 0, "memory_mib": 0, "count": n}]
    listed = [{"kind": 0, "rank": i // 2, "hostname": f"n{i // 2}", "cores": str(i % 2),
               "gpus": ""} for i in range(n)]
    return JobSlots.of_allocation(7, KEY, kinds, listed)


def started(n: int) -> JobSlots:
    """A ledger whose first pods p0..p{n-1} (index i) took slot i."""
    slots = ledger(n)
    assert slots.take({f"p{i}": ONE for i in range(n)}, {f"p{i}": i for i in range(n)}) == {
        f"p{i}": i for i in range(n)}
    return slots


def test_a_replacement_goes_back_to_the_slot_its_index_had():
    slots = started(4)
    assert slots.ended("p2", succeeded=False) == 2
    assert slots.ended("p0", succeeded=False) == 0
    # index 2's replacement comes alone first: slot 0 is lower and free, but index 0's
    assert slots.take({"r2": ONE}, {"r2": 2}) == {"r2": 2}
    assert slots.take({"r0": ONE}, {"r0": 0}) == {"r0": 0}


def test_the_next_index_takes_a_freed_slot_not_one_a_failed_index_comes_back_to():
    slots = started(2)  # completions 4, parallelism 2
    slots.ended("p1", succeeded=True)
    slots.ended("p0", succeeded=False)  # index 0 comes back
    assert slots.take({"i2": ONE}, {"i2": 2}) == {"i2": 1}
    assert slots.take({"r0": ONE}, {"r0": 0}) == {"r0": 0}


def test_a_pod_waits_when_no_slot_is_free():
    slots = started(2)
    assert slots.take({"extra": ONE}, {"extra": 0}) == {}
    assert slots.take({"big": SlotKind(2)}, {}) == {}
    slots.ended("p0", succeeded=False)
    assert slots.take({"big": SlotKind(2)}, {}) == {}  # no free slot of its shape
    assert slots.take({"plain": ONE}, {}) == {"plain": 0}


def test_a_slot_on_a_node_not_usable_is_not_taken():
    slots = started(4)
    slots.ended("p0", succeeded=False)  # slot 0, on n0
    slots.ended("p2", succeeded=False)  # slot 2, on n1
    assert slots.take({"r0": ONE}, {"r0": 0}, lambda node: node != "n0") == {"r0": 2}
    assert slots.take({"r2": ONE}, {"r2": 2}, lambda node: node != "n0") == {}


def test_free_slots_beyond_what_the_job_needs_are_released():
    slots = started(4)  # two nodes: slots 0, 1 on rank 0, slots 2, 3 on rank 1
    for uid in ("p0", "p1", "p2"):
        slots.ended(uid, succeeded=True)
    assert slots.surplus(4) == []  # still needed: kept
    assert sorted(slots.kept_ranks()) == [0, 1]
    # one slot needed, p3 holds it: every free slot goes, rank 0's share with them
    assert slots.surplus(1) == [0, 1, 2]
    assert slots.free() == [] and list(slots.kept_ranks()) == []


def test_a_slot_a_failed_index_comes_back_to_is_kept_first():
    slots = started(4)
    slots.ended("p0", succeeded=True)
    slots.ended("p3", succeeded=False)  # index 3 will be replaced
    slots.ended("p1", succeeded=True)
    # two live (p2 and the replacement to come): slot 3, then slots on rank 1 (where p2 runs)
    assert slots.surplus(2) == [0, 1]
    assert slots.free() == [3]


def test_slots_needed_counts_as_the_job_controller_does():
    def job(parallelism=None, completions=None, succeeded=None):
        spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions))
                if v is not None}
        return {"spec": spec, "status": {} if succeeded is None else {"succeeded": succeeded}}

    assert slots_needed(job(2, 4)) == 2
    assert slots_needed(job(2, 4, 3)) == 1
    assert slots_needed(job(2, 4, 4)) == 0
    assert slots_needed(job(4, 2)) == 2  # completions cap it
    assert slots_needed(job(completions=3)) == 1  # parallelism defaults to 1
    assert slots_needed(job(3)) == 3  # a work queue: parallelism until the first success
    assert slots_needed(job(3, succeeded=1)) == 0
    assert slots_needed(job("x", 4)) > 4  # not a count: every slot kept
    # pods seen to succeed before the Job controller's status counts them
    assert slots_needed(job(2, 4, 1), seen=3) == 1
    assert slots_needed(job(2, 4, 3), seen=1) == 1


def test_the_ledger_counts_the_indexes_it_saw_succeed():
    slots = started(3)
    slots.ended("p0", succeeded=True)
    slots.ended("p1", succeeded=False)
    assert slots.succeeded == 1
    slots.take({"r1": ONE}, {"r1": 1})
    slots.ended("r1", succeeded=True)
    assert slots.succeeded == 2 and slots.live() == 1


def test_running_pods_are_put_back_in_their_slots_by_node_and_ids():
    """(A binder that restarts.) A slot whose cores a running pod uses is never left free."""
    slots = ledger(4)
    slots.place_running({"a": ("n1", frozenset({1}), frozenset()),
                         "b": ("n0", frozenset({0}), frozenset()),
                         "c": ("n9", frozenset({0}), frozenset())}, {"a": 3})
    assert slots.free() == [1, 2] and slots.live() == 2
    assert slots.take({"r3": ONE}, {"r3": 3}) == {"r3": 1}  # slot 3 is a's: the lowest free
