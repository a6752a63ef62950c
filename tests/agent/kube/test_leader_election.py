"""Leader election on a Lease (agent/kube/leader_election.py) against the API emulator, with
the elector's clock held by the test: the deadlines are the elector's own, counted on its
clock, and a paused clock must never let it take over or step down early.

The rounds are counted at the emulator (its request log), the lease read back from it.
"""

from __future__ import annotations

import threading
import time

import pytest
from fluxnode.agent.kube.leader_election import LeaderElector
from kubernetes import client

from fluxnode.testing.waiting import wait_for

LEASES = "leases.coordination.k8s.io"
NAMESPACE = "fluxnode"
NAME = "test-lease"


class PausedClock:
    """Monotonic seconds that move only when the test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def coordination(kube):
    api_client = kube.api_client()
    yield client.CoordinationV1Api(api_client)
    api_client.close()


@pytest.fixture
def electors(coordination):
    started: list[LeaderElector] = []

    def start(identity: str, **kwargs) -> LeaderElector:
        elector = LeaderElector(coordination, NAMESPACE, NAME, identity, lease_duration=10.0,
                                renew_deadline=5.0, **kwargs).start()
        started.append(elector)
        return elector

    yield start
    for elector in started:
        elector.stop(release=False)
    assert not any(e._thread.is_alive() for e in started), "an elector thread did not stop"


def rounds(kube, verb: str, count: int) -> None:
    """Wait until the electors made ``count`` more ``verb`` requests on leases."""
    target = kube.count_requests(verb, LEASES) + count
    wait_for(lambda: kube.count_requests(verb, LEASES) >= target, 10,
             what=f"{count} more lease {verb}s")


def test_a_candidate_takes_over_only_after_a_whole_lease_duration_on_its_clock(kube, electors):
    holder = electors("a", retry_period=0.05)
    wait_for(holder.is_leader.is_set, 10, what="a leads")
    holder.stop(release=False)  # stops renewing; the lease still names it
    before = kube.get(LEASES, NAME, NAMESPACE)["spec"]
    clock = PausedClock()
    candidate = electors("b", retry_period=0.02, clock=clock)
    rounds(kube, "get", 5)
    assert not candidate.is_leader.is_set()  # a paused clock: the record never grows old
    clock.now += 9.9
    rounds(kube, "get", 5)
    assert not candidate.is_leader.is_set()
    assert kube.get(LEASES, NAME, NAMESPACE)["spec"] == before
    clock.now += 0.2  # 10.1 s since it first saw the record
    wait_for(candidate.is_leader.is_set, 10, what="b leads")
    after = kube.get(LEASES, NAME, NAMESPACE)["spec"]
    assert after["holderIdentity"] == "b"
    assert after["leaseTransitions"] == before["leaseTransitions"] + 1


def test_a_leader_that_cannot_renew_steps_down_after_its_renew_deadline_on_its_clock(
    kube, electors
):
    clock = PausedClock()
    stopped = threading.Event()
    leader = electors("a", retry_period=0.02, clock=clock, on_stopped=stopped.set)
    wait_for(leader.is_leader.is_set, 10, what="a leads")
    kube.forbid("update", LEASES)  # every renewal now fails (403)
    rounds(kube, "update", 5)
    assert leader.is_leader.is_set() and not stopped.is_set()  # a paused clock: no deadline
    clock.now += 4.9
    rounds(kube, "update", 5)
    assert leader.is_leader.is_set() and not stopped.is_set()
    clock.now += 0.2  # 5.1 s since its last renewal
    wait_for(stopped.is_set, 10, what="a steps down")
    assert not leader.is_leader.is_set()
    assert kube.get(LEASES, NAME, NAMESPACE)["spec"]["holderIdentity"] == "a"  # nobody wrote


def test_a_leader_steps_down_before_its_lease_expires_while_its_renewal_hangs(kube):
    """The API server stops answering (the emulator's loop held in the authorizer): the
    hung renewal must not keep the leader past the lease duration after its last renewal
    the server took, when another may take over. The client's own elector has no such
    bound: no timeout on its calls (and urllib3 retries a timed-out read three times)."""
    stalling, in_stall, released = threading.Event(), threading.Event(), threading.Event()
    renewed: list[float] = []  # when the server took each lease update, by the test's clock

    def authorizer(info) -> None:
        if info.resource != LEASES:
            return
        if stalling.is_set():
            in_stall.set()
            released.wait(30)
        elif info.verb == "update":
            renewed.append(time.monotonic())

    api_client = kube.api_client(kube.add_identity("elector", authorizer))
    stopped: list[float] = []
    leader = LeaderElector(client.CoordinationV1Api(api_client), NAMESPACE, NAME, "a",
                           lease_duration=3.0, renew_deadline=1.5, retry_period=0.1,
                           on_stopped=lambda: stopped.append(time.monotonic())).start()
    try:
        wait_for(lambda: leader.is_leader.is_set() and renewed, 10, what="a leads and renews")
        stalling.set()
        wait_for(in_stall.is_set, 10, what="a lease call held by the server")
        wait_for(lambda: stopped, 10, what="the leader to step down")
        assert not released.is_set() and not leader.is_leader.is_set()
        assert stopped[0] - renewed[-1] < 3.0  # before the lease may be taken over
    finally:
        stalling.clear()
        released.set()
        leader.stop(release=False)
        api_client.close()
    assert not leader._thread.is_alive()
