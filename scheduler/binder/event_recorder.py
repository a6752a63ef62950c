"""The binder's Events, posted by a thread of their own from a bounded queue.

kube-scheduler records one ``Scheduled`` Event per pod it binds, and `kubectl describe pod`
users look for it, so the binder does too (binding.py builds them). What Kubernetes'
recorder does not do is post them where the scheduling happens: client-go's recorder
(k8s.io/client-go/tools/record) puts an Event on a queue of at most 1,000
(``maxQueuedEvents``, a broadcaster that drops when full) and a goroutine of its own writes
them; a source's Events about one object go through a token bucket first (the spam filter:
25 at once, then one per 300 s, its keys in an LRU of 4,096). An Event is best effort there:
one the API server refuses is not sent again.

Here the same, for the same reasons: `post` only appends to a queue of at most `LIMIT`
Events (ten times client-go's, see `LIMIT`; a full queue drops the new one, counted in
`dropped` and the binder's ``fluxnode_binder_events_dropped`` metric) after the per-object
filter (`SpamFilter`, client-go's defaults; counted in `filtered`), and the ``events``
thread sends what is queued, up to `BATCH` at a time pipelined on its own connection
(http_writer.py: one send per window, the answers read in order; without the plain writer,
an HTTP proxy, one by one). So the bind workers, which posted 8 Events after each Job's 8
Bindings, only bind, and a burst's Events go out in large sends (bench/workloads.py).
A failed Event is logged and never sent again, as
before and as client-go does with a refused one (an Event's name is unique: sent twice, the
second is a 409).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from fluxnode.agent.kube.api_client import status_message
from fluxnode.scheduler.binder.http_writer import HttpWriter, Write
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder.events")

# Events queued at most: client-go's broadcaster keeps 1,000 (maxQueuedEvents), posted one
# at a time; a binder binds a burst's pods far faster than the API server takes their Events
# (bench/workloads.py: 1,600 pods bound in ~3 s; with 1,000 a tenth of their Events were
# dropped), so room for a large burst's, ~1 KiB each
LIMIT = 10_000
BATCH = 64  # Events pipelined in one send
SPAM_BURST, SPAM_PER_SECOND = 25, 1 / 300  # client-go's defaultSpamBurst, defaultSpamQPS
SPAM_KEYS = 4096  # objects the filter remembers (client-go's maxLruCacheEntries)


class SpamFilter:
    """A token bucket per object an Event is about (client-go's EventSourceObjectSpamFilter,
    for one source): `allow` takes a token from the object's bucket, which holds `burst` and
    refills at `per_second`; the least recently used of more than `keys` objects is
    forgotten (its next Event starts a full bucket)."""

    def __init__(self, burst: int = SPAM_BURST, per_second: float = SPAM_PER_SECOND,
                 keys: int = SPAM_KEYS, clock: Callable[[], float] = time.monotonic):
        self.burst, self.per_second, self.keys, self.clock = burst, per_second, keys, clock
        self._buckets: OrderedDict[tuple, tuple[float, float]] = OrderedDict()

    def allow(self, key: tuple) -> bool:
        now = self.clock()
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_second)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self.keys:
            self._buckets.popitem(last=False)
        return allowed


class EventRecorder:
    """Post Events (path, body) from one thread; `start` it, `stop` it (see the module)."""

    def __init__(self, api: Any, limit: int = LIMIT, spam: SpamFilter | None = None,
                 on_drop: Callable[[], None] | None = None):
        self.api = api  # HttpWriter, or RawApi behind a proxy
        self.limit = limit
        self.spam = spam if spam is not None else SpamFilter()
        self._on_drop = on_drop
        self.dropped = 0  # Events the full queue refused
        self.filtered = 0  # Events the spam filter refused
        self._queue: deque[tuple[str, dict]] = deque()
        self._sending = 0  # Events taken by the thread and not answered yet
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def post(self, path: str, body: dict) -> bool:
        """Queue an Event; False when it was dropped (queue full) or filtered (its object's
        bucket empty). Never blocks on the API server."""
        involved = body.get("involvedObject") or {}
        key = (involved.get("kind"), involved.get("namespace"), involved.get("name"),
               involved.get("uid"), body.get("type"), body.get("reason"))
        with self._cond:
            if not self.spam.allow(key):
                self.filtered += 1
                return False
            if len(self._queue) >= self.limit:
                self.dropped += 1
                dropped = True
            else:
                self._queue.append((path, body))
                self._cond.notify()
                dropped = False
        if dropped:
            if self._on_drop is not None:
                self._on_drop()
            log.warning("Event queue full (%d): %s event for %s %s/%s dropped", self.limit,
                        body.get("reason"), involved.get("kind"), involved.get("namespace"),
                        involved.get("name"))
        return not dropped

    def start(self) -> EventRecorder:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()
        return self

    def flush(self, timeout: float) -> bool:
        """Wait until every Event queued has been sent (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._sending, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then end the thread."""
        if self._thread is None:
            return
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if self._stopping:
                    return
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                self._sending = len(batch)
            try:
                self._send(batch)
            except Exception:  # a bug must cost these Events, never the thread
                log.exception("cannot record %d events", len(batch))
            finally:
                with self._cond:
                    self._sending = 0
                    self._cond.notify_all()

    def _send(self, batch: list[tuple[str, dict]]) -> None:
        if isinstance(self.api, HttpWriter):
            answers = self.api.pipeline([Write("POST", path, body) for path, body in batch])
        else:
            answers = []
            for path, body in batch:
                try:
                    self.api.request("POST", path, body)
                    answers.append(b"")
                except Exception as exc:
                    answers.append(exc)
        for (_path, body), answer in zip(batch, answers, strict=True):
            if isinstance(answer, Exception):
                involved = body.get("involvedObject") or {}
                detail = status_message(answer) if isinstance(answer, ApiException) \
                    else answer
                log.warning("cannot record %s event for %s %s/%s: %s", body.get("reason"),
                            involved.get("kind"), involved.get("namespace"),
                            involved.get("name"), detail)

