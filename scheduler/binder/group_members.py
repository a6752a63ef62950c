"""Who belongs to each user-declared pod group, as this replica's pod informer sees it.

The admission webhook caps a group at its declared size (admission.py) and the group's
FluxJob record (podgroup_records.py) shows its members; both need, for a group key, the
pods that declare it. The binder's cluster cache (cluster_state.py) is owned by its loop
thread and forgets ended pods; this index is fed straight from the pod informer's events
(on the informer's thread, before they reach the loop), keeps every member until it is
deleted, and answers any thread under a lock.

Only declared groups are indexed (podgroup.py `declared_group_key`: a group label,
Volcano's annotation): a Job's pods are the Job controller's to count. `snapshot` gives only
the groups with a member opted in with the queue label (the records' groups), so a cluster
of unlabelled groups (the binder's benchmarks) costs the records nothing per cycle.

A member *counts* toward the size while it is live: not Succeeded or Failed and not being
deleted, so the replacement of a pod that failed, or of one being deleted, is not refused.

The index is this replica's view, as current as its watch: two pods created at the same
moment through two replicas (or before the watch delivered the first) may both be
admitted. The scheduling cycle checks again (cluster_state.py `Group.excess`) and places
no group with more members than its size; docs/workloads.md says what a user sees.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from fluxnode.scheduler.binder.podgroup import GroupKey, declared_group_key

QUEUE_LABEL = "fluxnode.io/queue"  # admission.py QUEUE_LABEL (admission imports this module)

ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a declared group, as last seen."""

    uid: str
    name: str
    phase: str
    node: str
    deleting: bool
    raw: dict

    @property
    def queued(self) -> bool:
        """Opted in with the queue label."""
        return bool(((self.raw.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL))

    @property
    def live(self) -> bool:
        return self.phase not in ENDED and not self.deleting

    @classmethod
    def of(cls, pod: dict) -> Member:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return cls(meta.get("uid") or "", meta.get("name") or "",
                   (pod.get("status") or {}).get("phase") or "Pending",
                   spec.get("nodeName") or "", bool(meta.get("deletionTimestamp")), pod)


class GroupMembers:
    """Group key -> pod uid -> Member, fed by pod events (`apply`)."""

    def __init__(self) -> None:
        self._groups: dict[GroupKey, dict[str, Member]] = {}
        self._where: dict[str, GroupKey] = {}  # pod uid -> its group
        self._queued: dict[GroupKey, int] = {}  # members with the queue label, per group
        self._lock = threading.Lock()
        self.generation = 0  # bumps on every change (readers compare)

    def apply(self, kind: str, obj) -> None:
        """One pod informer event: ("SYNC", [pods]) or ADDED/MODIFIED/DELETED with a pod."""
        with self._lock:
            if kind == "SYNC":
                self._groups.clear()
                self._where.clear()
                self._queued.clear()
                for pod in obj:
                    self._put(pod)
            elif kind == "DELETED":
                self._drop((obj.get("metadata") or {}).get("uid") or "")
            else:
                self._put(obj)
            self.generation += 1

    def _put(self, pod: dict) -> None:
        member = Member.of(pod)
        self._drop(member.uid)
        key = declared_group_key(pod)
        if key is None or not member.uid:
            return
        self._groups.setdefault(key, {})[member.uid] = member
        self._where[member.uid] = key
        if member.queued:
            self._queued[key] = self._queued.get(key, 0) + 1

    def _drop(self, uid: str) -> None:
        key = self._where.pop(uid, None)
        if key is None:
            return
        members = self._groups.get(key)
        if members is not None:
            gone = members.pop(uid, None)
            if gone is not None and gone.queued:
                self._queued[key] -= 1
                if not self._queued[key]:
                    del self._queued[key]
            if not members:
                del self._groups[key]

    def live_count(self, key: GroupKey) -> int:
        """How many live members the group has (see the module's docstring)."""
        with self._lock:
            return sum(1 for m in (self._groups.get(key) or {}).values() if m.live)

    def snapshot(self) -> dict[GroupKey, list[Member]]:
        """The groups with a member opted in with the queue label, each with its members
        (live or ended), for the records."""
        with self._lock:
            return {k: list(self._groups[k].values()) for k in self._queued}
