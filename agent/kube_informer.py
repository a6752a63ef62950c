"""A list-then-watch cache of one kind of Kubernetes object, like client-go's informer.

It lists, then watches from the list's resourceVersion (with bookmarks), and re-lists
when the server says 410 Gone, so the cache never silently misses a change. Objects
are kept as plain JSON dicts: the agent needs a few fields, and the official client's
strict models would reject objects from newer servers. Every change calls
``on_change`` (from the informer's thread); a refused request calls ``on_fatal``.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fluxnode.agent.kube_access import denied, is_denied
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

log = logging.getLogger("fluxnode.agent.informer")

WATCH_TIMEOUT = 300  # server-side watch timeout; the informer simply re-watches
RETRY_MIN, RETRY_MAX = 0.2, 10.0


class Informer:
    """Keeps ``objects`` (name -> object) in sync with the API server on a daemon thread."""

    def __init__(self, what: str, list_func: Callable[..., Any], *, on_change: Callable[[str], None],
                 on_fatal: Callable[[Exception], None], **list_kwargs: Any):
        self.what = what
        self._list = list_func
        self._kwargs = list_kwargs
        self._on_change = on_change
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._objects: dict[str, dict] = {}
        self.resource_version = 0  # of the last list/event/bookmark seen
        self.synced = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{what}", daemon=True)
        self.relists = 0

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return copy.deepcopy(self._objects)

    def get(self, name: str) -> dict | None:
        with self._lock:
            obj = self._objects.get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def _set_rv(self, rv: str | None) -> None:
        try:
            self.resource_version = max(self.resource_version, int(rv or 0))
        except ValueError:  # resourceVersions are opaque; etcd's are integers
            pass

    def _run(self) -> None:
        delay = RETRY_MIN
        while not self._stopped.is_set():
            try:
                rv = self._relist()
                while not self._stopped.is_set():
                    rv = self._watch(rv)
                    if rv is None:  # 410 Gone: our resourceVersion is too old
                        break
                delay = RETRY_MIN
            except ApiException as exc:
                if is_denied(exc):
                    self._on_fatal(denied(f"cannot list/watch {self.what}", exc))
                    return
                log.warning("%s: API error %s, retrying in %.1fs", self.what, exc.status, delay)
            except (HTTPError, OSError, ValueError) as exc:
                log.warning("%s: %s, retrying in %.1fs", self.what, exc, delay)
            self._stopped.wait(delay)
            delay = min(delay * 2, RETRY_MAX)

    def _relist(self) -> str:
        resp = self._list(**self._kwargs, _preload_content=False)
        body = json.loads(resp.data)
        items = {o["metadata"]["name"]: o for o in body.get("items") or []}
        rv = body["metadata"]["resourceVersion"]
        with self._lock:
            changed = items != self._objects
            self._objects = items
            self._set_rv(rv)
            self.relists += 1
        self.synced.set()
        if changed or self.relists == 1:
            self._on_change(self.what)
        return rv

    def _watch(self, rv: str) -> str | None:
        """Watch from ``rv`` until the server ends the stream; None means re-list (410)."""
        resp = self._list(**self._kwargs, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                          timeout_seconds=WATCH_TIMEOUT, _preload_content=False,
                          _request_timeout=(10, WATCH_TIMEOUT + 30))
        try:
            for line in iter_resp_lines(resp):
                if self._stopped.is_set():
                    return rv
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch expired (%s), re-listing", self.what, obj.get("message"))
                        return None
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    with self._lock:
                        self._set_rv(rv)
                    continue
                name = obj["metadata"]["name"]
                with self._lock:
                    if kind == "DELETED":
                        self._objects.pop(name, None)
                    else:
                        self._objects[name] = obj
                    self._set_rv(rv)
                self._on_change(self.what)
        finally:
            resp.release_conn()
        return rv


def wait_synced(informers: list[Informer], timeout: float, stopped: Callable[[], bool]) -> bool:
    """True once every informer listed once; False on timeout or when ``stopped()``."""
    deadline = time.monotonic() + timeout
    for inf in informers:
        while not inf.synced.wait(0.1):
            if stopped() or time.monotonic() > deadline:
                return False
    return True
