"""Writing FluxJob records off the binder's loop thread (issue 30's workloads bench).

The FluxJob loop decides a record's status on the loop thread; writing it there cost a
round trip to the API server per record and per change (create, Queued, Admitted, the
bound count, Running), which held up every other decision: in bench/workloads.py these
writes were ~40% of the loop's wall time. Here the loop only says what a record should
be; the bind workers (`BinderContext.pool`) write it, one record at a time in the order
asked (create before any status, delete last), and a status asked for while an older one
is still waiting replaces it: only the newest is written (a record reads as its Job is
now, never as it was in between). Records are independent of one another, so many are
written at once.

**Settling counts**: while an admitted Job's pods are being bound, the loop asks for a status
per bound count it sees (Admitted 1 of 3, 2 of 3, then Running). Such a status is asked with
``settle=True``: it waits `SETTLE` seconds (kicked by `retry`, which the loop calls every
pass, at least every resync) unless a status that does not settle (Running, Queued again,
...) replaces it first, which is written at once. A Job bound within that time gets no
intermediate count written at all (bench/workloads.py: 3.97 -> ~2 status writes per
workload); one whose binding stalls shows its count at most SETTLE (or a resync) late.

A status is a merge patch of the status subresource; fields set in the last status
written and unset now are sent as null so they go away. A write that fails (the API
server away, 5xx) is kept and tried again from the loop (`retry`), as pod reports are.
A 404 at create means the CRD is not installed: that record is never written (the
caller is told once, through `on_no_crd`); a 409 means it exists already (ours, from
before a restart or a takeover).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from fluxnode.agent.kube.api_client import status_message
from fluxnode.scheduler.binder.binding import PodWriter
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder")

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
MERGE_PATCH = "application/merge-patch+json"
SETTLE = 0.5  # seconds an intermediate bound count waits for a newer status

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
        # the keys whose record may be failed or settling: what `retry`, called every loop
        # pass, looks at (a scan of every record per pass was a tenth of the loop's CPU in
        # bench/workloads.py's burst)
        self._due: set[Key] = set()
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
                self._due.add(key)
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
        """Write again the records whose last write failed, and the settling counts whose
        time is up (called from the loop)."""
        now = time.monotonic()
        failed: list[tuple[Key, _Record]] = []
        with self._lock:
            for key in list(self._due):
                record = self._records.get(key)
                if record is None or not (record.failed or record.settle_at is not None):
                    self._due.discard(key)  # written, replaced or gone since
                elif record.failed or record.settle_at <= now:  # type: ignore[operator]
                    failed.append((key, record))
            for key, record in failed:
                record.failed = False
                if record.settle_at is not None and record.settle_at <= now:
                    record.settle_at = None
                if record.settle_at is None:
                    self._due.discard(key)
        for key, record in failed:
            self._kick(key, record)

    def _kick(self, key: Key, record: _Record) -> None:
        with self._lock:
            if record.busy or record.failed:
                return
            record.busy = True
        self.pool.submit(self._drain, key, record)

    # -- a worker's side -----------------------------------------------------------------

    def _drain(self, key: Key, record: _Record) -> None:
        """Write what is asked for `record` until nothing is left (one worker at a time)."""
        while True:
            with self._lock:
                if record.create is not None:
                    op, body = "create", record.create
                elif record.delete:
                    op, body = "delete", None
                elif record.status is not None and record.status != record.written \
                        and record.settle_at is None:
                    op, body = "status", record.status
                elif record.status is not None and record.status != record.written:
                    record.busy = False  # a settling count: `retry` kicks it when due
                    return
                else:
                    record.status, record.settle_at = None, None
                    record.busy = False
                    return
                written, record.sending = record.written, op
            try:
                done = self._write(key, op, body, written)
            except Exception as exc:  # never lose the record: the loop retries it
                log.warning("cannot write FluxJob %s/%s (%s): %s", *key, op, exc)
                done = False
            with self._lock:
                record.sending = ""
                if op == "create":
                    record.create = None
                    if done is None:  # no CRD
                        record.absent, record.status = True, None
                elif op == "delete" and done:
                    if record.recreate is not None:  # the Job came back meanwhile
                        record.create, record.recreate = record.recreate, None
                        record.delete, record.written = False, None
                        continue
                    if self._records.get(key) is record:
                        del self._records[key]
                    record.busy = False
                    return
                elif done:
                    record.written = body
                    if record.status is body:
                        record.status = None
                if done is False:
                    if op == "create":
                        record.create = body  # tried again
                    record.failed, record.busy = True, False
                    self._due.add(key)
                    return

    def _write(self, key: Key, op: str, body: dict | None, written: dict | None) -> bool | None:
        """One write: True done, False failed (try again later), None the CRD is missing."""
        namespace, name = key
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        try:
            if op == "create":
                self.api.request("POST", base, body)
            elif op == "delete":
                self._delete(namespace, name)
            else:
                old = (written or {}).get("status") or {}
                patch = {"status": {**{k: None for k in old}, **body["status"]}}
                self.api.request("PATCH", f"{base}/{name}/status", patch, MERGE_PATCH)
            return True
        except ApiException as exc:
            if op == "create" and exc.status == 409:
                return True  # ours from before a restart or a takeover
            if op == "create" and exc.status == 404:
                self._on_no_crd()
                return None
            if op == "delete" and exc.status == 404:
                return True
            log.warning("cannot write FluxJob %s/%s (%s): %s", namespace, name, op,
                        status_message(exc))
            return False
