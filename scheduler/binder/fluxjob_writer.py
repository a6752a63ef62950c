"""Writing FluxJob records off the binder's loop thread (issue 30's workloads bench).

The FluxJob loop decides a record's status on the loop thread; writing it there cost a
round trip to the API server per record and per change (create, Queued, Admitted, the
bound count, Running), which held up every other decision: in bench/workloads.py these
writes were ~40% of the loop's wall time. Here the loop only says what a record should
be; bind workers (`BinderContext.pool`, at most `DRAINERS` at once) write it, each record's
writes in the order asked (create before any status, delete last), and a status asked for
while an older one is still waiting replaces it: only the newest is written (a record reads
as its Job is now, never as it was in between). Records are independent of one another: a
worker takes up to `BATCH` records with a write to make and sends their creates and status
patches pipelined on its one connection (http_writer.py; one task and one send for a
burst's records instead of a task and a round trip each), the next write of each in the
next batch.

**Settling statuses**: once a Job is unsuspended its record would say Admitted, then one
status per bound count the loop sees (Admitted 1 of 8, 2 of 8, ...), then Running, all within
a fraction of a second when the cluster has room. Such a status is asked with
``settle=True``: it waits `SETTLE` seconds (kicked by `retry`, which the loop calls every
pass, at least every resync) unless a status that does not settle (Running, Queued again,
...) replaces it first, which is written at once. A Job whose pods are all bound within that
time gets only Running written (one status write: an empty cluster's Jobs; in
bench/workloads.py's saturated bursts, where pods take seconds to come, 1.5-1.9 per
workload, against 3.97 with every count written and 2 with only Admitted and Running); one
whose pods are slow to come shows Admitted, and its count, at most SETTLE (or a resync)
late.

A status is a merge patch of the status subresource; fields set in the last status
written and unset now are sent as null so they go away. A write that fails (the API
server away, 5xx) is kept and tried again from the loop (`retry`), as pod reports are.
A 404 at create means the CRD is not installed: that record is never written (the
caller is told once, through `on_no_crd`); a 409 means it exists already (ours, from
before a restart or a takeover).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from fluxnode.agent.kube.api_client import status_message
from fluxnode.scheduler.binder.binding import PodWriter
from fluxnode.scheduler.binder.http_writer import HttpWriter, Write
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder")

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
MERGE_PATCH = "application/merge-patch+json"
SETTLE = 0.5  # seconds an intermediate bound count waits for a newer status
BATCH = 64  # records' writes pipelined in one send (`_drain`)
DRAINERS = 2  # bind workers writing records at once

Key = tuple[str, str]  # (namespace, name)


@dataclass
class _Record:
    """What is asked for one record and what was written (under the writer's lock)."""

    create: dict | None = None  # the object to create, until it is
    status: dict | None = None  # the newest status body asked for and not written yet
    written: dict | None = None  # the status body last written
    delete: bool = False  # the record goes (after what was asked before)
    recreate: dict | None = None  # a Job of the same name came back: created after the delete
    absent: bool = False  # its create found no CRD: nothing more is written
    busy: bool = False  # a worker is writing it
    sending: str = ""  # the write a worker is making now ("create", "status", "delete")
    failed: bool = False  # the last write failed: `retry` submits it again
    settle_at: float | None = None  # `status` is a settling count: not written before this


class FluxJobWriter:
    def __init__(self, writer: PodWriter, pool: Executor, delete: Callable[[str, str], None],
                 on_no_crd: Callable[[], None]):
        self.api = writer.api
        self.pool = pool
        self._delete = delete  # (namespace, name): the client's delete (404 not an error)
        self._on_no_crd = on_no_crd
        self._records: dict[Key, _Record] = {}
        # what `retry`, called every loop pass, looks at: the records whose write failed, and
        # the settling statuses by deadline (a scan of every record per pass was a tenth of
        # the loop's CPU in bench/workloads.py's burst; of every settling one, 0.15 ms a pass)
        self._failed_keys: set[Key] = set()
        self._settling: list[tuple[float, int, Key]] = []  # a heap of (settle_at, seq, key)
        self._seq = itertools.count()
        self._ready: deque[tuple[Key, _Record]] = deque()  # busy records with a write to make
        self._drainers = 0  # `_drain` tasks submitted and not finished
        self._lock = threading.Lock()

    # -- the loop's side ---------------------------------------------------------------

    def create(self, key: Key, obj: dict) -> None:
        """Create the record (its status comes with `status`)."""
        with self._lock:
            record = self._records.get(key)
            if record is not None and record.delete:
                record.recreate = obj  # after the old one's delete, in that order
                return
            record = self._records[key] = _Record(create=obj)
        self._kick(key, record)

    def status(self, key: Key, body: dict, settle: bool = False) -> None:
        """Write `body` (``{"status": {...}}``) as the record's status, once its create is
        done; replaces a status asked for before and not written yet. With `settle`, not
        before `SETTLE` seconds unless replaced (the module's docstring)."""
        with self._lock:
            record = self._records.get(key)
            if record is None or record.absent or (record.delete and record.recreate is None):
                return
            record.status = body
            if not settle:
                record.settle_at = None
            elif record.settle_at is None:  # a newer count keeps the first one's deadline
                record.settle_at = time.monotonic() + SETTLE
                heapq.heappush(self._settling, (record.settle_at, next(self._seq), key))
                return
            else:
                return
        self._kick(key, record)

    def delete(self, key: Key) -> None:
        """The Job is gone: its record is deleted (a create not sent yet is dropped)."""
        with self._lock:
            record = self._records.get(key)
            if record is None:
                return
            if record.delete:  # being deleted: a create asked since is dropped
                record.recreate, record.status = None, None
                return
            if record.create is not None and record.sending != "create":
                del self._records[key]  # never sent: nothing to create, nothing to delete
                record.create, record.status = None, None
                return
            record.delete, record.status, record.settle_at = True, None, None
        self._kick(key, record)

    def retry(self) -> None:
        """Write again the records whose last write failed, and the settling statuses whose
        time is up (called from the loop, every pass: it looks only at the failed records
        and at the settling ones that are due, earliest first)."""
        now = time.monotonic()
        due: list[tuple[Key, _Record]] = []
        with self._lock:
            for key in list(self._failed_keys):
                record = self._records.get(key)
                self._failed_keys.discard(key)
                if record is not None and record.failed:
                    record.failed = False
                    due.append((key, record))
            while self._settling and self._settling[0][0] <= now:
                _at, _seq, key = heapq.heappop(self._settling)
                record = self._records.get(key)
                # (a deadline replaced by a newer status, or a record gone: nothing to do)
                if record is not None and record.settle_at is not None \
                        and record.settle_at <= now:
                    record.settle_at = None
                    due.append((key, record))
        for key, record in due:
            self._kick(key, record)

    def _kick(self, key: Key, record: _Record) -> None:
        with self._lock:
            if record.busy or record.failed:
                return
            record.busy = True
            self._ready.append((key, record))
            if self._drainers >= DRAINERS:
                return  # a drainer running takes it
            self._drainers += 1
        self.pool.submit(self._drain)

    # -- a worker's side -----------------------------------------------------------------

    def _drain(self) -> None:
        """Write what is asked for the ready records until none is left: up to `BATCH` at a
        time, each record's next write (create, status or delete; a record is in one
        drainer's hands at a time, so its writes keep their order), the creates and status
        patches pipelined on the worker's connection (the module's docstring)."""
        while True:
            with self._lock:
                if not self._ready:
                    self._drainers -= 1
                    return
                batch: list[tuple[Key, _Record, str, dict | None, dict | None]] = []
                while self._ready and len(batch) < BATCH:
                    key, record = self._ready.popleft()
                    op, body = self._next(record)
                    if op:
                        batch.append((key, record, op, body, record.written))
                        record.sending = op
            try:
                outcomes = self._write_many([(key, op, body, written)
                                             for key, _record, op, body, written in batch])
            except Exception as exc:  # never lose a record: the loop retries it
                log.warning("cannot write FluxJob records: %s", exc)
                outcomes = [False] * len(batch)
            with self._lock:
                for (key, record, op, body, _written), done in zip(batch, outcomes,
                                                                    strict=True):
                    if self._settle(key, record, op, body, done):
                        self._ready.append((key, record))  # more to write for it

    def _next(self, record: _Record) -> tuple[str, dict | None]:
        """(Under the lock.) The record's next write, or ("", None) when it has none now
        (it is then no longer busy)."""
        if record.create is not None:
            return "create", record.create
        if record.delete:
            return "delete", None
        if record.status is not None and record.status != record.written:
            if record.settle_at is None:
                return "status", record.status
            record.busy = False  # a settling count: `retry` kicks it when due
            return "", None
        record.status, record.settle_at = None, None
        record.busy = False
        return "", None

    def _settle(self, key: Key, record: _Record, op: str, body: dict | None,
                done: bool | None) -> bool:
        """(Under the lock.) Account for one write's outcome; True when the record has more
        to write now."""
        record.sending = ""
        if op == "create":
            record.create = None
            if done is None:  # no CRD
                record.absent, record.status = True, None
        elif op == "delete" and done:
            if record.recreate is not None:  # the Job came back meanwhile
                record.create, record.recreate = record.recreate, None
                record.delete, record.written = False, None
                return True
            if self._records.get(key) is record:
                del self._records[key]
            record.busy = False
            return False
        elif done:
            record.written = body
            if record.status is body:
                record.status = None
        if done is False:
            if op == "create":
                record.create = body  # tried again
            record.failed, record.busy = True, False
            self._failed_keys.add(key)
            return False
        return True

    def _write_many(self, writes: list[tuple[Key, str, dict | None, dict | None]]
                    ) -> list[bool | None]:
        """The writes' outcomes, in order: True done, False failed (tried again later), None
        the CRD is missing. Creates and status patches go pipelined when the writer is the
        plain one (a create sent twice is a 409, taken as done; a merge patch means the same
        twice), deletes one by one through the client."""
        outcomes: list[bool | None] = [False] * len(writes)
        piped: list[int] = []
        for i, (key, op, body, written) in enumerate(writes):
            if op != "delete" and isinstance(self.api, HttpWriter):
                piped.append(i)
                continue
            try:
                if op == "delete":
                    self._delete(*key)
                else:
                    self.api.request(*_request(key, op, body, written))
                outcomes[i] = True
            except Exception as exc:
                outcomes[i] = self._failed(key, op, exc)
        if piped:
            answers = self.api.pipeline([Write(*_request(*writes[i])) for i in piped])
            for i, answer in zip(piped, answers, strict=True):
                key, op = writes[i][0], writes[i][1]
                outcomes[i] = self._failed(key, op, answer) \
                    if isinstance(answer, Exception) else True
        return outcomes

    def _failed(self, key: Key, op: str, exc: Exception) -> bool | None:
        """What a failed write means: True done after all (a create that finds the record, a
        delete that finds none), None the CRD is missing, False try again later."""
        namespace, name = key
        if isinstance(exc, ApiException):
            if op == "create" and exc.status == 409:
                return True  # ours from before a restart or a takeover, or our own resend
            if op == "create" and exc.status == 404:
                self._on_no_crd()
                return None
            if op == "delete" and exc.status == 404:
                return True
            log.warning("cannot write FluxJob %s/%s (%s): %s", namespace, name, op,
                        status_message(exc))
        else:
            log.warning("cannot write FluxJob %s/%s (%s): %s", namespace, name, op, exc)
        return False


def _request(key: Key, op: str, body: dict | None, written: dict | None) -> Write:
    """The create or status patch of one record as a write."""
    namespace, name = key
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    if op == "create":
        return Write("POST", base, body)
    old = (written or {}).get("status") or {}
    patch = {"status": {**{k: None for k in old}, **body["status"]}}  # type: ignore[index]
    return Write("PATCH", f"{base}/{name}/status", patch, MERGE_PATCH)
