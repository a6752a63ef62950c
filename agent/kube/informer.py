"""List + watch one kind of Kubernetes object, the way client-go informers do.

This is the one informer of the project: the node agent reads its cache (``snapshot``,
``get``), the binder takes its events. It lists, hands the full list over as a SYNC
(so an owner can drop what it missed), then watches from the list's resourceVersion
with bookmarks, resuming from the last version seen whenever a stream ends. When the
server says that version is gone (410, as an HTTP status or an ERROR event) it lists
again, so no change is silently lost. Connection failures back off exponentially,
bounded, with jitter, so a restarting API server is not hammered and recovery stays
quick. A 401/403 is a configuration problem no retry fixes: with an ``on_fatal``
handler the informer reports it and stops; without one it keeps retrying.
Objects stay plain JSON dicts (``_preload_content=False``): client model objects cost
more CPU than the work done with them, and reject objects from newer servers. An owner
that reads a few fields of each object passes a ``transform`` (as client-go's
SetTransform): the cache and the handlers see only what it returns. The JSON is read by
orjson (a compiled decoder, from the bytes as they come): the binder's pod informer decodes
every pod twice per workload in bench/workloads.py, most of that thread's CPU.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from fluxnode.agent.kube.api_error import ApiError, KubeAccessError, api_errors, denied, is_denied
from fluxnode.agent.kube.backoff import Backoff

log = logging.getLogger("fluxnode.informer")

EventHandler = Callable[[str, Any], None]
"""Called with ("SYNC", [objects]) after every list, or ("ADDED"|"MODIFIED"|"DELETED", object)."""

FatalHandler = Callable[[KubeAccessError], None]
"""Called once when the API refuses the list/watch (401/403); the informer then stops."""

WATCH_TIMEOUT = 300
"""Server-side watch timeout in seconds; the informer simply watches again."""

LIST_PAGE = 500
"""Objects per list request by default (client-go's reflector lists in pages of 500 too).
An owner that keeps a small transform of large objects lists in smaller pages (``page``):
a page of 500 Nodes as kubelets write them is about 30 MiB of parsed JSON, freed at once
but leaving the process that much larger (issue 32)."""


class WatchExpired(Exception):
    """The server no longer has the requested resourceVersion (410 Gone)."""


def object_key(obj: dict) -> str:
    """client-go's cache key: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else meta["name"]


class Informer:
    """One list+watch loop on a daemon thread, keeping ``object_key -> object`` in sync.

    ``list_call`` is a generated client method such as ``CoreV1Api.list_node``;
    ``list_kwargs`` (``namespace``, ``label_selector``, ``field_selector``) go to every
    list and watch. Handlers run on the informer's thread.
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_event: EventHandler | None = None,
        *,
        on_fatal: FatalHandler | None = None,
        watch_timeout: int = WATCH_TIMEOUT,
        backoff: Backoff | None = None,
        transform: Callable[[dict], dict] | None = None,
        page: int = LIST_PAGE,
        **list_kwargs: Any,
    ):
        self.name = name
        self._list_call = list_call
        self._list_kwargs = {k: v for k, v in list_kwargs.items() if v is not None}
        self._on_event = on_event or (lambda kind, obj: None)
        self._on_fatal = on_fatal
        self._transform = transform or (lambda obj: obj)
        self._watch_timeout = watch_timeout
        self._page = page
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = None  # of the last list, event or bookmark
        self.synced = threading.Event()  # set after the first list
        self.relists = 0
        self._lock = threading.Lock()
        self._objects: dict[str, dict] = {}
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed
                pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    @property
    def resource_version_number(self) -> int:
        """The last resourceVersion as an integer (etcd's are), 0 if none or not a number."""
        try:
            return int(self.resource_version or 0)
        except ValueError:
            return 0

    def snapshot(self, copy_objects: bool = True) -> dict[str, dict]:
        """The cache keyed by `object_key`: a deep copy, or with ``copy_objects=False`` a new
        dict of the cached objects themselves, for an owner that only reads them (the node
        agent: a copy of 5,000 node views per reconcile would double its cache, issue 32).
        The informer never changes a cached object, it replaces it, so either is a
        consistent picture of one moment."""
        with self._lock:
            return copy.deepcopy(self._objects) if copy_objects else dict(self._objects)

    def get(self, key: str) -> dict | None:
        """A copy of one cached object (key ``namespace/name`` or ``name``), None if absent."""
        with self._lock:
            obj = self._objects.get(key)
            return copy.deepcopy(obj) if obj is not None else None

    # -- loop ---------------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                self.backoff.reset()
            except WatchExpired as exc:
                log.info("%s: %s; listing again", self.name, exc)
                need_list = True
            except Exception as exc:
                if self._stop.is_set():
                    break
                if self._on_fatal is not None and is_denied(exc):
                    self._stop.set()
                    self._on_fatal(denied(f"cannot list/watch {self.name}", exc))
                    return
                delay = self.backoff.next_delay()
                log.warning("%s: %s; retrying in %.2fs", self.name, _describe(exc), delay)
                self._stop.wait(delay)

    def _list(self) -> None:
        """List in pages of ``page`` objects (client-go's reflector does the same): the
        whole list as sent is never held at once, only a page and what `transform` keeps."""
        items: list[dict] = []
        version: str | None = None
        token: str | None = None
        while True:
            paging = {"limit": self._page, **({"_continue": token} if token else {})}
            try:
                response = self._list_call(_preload_content=False, **paging, **self._list_kwargs)
            except api_errors() as exc:
                if exc.status == 410 and token:  # the snapshot the pages came from is gone
                    raise WatchExpired("list continuation expired") from None
                raise
            try:
                body = orjson.loads(response.data)
            finally:
                response.release_conn()
            meta = body.get("metadata") or {}
            version = version or meta["resourceVersion"]
            items.extend(self._transform(o) for o in body.get("items") or [])
            token = meta.get("continue")
            del body
            if not token:
                break
        with self._lock:
            self._objects = {object_key(o): o for o in items}
            self.resource_version = version
            self.relists += 1
        self._on_event("SYNC", items)
        self.synced.set()

    def _watch(self) -> None:
        try:
            response = self._list_call(
                _preload_content=False,
                _request_timeout=(10, self._watch_timeout + 30),
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                **self._list_kwargs,
            )
        except api_errors() as exc:
            if exc.status == 410:
                raise WatchExpired(
                    f"watch from resourceVersion {self.resource_version} is gone"
                ) from None
            raise
        self._response = response
        ended = False
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return
                if line.strip():
                    self._apply(orjson.loads(line))
            ended = True
        finally:
            self._response = None
            if (
                not ended
            ):  # unread stream: close it, or the server keeps the watch and the pool a dirty socket
                response.close()
            response.release_conn()

    def _apply(self, event: dict) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(obj.get("message") or "410 Gone")
            raise ApiError(obj.get("code", 500), obj.get("message") or str(obj))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if rv:
                self.resource_version = rv
            if kind == "BOOKMARK":
                return
            obj = self._transform(obj)
            key = object_key(obj)
            if kind == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        self._on_event(kind, obj)


def wait_synced(informers: list[Informer], timeout: float, stopped: Callable[[], bool]) -> bool:
    """True once every informer listed once; False on timeout or when ``stopped()``."""
    deadline = time.monotonic() + timeout
    for informer in informers:
        while not informer.synced.wait(0.1):
            if stopped() or time.monotonic() > deadline:
                return False
    return True


def iter_resp_lines(response: Any):
    """The lines of a streamed answer (a watch sends one JSON event per line), as they come,
    as bytes: orjson reads UTF-8 itself (refusing what is not), with no str made first."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from lines
    if buffer:
        yield buffer


def _describe(exc: Exception) -> str:
    if isinstance(exc, api_errors()):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
