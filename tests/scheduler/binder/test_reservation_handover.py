"""The head's reservation is never absent from the leader once made, until the head is
admitted: each pass replaces it in one step (its cancel travels with the pass's first
sched.alloc: scheduler/binder/queue.py), so a reader of the leader never falls between the
cancel and the new one. Real brokers, the API emulator and a binder; the reader is a client
of its own reading sched.list in a tight loop while passes run.

Cluster: 2 nodes of 4 cores. A group `run` (2 pods of 3 cores, no walltime) holds 3 cores of
each node; the group `head` (2 pods of 4 cores, priority 10) fits only when both nodes are
empty, so it waits reserved; one-core pods after it (priority 0) are kept off its nodes and
each one's creation makes the binder walk the queue again, replacing the reservation (a new
id each pass). Then `run` ends and `head` is bound. The oracle is the leader's own list.

A replaced reservation's id is sent once, with the pass's first request, and never again:
the binder's record of it may be stale (the leader came back without its journal, which
hands ids out again from 1), so the service refuses a `cancel` naming an allocation, and
the binder then re-syncs from sched.list, where our reservations are what it cancels."""

from __future__ import annotations

import threading

from support.binder_cluster import BinderCluster
from support.sched_service_before_cancel import MODULE

from fluxnode.testing.waiting import wait_for

HEAD = "default/group/head"
PASSES = 20  # reservations made again while the reader watches
NODES = {"node0": 4, "node1": 4}
MARGIN = 10  # ids past the last the old leader listed, for passes run before its kill


class Reader(threading.Thread):
    """Reads the head's allocations from the leader as fast as it answers, each read as
    (the statuses, the ids), until the head is ALLOCATED or it is stopped."""

    def __init__(self, inst):
        super().__init__(daemon=True)
        self.client = inst.client(timeout=10.0)
        self.reads: list[tuple[tuple[str, ...], tuple[int, ...]]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                listed = self.client.rpc("sched.list", {"labels": {"group": HEAD}})["allocations"]
                read = (tuple(a["status"] for a in listed), tuple(a["id"] for a in listed))
                self.reads.append(read)
                if "ALLOCATED" in read[0]:
                    return
        except BaseException as exc:  # said by the test, not lost in the thread
            self.error = exc
        finally:
            self.client.close()

    def reservation_ids(self) -> set[int]:
        return {i for statuses, ids in list(self.reads)
                for s, i in zip(statuses, ids, strict=True) if s == "RESERVED"}


def start_with_the_head_reserved(c, **binder):
    """`run` bound, `head` waiting reserved behind it; the binder."""
    b = c.start_binder(**binder)
    for i in range(2):
        c.create_pod(f"run-{i}", cpu="3", group="run", size=2)
    c.wait_bound(["run-0", "run-1"])
    return b


def test_the_heads_reservation_is_never_absent_until_the_head_is_admitted(tmp_path):
    with BinderCluster(tmp_path, NODES) as c:
        start_with_the_head_reserved(c)
        reader = Reader(c.inst)
        reader.start()
        try:
            for i in range(2):
                c.create_pod(f"head-{i}", cpu="4", group="head", size=2, priority=10)
            wait_for(reader.reservation_ids, 30, what="the head's first reservation")
            for i in range(PASSES):
                seen = len(reader.reservation_ids())
                c.create_pod(f"small-{i}", cpu="1", priority=0)  # a pass: made again
                wait_for(lambda seen=seen: len(reader.reservation_ids()) > seen or reader.error,
                         30, what=f"the reservation made again after small-{i}")
            c.finish("run-0")
            c.finish("run-1")
            c.wait_bound(["head-0", "head-1"])
            reader.join(30)
        finally:
            reader.stop.set()
            reader.join(30)
        assert reader.error is None, reader.error
        statuses = [s for s, _ in reader.reads]
        first = next(n for n, s in enumerate(statuses) if "RESERVED" in s)
        admitted = next(n for n, s in enumerate(statuses) if "ALLOCATED" in s)
        gaps = [n for n in range(first, admitted) if "RESERVED" not in statuses[n]]
        assert not gaps, (
            f"{len(gaps)} of {admitted - first} reads of the leader between the head's first "
            f"reservation and its admission saw no reservation (first at read {gaps[0]}); "
            f"{len(reader.reservation_ids())} reservations made")
        assert len(reader.reservation_ids()) > PASSES
        for i in range(PASSES):  # kept off the head's nodes while it was reserved
            assert c.node_of(f"small-{i}") is None
        c.assert_no_overcommit()


def test_a_stale_reservation_id_frees_nothing_on_a_leader_that_lost_its_journal(tmp_path):
    """The leader comes back without its journal while the binder is idle (no resync: it
    does not notice). Someone else's allocations there take the ids our reservation had;
    the binder's next pass must not free one of them (sched.cancel of the stale id did),
    and afterwards exactly one reservation is the head's: none leaked."""
    with BinderCluster(tmp_path, NODES) as c:
        b = start_with_the_head_reserved(c, rpc_timeout=2.0, resync=3600.0)
        for i in range(2):
            c.create_pod(f"head-{i}", cpu="4", group="head", size=2, priority=10)
        c.wait_condition("head-0", "WaitingForResources")
        c.wait_condition("head-1", "WaitingForResources")
        last = max(a["id"] for a in c.inst.rpc("sched.list")["allocations"])
        c.kill_leader(lose_journal=True)
        c.restart_leader()
        strangers = [c.inst.rpc("sched.alloc", {
            "slots": [{"cores": 0, "gpus": 0, "memory_mib": 1, "count": 1}], "with_R": False,
            "labels": {"owner": "someone else"}})["id"] for _ in range(last + MARGIN)]
        (stale,) = b.ctx.reservations.held.values()  # the binder is idle: the head's
        assert stale in strangers, (stale, strangers)  # someone else's id now
        c.create_pod("poke", cpu="1")  # a pass
        wait_for(lambda: b.reconciler.adopted == 2, 60, what="the running pods adopted")

        def ours():
            listed = c.inst.rpc("sched.list")["allocations"]
            return [a for a in listed if a["labels"].get("owner") != "someone else"]
        wait_for(lambda: [(a["status"], a["labels"].get("group")) for a in ours()
                          if a["status"] == "RESERVED"] == [("RESERVED", HEAD)], 60,
                 what="exactly one reservation: the head's")
        kept = [a["id"] for a in c.inst.rpc("sched.list", {
            "labels": {"owner": "someone else"}})["allocations"]]
        assert kept == strangers, f"freed: {sorted(set(strangers) - set(kept))}"
        c.assert_no_overcommit()


def test_a_leader_from_before_the_batch_cancel_gets_the_cancels_one_by_one(tmp_path, caplog):
    """A rolling upgrade can roll the binder first: its leader then refuses a batch's
    `cancel` as it refused any unknown field, doing nothing. The binder cancels last pass's
    reservation with sched.cancel and asks for the batch again, in the same pass: no
    reservation is left behind, no pass fails into a re-sync from the leader (which would
    drop what admitted workloads hold but have not used yet), and the head still starts."""
    with BinderCluster(tmp_path, NODES, leader_module=MODULE) as c:
        caplog.set_level("WARNING", logger="fluxnode.binder")
        start_with_the_head_reserved(c)
        for i in range(2):
            c.create_pod(f"head-{i}", cpu="4", group="head", size=2, priority=10)
        c.wait_condition("head-0", "WaitingForResources")

        def reserved() -> list[int]:
            return [a["id"] for a in c.inst.rpc("sched.list", {"labels": {"group": HEAD}})[
                "allocations"] if a["status"] == "RESERVED"]
        first = wait_for(reserved, 30, what="the head's first reservation")
        for i in range(3):
            c.create_pod(f"small-{i}", cpu="1", priority=0)  # a pass each, reserving again
        wait_for(lambda: reserved() and reserved()[0] > first[0] + 2, 30,
                 what="the reservation made again by the passes the pods made")
        assert len(reserved()) == 1, reserved()  # last pass's were all cancelled
        c.finish("run-0")
        c.finish("run-1")
        c.wait_bound(["head-0", "head-1"])
        said = [r.getMessage() for r in caplog.records]
        assert [m for m in said if "predates sched.alloc's batch `cancel`" in m], said
        assert not [m for m in said if "scheduler service unavailable" in m], said
        c.assert_no_overcommit()
