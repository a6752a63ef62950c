from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.queue import (
    Reservations,
    SchedulingQueue,
    creation_time,
    priority,
    submitted,
    workload_key,
)


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


def test_the_webhooks_stamp_orders_jobs_within_their_creation_second_and_nowhere_else():
    def job(name: str, created: str, stamp: str | None) -> dict:
        meta = {"name": name, "creationTimestamp": created}
        if stamp is not None:
            meta["annotations"] = {"fluxnode.io/submitted": stamp}
        return {"metadata": meta}

    # stamped just before the second of creation (the webhook runs before the store), and
    # within it
    early = job("z", "2026-11-28T10:00:01Z", "2026-11-28T10:00:00.999000Z")
    late = job("a", "2026-11-28T10:00:01Z", "2026-11-28T10:00:01.500000Z")
    assert submitted(early, creation_time(early)) == -1000
    assert submitted(late, creation_time(late)) == 500_000
    keys = {j["metadata"]["name"]: workload_key(0, creation_time(j), j["metadata"]["name"],
                                                submitted(j, creation_time(j)))
            for j in (early, late)}
    assert keys["z"] < keys["a"]  # by the stamp, not the name
    # an earlier second still goes first, whatever the stamps say
    older = job("y", "2026-11-28T10:00:00Z", "2026-11-28T10:00:00.999999Z")
    assert workload_key(0, creation_time(older), "y", submitted(older, creation_time(older))) \
        < keys["z"]
    # a stamp out of place (a later edit), unreadable or absent counts as 0
    for stamp in ("2026-11-28T09:00:00.000000Z", "2026-11-28T10:00:02.000000Z", "soon", None):
        j = job("x", "2026-11-28T10:00:01Z", stamp)
        assert submitted(j, creation_time(j)) == 0, stamp
