"""A pod group's record status from its members (podgroup_records.py `view`) and its name.

Oracles: the phases docs/workloads.md promises for a group (Queued until placed, Admitted
while some of its pods are bound, Running once as many as its size are, Finished/Failed
from the pods' own phases), and RFC 1123 names (the API server's rule for a FluxJob's
metadata.name, validation.IsDNS1123Subdomain)."""

from __future__ import annotations

import re

from fluxnode.scheduler.binder.group_members import Member
from fluxnode.scheduler.binder.podgroup import GroupKey, record_name
from fluxnode.scheduler.binder.podgroup_records import view

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def member(uid: str, phase: str = "Pending", node: str = "") -> Member:
    return Member(uid, f"p-{uid}", phase, node, False, {})


def test_phases_from_the_members():
    pending = [member("a"), member("b")]
    queued = view(pending, 2, False, 3, "busy: not enough free resources now")
    assert (queued.phase, queued.position, queued.reason) == (
        "Queued", 3, "busy: not enough free resources now")
    assert view(pending, 2, True, None, "").phase == "Admitted"  # placed, not bound yet
    half = view([member("a", "Pending", "n1"), member("b")], 2, True, None, "")
    assert (half.phase, half.bound, half.nodes) == ("Admitted", 1, "n1")
    running = view([member("a", "Running", "n1"), member("b", "Running", "n2")], 2, True,
                   None, "")
    assert (running.phase, running.bound, running.nodes) == ("Running", 2, "n[1-2]")
    done = [member("a", "Succeeded", "n1"), member("b", "Succeeded", "n2")]
    assert view(done, 2, False, None, "").phase == "Finished"
    assert view([done[0], member("b", "Failed", "n2")], 2, False, None, "").phase == "Failed"


def test_the_reserved_head_is_reserved_with_its_start():
    """The first workload of the queue that does not fit is Reserved (issue 30), its START
    the reservation's start in RFC 3339 UTC (date -u -d @1800000000: 2027-01-15 08:00:00)."""
    pending = [member("a"), member("b")]
    head = view(pending, 2, False, 1, "busy: not enough free resources now", (1_800_000_000,))
    assert (head.phase, head.position, head.start) == ("Reserved", 1, "2027-01-15T08:00:00Z")
    assert head.reason == ("reserved: its resources are booked for it from "
                           "2027-01-15T08:00:00Z; workloads after it may use them only if "
                           "they end by then")
    unknown = view(pending, 2, False, 1, "", (None,))
    assert (unknown.phase, unknown.start) == ("Reserved", "")
    assert "no start time is known" in unknown.reason
    assert view(pending, 2, True, None, "", (None,)).phase == "Admitted"  # placed wins


def test_record_names_are_dns_names_distinct_per_group():
    assert record_name(GroupKey("ns", "group", "train")) == "group-train"
    assert record_name(GroupKey("ns", "volcano", "train")) == "volcano-train"
    odd = [record_name(GroupKey("ns", "group", n)) for n in ("My_Group", "my-group", "MY_GROUP")]
    assert all(DNS1123.match(n) and len(n) <= 253 for n in odd)
    assert len(set(odd)) == 3
