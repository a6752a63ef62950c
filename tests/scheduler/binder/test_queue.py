from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.queue import Reservations, SchedulingQueue, creation_time, priority


def k(name):
    return GroupKey("ns", "group", name)


def test_priority_first_then_creation_time():
    q = SchedulingQueue()
    q.push(k("old-low"), 0, 100.0)
    q.push(k("new-high"), 10, 300.0)
    q.push(k("new-low"), 0, 200.0)
    q.push(k("old-high"), 10, 50.0)
    assert q.ordered() == [k("old-high"), k("new-high"), k("old-low"), k("new-low")]
    q.remove(k("old-high"))
    assert q.ordered()[0] == k("new-high") and len(q) == 3 and k("old-high") not in q


def test_pod_fields():
    pod = {"metadata": {"creationTimestamp": "2026-01-01T00:00:01Z"}, "spec": {"priority": 7}}
    assert (
        creation_time(pod)
        - creation_time({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}})
        == 1.0
    )
    assert priority(pod) == 7 and priority({}) == 0


def test_only_the_first_blocked_group_reserves():
    r = Reservations(depth=1)
    assert r.op_for_blocked() == "allocate_orelse_reserve"
    r.hold(k("big"), 42)
    assert r.op_for_blocked() == "allocate"
    assert r.release_all() == [42]
    assert r.op_for_blocked() == "allocate_orelse_reserve"
