"""The one queue of waiting workloads: Jobs (fluxjob_loop.py) and pod groups (cluster_state.py's
scheduling queue) in a single order, walked by the scheduling cycle (issue 30).

A Job is asked for before its pods exist (the FluxJob loop's whole set), a pod group once all
its pods are there (the scheduling cycle's request), but to a user both are workloads in one
queue: ``kubectl get fluxjobs -A`` shows one POSITION sequence, and the first of either kind
that does not fit is the head that gets the reservation. So the two lists are merged here
by one key (queue.py `workload_key`): higher priority first, then the older creation time
(a Job's creationTimestamp; a group's oldest pending member's, cluster_state.py), then the
FluxJob record's namespace/name (a Job's own name, a group's `record_name`). Every input of
the key is in the objects, so a restarted or new leader walks the same order.

What the walk needs of the Jobs is a `JobSource`: the FluxJob loop gives one `QueuedJob` per
waiting Job, already in order, with the call that asks for it (or says why it is not asked);
this module imports neither side, so the scheduling cycle stays below the FluxJob loop.

`SameRequest` keeps, for one pass, the answer of every request that got no allocation, by
what it asks for (slot kinds, ranks, walltime): a later workload asking for exactly the same
is answered with it and not asked again (behind a reserved one, with a busy answer naming
that workload). Between two asks of one pass the cluster can still change (a pod ending, a
cancel landing, the leader's graph filling in after a restart), and a later equal request
must never be admitted before an earlier one that was just refused (the workload fault
checker's `order`).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.binder.podgroup import GroupKey
from fluxnode.scheduler.binder.queue import QueueKey


def behind(who: str) -> str:
    """The refusal of a request identical to `who`'s (e.g. ``Job default/e1``), which was
    reserved before it in the pass."""
    return (f"busy: asks what {who}, before it in the queue, asks, which does not fit now")


@dataclass(frozen=True)
class JobAsk:
    """What the walk asks the scheduler for a Job: the sched.alloc `payload` (its whole set),
    `who` names it to the workloads after it (`SameRequest`), and `finish(reply)` acts on
    the service's reply (an answer or its RPCError): the Job's record, and the answer back
    when it is ALLOCATED or RESERVED, else None. The walk asks several in one round trip
    (the service answers in order and stops after a reservation), with the pod groups."""

    key: GroupKey
    payload: dict
    who: str
    finish: Callable[[dict | RPCError], dict | None]


@dataclass(frozen=True)
class QueuedJob:
    """A waiting Job as the walk sees it: its place in the order, its group key, and
    `prepare(position, op)`, which says what to ask for its whole set with `op` (a
    `JobAsk`), or None when it is not asked (saying why on its record). `alone`: asked in
    a round trip of its own (its queue has a limit, which the answers before it may reach)."""

    order: QueueKey
    key: GroupKey
    prepare: Callable[[int, str], JobAsk | None]
    alone: bool = False


class JobSource(Protocol):
    def queued(self) -> list[QueuedJob]:
        """The waiting Jobs, in order (called once per pass, before the walk)."""
        ...


@dataclass(frozen=True)
class Entry:
    """One waiting workload of the merged queue: a Job (`job` set) or a pod group."""

    order: QueueKey
    key: GroupKey
    job: QueuedJob | None = None


def merged(jobs: list[QueuedJob], groups: list[tuple[GroupKey, QueueKey]]) -> list[Entry]:
    """Both kinds in one order (ties cannot happen: the names differ)."""
    entries = [Entry(j.order, j.key, j) for j in jobs]
    entries += [Entry(order, key) for key, order in groups]
    entries.sort(key=lambda e: e.order)
    return entries


def request_signature(payload: dict) -> str:
    """What a sched.alloc request asks for, whoever asks: its slot kinds, the ranks it may
    use and its walltime, or its jobspec, which says all three (a group asked one per node:
    pod_affinity.py); not its op, labels or policy."""
    return json.dumps([payload.get("slots"), payload.get("ranks"), payload.get("duration"),
                       payload.get("jobspec")], sort_keys=True)


@dataclass
class SameRequest:
    """The refusals of one pass, by request signature (see the module's docstring)."""

    refused: dict[str, RPCError] = field(default_factory=dict)

    def clear(self) -> None:
        self.refused.clear()

    def earlier(self, payload: dict) -> RPCError | None:
        """The answer an identical request got earlier in this pass without an allocation."""
        return self.refused.get(request_signature(payload))

    def answered(self, payload: dict, answer: dict | RPCError, who: str) -> None:
        """Remember an answer to `who` (``Job NS/NAME``, ``group NS/NAME``) that is not an
        allocation: a refusal, or a reservation (the requests after it are busy behind it)."""
        if isinstance(answer, RPCError):
            self.refused.setdefault(request_signature(payload), answer)
        elif answer.get("status") == "RESERVED":
            self.refused.setdefault(request_signature(payload),
                                    RPCError(errno.EBUSY, behind(who)))
