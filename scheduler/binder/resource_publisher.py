"""The leader's resource list, published by the lead binder into one ConfigMap (issue 30).

``kubectl fluxnode resources`` prints what ``fluxnode resource list`` prints on a node, but
with the user's Kubernetes credentials only: no shell on a node, no CURVE certificate. The
lead binder already holds a connection to the leader's broker (sched_client.py), so it asks
``resource.list`` there and writes the answer into the ConfigMap ``fluxnode-resources`` in
its own namespace; the plugin reads that object.

Why a ConfigMap written by the binder, not the API server's service proxy to the binder's
HTTP port: the proxy (``/api/v1/namespaces/fluxnode/services/...:10259/proxy/``) would need
the user to be granted ``services/proxy``, which reaches every path of that port (metrics,
health) and, in many clusters, is handed out to nobody but administrators; it also fails
exactly when one wants to know why (the binder down means no answer at all, rather than an
old answer saying how old). An object is readable with an ordinary ``get`` that a Role can
grant by name (``fluxnode-resources-reader`` in daemonset/binder.yaml), is cached by nothing
but etcd, survives the binder, and says when it was taken.

Least privilege: the ConfigMap ships with the manifests (daemonset/binder.yaml, no ``data``,
so a later ``kubectl apply`` leaves what the binder wrote); the binder may only ``patch`` it,
by name (RBAC cannot limit ``create`` by name). A missing ConfigMap is logged, not created.

Rate: the leader is asked at most every ``resources_interval`` seconds (by the lead replica
only, from its loop thread, which owns the service connection), and the ConfigMap is written
when the list changed or when the last write is ``resources_refresh`` seconds old; so an
idle cluster costs one small write a minute, and ``takenAt`` older than a few refresh
periods means nobody is publishing (no lead binder, or it does not reach the leader).
``refreshSeconds`` is written too, so the reader judges staleness by the writer's setting.

Size: one object holds at most 1 MiB of values, which a per-node list passes at about 5,000
nodes; the list is written as groups of nodes of one shape (resource_shapes.py), gzip'd into
``binaryData`` when large, so 20,000 nodes fit.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluxnode.agent.broker.client import RPCError
from fluxnode.agent.kube.api_client import status_message
from fluxnode.scheduler.binder import resource_shapes
from fluxnode.scheduler.binder.queue import rfc3339
from fluxnode.scheduler.binder.resource_shapes import ShapesError
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger("fluxnode.binder.resources")

NAME = "fluxnode-resources"
LIST_KEY = "resources.json"  # resource.list's free/allocated/down entries (as shapes)
GZIP_KEY = "resources.json.gz"  # binaryData: the same, gzip'd, when large
# the values besides the list (takenAt, refreshSeconds, publishedBy) take far less than this
OTHER_VALUES = 4096
TAKEN_KEY = "takenAt"  # RFC 3339, UTC, when the leader answered
REFRESH_KEY = "refreshSeconds"  # the writer's refresh period
BY_KEY = "publishedBy"  # the binder replica (its Lease identity)
STATES = ("free", "allocated", "down")
ENTRY_FIELDS = ("rank", "hostname", "ncores", "ngpus", "cores", "gpus")
STALE_PERIODS = 3  # a list older than this many refresh periods is stale


class RecordError(ValueError):
    """The ConfigMap's data is not a resource list this version can read."""


def parse_rfc3339(text: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        raise RecordError(f"{TAKEN_KEY} {text!r} is not an RFC 3339 UTC time") from None


@dataclass(frozen=True)
class ResourceRecord:
    """What the ConfigMap holds: the listing, when it was taken, by whom, how often."""

    listing: dict  # {"free": [...], "allocated": [...], "down": [...]}
    taken_at: float  # seconds since the epoch (whole seconds: RFC 3339 to the second)
    refresh: float
    published_by: str

    @staticmethod
    def trim(answer: dict) -> dict:
        """resource.list's answer, the states `resource list` prints and their fields only."""
        return {s: [{k: e[k] for k in ENTRY_FIELDS if k in e} for e in answer.get(s) or []]
                for s in STATES}

    def to_patch(self) -> dict:
        """A merge patch of the ConfigMap writing this record (the list as text or gzip'd;
        the other key removed). Raises RecordError when it cannot fit one object."""
        try:
            data, binary, _ids = resource_shapes.fitting(
                self.listing, LIST_KEY, GZIP_KEY, resource_shapes.MAX_OBJECT - OTHER_VALUES)
        except ShapesError as exc:
            raise RecordError(str(exc)) from None
        data.update({TAKEN_KEY: rfc3339(self.taken_at), REFRESH_KEY: f"{self.refresh:g}",
                     BY_KEY: self.published_by})
        return {"data": data, "binaryData": binary}

    @classmethod
    def from_data(cls, data: dict[str, str] | None,
                  binary: dict[str, str] | None = None) -> ResourceRecord | None:
        """The record in a ConfigMap's data and binaryData; None when nothing was published
        yet (the ConfigMap as the manifests ship it)."""
        data = data or {}
        try:
            doc = resource_shapes.decode(data, binary or {}, LIST_KEY, GZIP_KEY)
            if doc is None:
                return None
            listing = resource_shapes.ungroup(doc)
            refresh = float(data.get(REFRESH_KEY, "60"))
        except (ShapesError, ValueError) as exc:
            raise RecordError(f"{LIST_KEY}: {exc}") from None
        return cls(listing, parse_rfc3339(data.get(TAKEN_KEY, "")), refresh,
                   data.get(BY_KEY, ""))

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.taken_at)

    def stale(self, now: float | None = None) -> bool:
        return self.age(now) > STALE_PERIODS * self.refresh


class ResourcePublisher:
    """Called from the binder's loop while it leads; `rpc` is the service connection's
    (SchedUnavailable goes up: the loop handles a leader that went away), `patch` writes the
    ConfigMap's data (a refusal or an API server away is logged here and tried again next
    interval: publishing never slows the loop's scheduling down)."""

    def __init__(self, rpc: Callable[[str, dict], dict], patch: Callable[[dict], Any],
                 identity: str, interval: float, refresh: float,
                 clock: Callable[[], float] = time.monotonic):
        self.rpc, self.patch, self.identity = rpc, patch, identity
        self.interval, self.refresh, self.clock = interval, refresh, clock
        self._asked: float | None = None  # when the leader was last asked (clock)
        self._written: float | None = None  # when the ConfigMap was last written (clock)
        self._listing: dict | None = None  # what was last written
        self._failing = ""  # the last write error logged (each new one is logged once)

    def run(self) -> bool:
        """Ask and write when due; True when the ConfigMap was written now."""
        now = self.clock()
        if self._asked is not None and now - self._asked < self.interval:
            return False
        self._asked = now
        try:
            listing = ResourceRecord.trim(self.rpc("resource.list", {}))
        except RPCError as exc:  # a refusal, not the leader gone: never the loop's failure
            self._note(f"the leader refused resource.list: {exc.errstr}")
            return False
        taken = time.time()
        if listing == self._listing and self._written is not None \
                and now - self._written < self.refresh:
            return False
        record = ResourceRecord(listing, taken, self.refresh, self.identity)
        try:
            body = record.to_patch()
        except RecordError as exc:
            self._note(f"the list does not fit ConfigMap {NAME}: {exc}")
            return False
        try:
            self.patch(body)
        except ApiException as exc:
            hint = " (it ships with daemonset/binder.yaml)" if exc.status == 404 else ""
            self._note(f"cannot write ConfigMap {NAME}: {status_message(exc)}{hint}")
            return False
        except (HTTPError, OSError) as exc:  # the API server away: the next interval tries
            self._note(f"cannot write ConfigMap {NAME}: {exc}")
            return False
        if self._failing:
            log.info("resource list published again into ConfigMap %s", NAME)
        self._failing = ""
        self._listing, self._written = listing, now
        return True

    def _note(self, text: str) -> None:
        """Why nothing was published; each new reason logged once."""
        if text != self._failing:
            log.warning("resource list not published: %s", text)
            self._failing = text

    def forget(self) -> None:
        """Leadership lost or regained: the next lead step asks and writes at once."""
        self._asked = self._written = None
        self._listing = None
