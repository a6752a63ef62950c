"""Requests with a duration on the service's clock: a reservation starts when what blocks it
ends (its start from the declared durations, computed here), a later request backfills only
if it ends by then or uses what the reservation does not need, and a reservation behind
something without an end has no known start. The clock is a plain function the test moves
(no sleeping: the planner reads the time only through it)."""

import errno

import pytest
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind
from fluxnode.scheduler.service.errors import Busy
from fluxnode.scheduler.service.live_graph import LiveGraph
from fluxnode.scheduler.service.request import MAX_DURATION, AllocRequest, alloc_request

EPOCH = 1_800_000_000
NODES, CORES = 2, 4


class Clock:
    def __init__(self) -> None:
        self.t = float(EPOCH)

    def __call__(self) -> float:
        return self.t


def graph(clock: Clock) -> LiveGraph:
    return LiveGraph(build_R([NodeResources(rank=i, hostname=f"n{i}", cores=list(range(CORES)))
                              for i in range(NODES)]), clock=clock)


def ask(cores: int, count: int, duration: int | None, op: str = "allocate") -> AllocRequest:
    return AllocRequest(kinds=(SlotKind(cores, count=count),), op=op, duration=duration)


def test_a_reservation_starts_when_the_durations_of_what_blocks_it_end():
    clock = Clock()
    g = graph(clock)
    g.allocate(1, ask(CORES, 1, 100))  # node 0, ends at EPOCH+100
    clock.t += 30
    g.allocate(2, ask(CORES, 1, 200))  # node 1, ends at EPOCH+30+200
    clock.t += 10
    head = g.allocate(3, ask(CORES, NODES, 50, "allocate_orelse_reserve"))
    assert head.status == "RESERVED"
    assert g.start_time(head.at) == EPOCH + 30 + 200  # both nodes free: the later end


def test_backfill_only_where_it_does_not_delay_the_reservation():
    clock = Clock()
    g = graph(clock)
    (busy,) = g.allocate(1, ask(CORES, 1, 100)).nodes  # one node until EPOCH+100
    head = g.allocate(2, ask(CORES, NODES, 50, "allocate_orelse_reserve"))
    start = g.start_time(head.at)
    assert (head.status, start) == ("RESERVED", EPOCH + 100)
    # a whole node now, ending after the head's start: it would delay the head
    with pytest.raises(Busy):
        g.allocate(3, ask(CORES, 1, 101))
    # the same, ending exactly when the head starts: allowed
    short = g.allocate(4, ask(CORES, 1, 100))
    assert short.status == "ALLOCATED" and [n.rank for n in short.nodes] == [1 - busy.rank]


def test_a_reservation_behind_something_without_an_end_has_no_start():
    clock = Clock()
    g = graph(clock)
    g.allocate(1, ask(CORES, 1, None))  # Fluxion's default: until cancelled
    head = g.allocate(2, ask(CORES, NODES, 10, "allocate_orelse_reserve"))
    assert head.status == "RESERVED" and g.start_time(head.at) is None
    # the head books its nodes from an unknown, far start: a long request still fits now
    assert g.allocate(3, ask(CORES, 1, 1_000_000)).status == "ALLOCATED"


def test_the_clock_moves_the_window_of_a_reservation_not_an_allocation():
    clock = Clock()
    g = graph(clock)
    g.allocate(1, ask(CORES, NODES, 60))  # everything, for a minute
    clock.t += 20
    head = g.allocate(2, ask(1, 1, 5, "allocate_orelse_reserve"))
    assert (head.status, g.start_time(head.at)) == ("RESERVED", EPOCH + 60)
    g.cancel(2)
    # past its end an allocation still holds what it holds until it is cancelled (as
    # Fluxion's: the workload's end is what frees it): now is still busy
    clock.t = EPOCH + 61
    with pytest.raises(Busy):
        g.allocate(3, ask(1, 1, 1))
    g.cancel(1)
    assert g.allocate(4, ask(1, 1, 1)).status == "ALLOCATED"


@pytest.mark.parametrize("duration", [0, -1, MAX_DURATION, 1.5, True, "60"])
def test_a_bad_duration_is_refused(duration):
    with pytest.raises(ServiceError) as exc:
        alloc_request({"slots": [{"cores": 1, "count": 1}], "duration": duration})
    assert exc.value.errnum == errno.EINVAL and "duration" in exc.value.errstr


def test_a_jobspec_says_its_duration_itself():
    with pytest.raises(ServiceError) as exc:
        alloc_request({"jobspec": {"version": 1}, "duration": 5})
    assert exc.value.errnum == errno.EINVAL and exc.value.errstr.startswith("duration:")


def test_a_long_request_backfills_on_what_the_reservation_does_not_need():
    clock = Clock()
    g = LiveGraph(build_R([NodeResources(rank=i, hostname=f"n{i}", cores=list(range(CORES)))
                           for i in range(NODES)]), clock=clock)
    held = {(n.rank, c) for n in g.allocate(1, ask(CORES, 1, 100)).nodes for c in n.cores}
    every = {(r, c) for r in range(NODES) for c in range(CORES)}
    free_now = every - held  # one node, until EPOCH+100
    # the head needs more cores than are free now but fewer than all: booked from EPOCH+100
    need = CORES * NODES - 1
    head = g.allocate(2, ask(1, need, 50, "allocate_orelse_reserve"))
    assert (head.status, g.start_time(head.at)) == ("RESERVED", EPOCH + 100)
    booked = {(n.rank, c) for n in head.nodes for c in n.cores}
    assert len(booked) == need
    spare = free_now - booked  # free now, and the head does not need it
    assert len(spare) == 1
    # far longer than the head's wait: it fits only on what the head does not need
    long = g.allocate(3, ask(1, 1, 10_000))
    assert {(n.rank, c) for n in long.nodes for c in n.cores} == spare
    with pytest.raises(Busy):  # another would have to take what the head needs
        g.allocate(4, ask(1, 1, 10_000))
