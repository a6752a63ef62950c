"""workload_queue.py's pure parts: Jobs and groups merged into one order, and the answers one
pass keeps for requests asked again.

Oracles: issue 30's rule "order by priority, then creation time" (then the record's name,
docs/workloads.md "The queue"), written here as a plain tuple sort over the declared
values; the sched.alloc request fields docs/binder.md names (slots, ranks, duration: what
is asked) against those that only say how (op, labels, policy)."""

from __future__ import annotations

import errno

from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.queue import workload_key
from fluxnode.scheduler.binder.workload_queue import (
    QueuedJob,
    SameRequest,
    merged,
)

# name -> (kind, priority, created): Jobs and groups interleaved in every way
DECLARED = {
    "default/j-high-new": ("job", 10, 300.0),
    "default/group-g-high-old": ("group", 10, 100.0),
    "default/j-low-old": ("job", 0, 50.0),
    "default/group-g-low-mid": ("group", 0, 200.0),
    "default/a-job-tie": ("job", 0, 200.0),  # same second as the group: the name decides
}


def test_jobs_and_groups_in_one_order():
    jobs, groups = [], []
    for name, (kind, priority, created) in DECLARED.items():
        key = GroupKey("default", kind, name)
        order = workload_key(priority, created, name)
        if kind == "job":
            jobs.append(QueuedJob(order, key, lambda position, op: None))
        else:
            groups.append((key, order))
    expected = sorted(DECLARED, key=lambda n: (-DECLARED[n][1], DECLARED[n][2], n))
    entries = merged(jobs, groups)
    assert [e.key.name for e in entries] == expected
    assert [e.job is not None for e in entries] == [DECLARED[n][0] == "job" for n in expected]


def request(**fields) -> dict:
    return {"slots": [{"cores": 2, "gpus": 0, "memory_mib": 0, "count": 4}], "ranks": "0-3",
            "duration": 60, "op": "allocate", "policy": "first", "labels": {"group": "a"},
            **fields}


def test_a_pass_answers_an_identical_request_as_the_first_was_answered():
    same = SameRequest()
    busy = RPCError(errno.EBUSY, "busy: not enough free resources now")
    assert same.earlier(request()) is None
    same.answered(request(), busy, "Job default/a")
    # the same ask by another workload, another op, other labels: answered alike
    assert same.earlier(request(op="allocate_orelse_reserve", labels={"group": "b"})) is busy
    # anything asked differently is asked
    for other in (request(duration=61), request(ranks="0-2"), request(duration=None),
                  request(slots=[{"cores": 2, "gpus": 0, "memory_mib": 0, "count": 3}])):
        assert same.earlier(other) is None, other
    # an allocation is not remembered; a reservation is, as busy
    same.answered(request(ranks="0"), {"status": "ALLOCATED", "id": 1}, "Job default/b")
    assert same.earlier(request(ranks="0")) is None
    same.answered(request(ranks="1"), {"status": "RESERVED", "id": 2, "start": 10},
                  "group default/g")
    behind = same.earlier(request(ranks="1"))
    assert (behind.errnum, behind.errstr) == (
        errno.EBUSY, "busy: asks what group default/g, before it in the queue, asks, which "
        "does not fit now")
    same.clear()  # a new pass asks again
    assert same.earlier(request()) is None

