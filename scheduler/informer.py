"""List + watch one kind of Kubernetes object, the way client-go informers do.

A watch resumes from the last resourceVersion it saw; when the server says
that version is gone (410, as an HTTP status or an ERROR event) the informer
lists again and hands the full list over as a SYNC so the owner can drop what
it missed. Connection failures back off exponentially, bounded, with jitter,
so a restarting API server is not hammered and recovery stays quick.
Objects stay plain dicts (``_preload_content=False``): building client model
objects would cost more CPU than all the scheduling.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluxnode.scheduler import kube_raw
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger("fluxnode.binder.informer")

EventHandler = Callable[[str, Any], None]
"""Called with ("SYNC", [objects]) after every list, or ("ADDED"|"MODIFIED"|"DELETED", object)."""


class WatchExpired(Exception):
    """The server no longer has the requested resourceVersion (410 Gone)."""


@dataclass
class Backoff:
    """Bounded exponential backoff with full jitter; `reset` after a success."""

    initial: float = 0.05
    maximum: float = 5.0
    factor: float = 2.0
    _current: float = 0.0

    def next_delay(self) -> float:
        self._current = self.initial if self._current == 0 else min(self.maximum, self._current * self.factor)
        return random.uniform(self._current / 2, self._current)

    def reset(self) -> None:
        self._current = 0.0


class Informer:
    """One list+watch loop on its own thread.

    `list_call` is a generated client method such as
    ``CoreV1Api.list_pod_for_all_namespaces``; it is called with raw-response
    options so objects arrive as dicts.
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_event: EventHandler,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
    ):
        self.name = name
        self._list_call = list_call
        self._on_event = on_event
        self._selectors = {
            k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v
        }
        self._watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.relists = 0
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
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

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
                delay = self.backoff.next_delay()
                log.warning("%s: %s; retrying in %.2fs", self.name, _describe(exc), delay)
                self._stop.wait(delay)

    def _list(self) -> None:
        body = kube_raw.call(self._list_call, **self._selectors)
        self.resource_version = body["metadata"]["resourceVersion"]
        self.relists += 1
        self._on_event("SYNC", body.get("items") or [])
        self.synced.set()

    def _watch(self) -> None:
        try:
            response = self._list_call(
                _preload_content=False,
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                **self._selectors,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired(f"watch from resourceVersion {self.resource_version} is gone") from None
            raise
        self._response = response
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(obj.get("message") or "410 Gone")
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind != "BOOKMARK":
                    self._on_event(kind, obj)
        finally:
            self._response = None
            response.release_conn()


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
