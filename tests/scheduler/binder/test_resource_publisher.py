"""The publisher's rate rules on a clock the test steps (no waiting): the leader is asked at
most every interval, the ConfigMap written when the list changed or a refresh period
passed, a failed write retried, the record read back as written."""

from __future__ import annotations

import errno
import time

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.binder.resource_publisher import (
    RecordError,
    ResourcePublisher,
    ResourceRecord,
)
from kubernetes.client.exceptions import ApiException


def entry(rank: int, ncores: int) -> dict:
    return {"rank": rank, "hostname": f"node{rank}", "ncores": ncores, "ngpus": 0,
            "cores": f"0-{ncores - 1}", "gpus": "", "extra": "dropped"}


class Leader:
    def __init__(self) -> None:
        self.answer = {"free": [entry(0, 2)], "allocated": [], "down": [], "drain": []}
        self.asked = 0

    def rpc(self, topic: str, payload: dict) -> dict:
        assert topic == "resource.list"
        self.asked += 1
        return self.answer


def test_asks_at_most_every_interval_and_writes_on_change_or_refresh():
    now = [1000.0]
    leader, written = Leader(), []
    pub = ResourcePublisher(leader.rpc, written.append, "binder-a", interval=5, refresh=60,
                            clock=lambda: now[0])
    assert pub.run() is True and leader.asked == 1
    record = ResourceRecord.from_data(written[-1]["data"], written[-1]["binaryData"])
    assert record.listing == {"free": [{k: v for k, v in entry(0, 2).items() if k != "extra"}],
                              "allocated": [], "down": []}
    assert record.published_by == "binder-a" and record.refresh == 60
    assert abs(record.taken_at - time.time()) < 5
    now[0] += 4.9
    assert pub.run() is False and leader.asked == 1  # within the interval: not even asked
    now[0] += 0.2
    assert pub.run() is False and leader.asked == 2 and len(written) == 1  # unchanged
    leader.answer = {"free": [entry(0, 1)], "allocated": [entry(0, 1)], "down": []}
    now[0] += 5
    assert pub.run() is True and len(written) == 2
    now[0] += 55
    assert pub.run() is False and len(written) == 2
    now[0] += 5.1  # a refresh period since the last write: written unchanged
    assert pub.run() is True and len(written) == 3


def test_a_failed_write_is_tried_again_next_interval():
    now = [0.0]
    leader, written = Leader(), []
    failing = [True]

    def patch(body: dict) -> None:
        if failing[0]:
            raise ApiException(status=404, reason="Not Found")
        written.append(body)

    pub = ResourcePublisher(leader.rpc, patch, "b", interval=1, refresh=60, clock=lambda: now[0])
    assert pub.run() is False and written == []
    failing[0] = False
    now[0] += 1
    assert pub.run() is True and len(written) == 1


def test_records_that_are_not_a_listing_are_refused():
    assert ResourceRecord.from_data({}) is None
    assert ResourceRecord.from_data(None) is None
    with pytest.raises(RecordError):
        ResourceRecord.from_data({"resources.json": "[1]", "takenAt": "2026-11-28T00:00:00Z"})
    with pytest.raises(RecordError):
        ResourceRecord.from_data({"resources.json": "{}", "takenAt": "yesterday"})
    r = ResourceRecord.from_data({"resources.json": "{}", "takenAt": "2026-11-28T00:00:00Z",
                                  "refreshSeconds": "10"})
    assert r.taken_at == 1795824000.0  # date -ud 2026-11-28 +%s
    assert not r.stale(r.taken_at + 30) and r.stale(r.taken_at + 31)


def test_a_refused_resource_list_is_not_the_loops_failure():
    now = [0.0]
    written: list = []
    answers = [RPCError(errno.EPROTO, "resource.list: no"), Leader().answer]

    def rpc(topic: str, payload: dict) -> dict:
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    pub = ResourcePublisher(rpc, written.append, "b", interval=1, refresh=60,
                            clock=lambda: now[0])
    assert pub.run() is False and written == []
    now[0] += 1
    assert pub.run() is True and len(written) == 1
