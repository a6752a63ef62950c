"""A batched sched.alloc's `cancel`: the reservations it replaces are cancelled before its
first request is matched, in the same call (the binder's pass replaces last pass's head
reservation so: scheduler/binder/queue.py). Oracles from the declared numbers: 3 nodes of 4
cores; an allocation of 8 cores for 100 s books a 12-core reservation from its end, behind
which a 4-core request for 1,000 s cannot start; without that reservation it can."""

import errno
import time

import pytest
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.service.module import SchedService
from support.sched_handle import SchedHandle as Handle

CORES, NODES = 4, 3


def slots(cores: int, duration: int, op: str = "allocate") -> dict:
    return {"slots": [{"cores": 1, "count": cores}], "duration": duration, "op": op,
            "with_R": False}


@pytest.fixture
def svc(tmp_path):
    R = build_R([NodeResources(rank=i, hostname=f"node{i}", cores=list(range(CORES)))
                 for i in range(NODES)])
    s = SchedService(Handle(tmp_path, R, NODES))
    yield s
    s.close()


@pytest.fixture
def head(svc):
    """(the running allocation, the head's reservation behind it)"""
    running = svc.alloc(slots(8, 100))
    reserved = svc.alloc(slots(NODES * CORES, 1000, "allocate_orelse_reserve"))
    assert (running["status"], reserved["status"]) == ("ALLOCATED", "RESERVED")
    with pytest.raises(ServiceError) as busy:  # the reservation keeps it from starting
        svc.alloc(slots(4, 1000))
    assert busy.value.errnum == errno.EBUSY
    return running, reserved


def statuses(svc) -> dict[int, str]:
    return {a["id"]: a["status"] for a in svc.list({})["allocations"]}


def test_the_replaced_reservation_is_cancelled_before_the_first_request_is_matched(svc, head):
    running, reserved = head
    t0 = int(time.time())
    out = svc.alloc({"requests": [slots(4, 1000),
                                  slots(NODES * CORES, 1000, "allocate_orelse_reserve")],
                     "cancel": [reserved["id"]]})
    backfilled, again = out["answers"]
    assert out["cancelled"] == [reserved["id"]]
    assert backfilled["status"] == "ALLOCATED"  # matched without the old reservation
    assert again["status"] == "RESERVED" and again["id"] != reserved["id"]
    assert statuses(svc) == {running["id"]: "ALLOCATED", backfilled["id"]: "ALLOCATED",
                             again["id"]: "RESERVED"}
    # the old one started when the 100 s allocation ends; the new one when the 1,000 s
    # one it let in ends
    assert reserved["start"] <= t0 + 100 < t0 + 1000 <= again["start"]


def test_a_batch_without_cancel_answers_as_before(svc, head):
    out = svc.alloc({"requests": [slots(4, 1000)]})
    assert set(out) == {"answers"}
    assert out["answers"][0]["errnum"] == errno.EBUSY


def test_an_id_already_gone_is_skipped_and_a_bad_request_keeps_the_cancel(svc, head):
    _, reserved = head
    svc.cancel({"id": reserved["id"]})
    again = svc.alloc(slots(NODES * CORES, 1000, "allocate_orelse_reserve"))
    out = svc.alloc({"requests": [{"slots": "eight"}], "cancel": [reserved["id"], 99999,
                                                                  again["id"]]})
    assert out["cancelled"] == [again["id"]]
    assert out["answers"][0]["errnum"] == errno.EINVAL
    assert again["id"] not in statuses(svc)


def test_an_allocation_named_as_a_reservation_refuses_the_whole_call(svc, head):
    running, reserved = head
    before = statuses(svc)
    with pytest.raises(ServiceError) as refused:
        svc.alloc({"requests": [slots(4, 1000)], "cancel": [reserved["id"], running["id"]]})
    assert refused.value.errnum == errno.EINVAL
    assert refused.value.errstr == (f"cancel: allocation {running['id']} is ALLOCATED, not a "
                                    "reservation (sched.cancel frees it)")
    assert statuses(svc) == before  # nothing cancelled, nothing allocated


@pytest.mark.parametrize("value", [5, "5", None, [True], [1.0], ["5"], {"id": 5},
                                   list(range(1025))])
def test_a_cancel_that_is_not_a_list_of_ids_is_refused(svc, head, value):
    before = statuses(svc)
    with pytest.raises(ServiceError) as refused:
        svc.alloc({"requests": [slots(1, 10)], "cancel": value})
    assert refused.value.errnum == errno.EINVAL
    assert refused.value.errstr.startswith("cancel: must be a list of at most 1024")
    assert statuses(svc) == before


def test_cancel_goes_with_the_batch_only(svc, head):
    _, reserved = head
    before = statuses(svc)
    with pytest.raises(ServiceError) as single:
        svc.alloc({**slots(1, 10), "cancel": [reserved["id"]]})
    assert single.value.errnum == errno.EINVAL and single.value.errstr.startswith(
        "cancel: goes with a batch")
    with pytest.raises(ServiceError) as inner:
        svc.alloc({"requests": [{**slots(1, 10), "cancel": [reserved["id"]]}]})
    assert inner.value.errnum == errno.EINVAL
    assert inner.value.errstr.startswith("requests[0].cancel: goes with the batch")
    assert statuses(svc) == before
