"""The PodGroup objects users already write, watched only where their CRD is installed.

scheduler-plugins' PodGroup (``scheduling.x-k8s.io/v1alpha1``) and Volcano's
(``scheduling.volcano.sh/v1beta1``) size a group by ``spec.minMember`` (podgroup.py). Most
clusters have neither CRD, and a list or watch of a resource the API server does not serve
is a 404 an informer would retry for ever, so the binder asks discovery first
(``GET /apis/<group>/<version>``, which every authenticated user may read: the
``system:discovery`` ClusterRole) and starts an informer for a kind only once its
``podgroups`` resource is served. Discovery is asked again every ``interval`` seconds, so a
CRD installed after the binder started is picked up without a restart; a CRD removed
stops its informer and forgets its objects.

Every replica runs this (the webhook sizes groups too), beside leader election. The
objects are kept as `PodGroupObject` under a lock: the webhook's threads and the binder's
loop read them, the informers' threads write them. Each change calls ``on_change(kind,
namespace, name)`` (the binder re-sizes that group's pods), and a kind becoming installed
or not calls it with ``name`` None (every group of that kind is re-sized).

A kind whose list or watch is refused (401/403: the binder's RBAC lacks ``podgroups``) is
logged once as an error and treated as not installed from then on, so the binder still
becomes Ready and places groups (sized by their pods' labels) rather than waiting for ever.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.informer import Informer
from fluxnode.scheduler.binder.podgroup import POD_GROUP_KINDS, PodGroupKind, PodGroupObject
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder.podgroups")

ChangeHandler = Callable[[PodGroupKind, str | None, str | None], None]


def served(custom: CustomObjectsApi, kind: PodGroupKind) -> bool:
    """Discovery says the API server serves kind's resource (its CRD is installed)."""
    try:
        resources = kube_raw.call(custom.get_api_resources, kind.group, kind.version)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.get("name") == kind.plural for r in (resources or {}).get("resources") or [])


def podgroup_object(kind: PodGroupKind, obj: dict) -> PodGroupObject:
    meta = obj.get("metadata") or {}
    value = (obj.get("spec") or {}).get("minMember")
    return PodGroupObject(kind, meta.get("namespace") or "default", meta.get("name") or "",
                          meta.get("uid") or "", value if isinstance(value, int) else None)


class PodGroupWatch:
    """A `PodGroupDirectory` (podgroup.py) kept by discovery and informers."""

    def __init__(self, api_client, on_change: ChangeHandler, interval: float = 30.0,
                 watch_timeout: int = 300):
        self.api_client = api_client
        self.custom = CustomObjectsApi(api_client)
        self.on_change = on_change
        self.interval = interval
        self.watch_timeout = watch_timeout
        self.informers: dict[PodGroupKind, Informer] = {}
        self._objects: dict[tuple[PodGroupKind, str, str], PodGroupObject] = {}
        self._listed: set[PodGroupKind] = set()
        self._denied: set[PodGroupKind] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._discovered = threading.Event()
        self._thread = threading.Thread(target=self._run, name="podgroup-discovery",
                                        daemon=True)

    # -- the directory (any thread) ---------------------------------------------------

    def installed(self, kind: PodGroupKind) -> bool:
        """Served, and its objects listed once (so a missing object is really missing)."""
        with self._lock:
            return kind in self._listed

    def get(self, kind: PodGroupKind, namespace: str, name: str) -> PodGroupObject | None:
        with self._lock:
            return self._objects.get((kind, namespace, name))

    @property
    def synced(self) -> bool:
        """Discovery answered once and every installed kind's informer has listed."""
        return self._discovered.is_set() and all(
            i.synced.is_set() for i in list(self.informers.values()))

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> PodGroupWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for informer in list(self.informers.values()):
            informer.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = not self._discovered.is_set()
                self.discover()
                self._discovered.set()
                if first:  # wake a loop that waits for `synced` (a binder with a long resync)
                    for kind in POD_GROUP_KINDS:
                        self.on_change(kind, None, None)
            except Exception as exc:  # the API server away: try again next round
                log.warning("PodGroup discovery failed: %s; trying again", exc)
            self._stop.wait(self.interval)

    def discover(self) -> None:
        """Start an informer for each kind now served, stop those of kinds gone."""
        for kind in POD_GROUP_KINDS:
            if kind in self._denied:
                continue
            now = served(self.custom, kind)
            informer = self.informers.get(kind)
            if now and informer is None:
                log.info("PodGroup CRD %s installed: watching its objects", kind.api_version)
                # kept before it starts: a list refused at once (403) calls `_refused` on
                # the informer's thread, which must find it here to drop it, or the dead
                # informer would stay and `synced` would never be true (never Ready)
                self.informers[kind] = Informer(
                    f"podgroups.{kind.group}",
                    functools.partial(self.custom.list_cluster_custom_object, kind.group,
                                      kind.version, kind.plural),
                    functools.partial(self._event, kind),
                    on_fatal=functools.partial(self._refused, kind),
                    watch_timeout=self.watch_timeout,
                )
                self.informers[kind].start()
            elif not now and informer is not None:
                log.info("PodGroup CRD %s removed: its groups are sized by their pods",
                         kind.api_version)
                informer.stop()
                del self.informers[kind]
                with self._lock:
                    self._listed.discard(kind)
                    for key in [k for k in self._objects if k[0] == kind]:
                        del self._objects[key]
                self.on_change(kind, None, None)

    def _refused(self, kind: PodGroupKind, exc: Exception) -> None:
        """(The informer's thread, which then stops.) Not allowed to read kind's objects."""
        log.error("%s; PodGroups of %s are not read and their groups are sized by their "
                  "pods' labels (add podgroups get/list/watch to the binder's ClusterRole)",
                  exc, kind.api_version)
        self._denied.add(kind)
        self.informers.pop(kind, None)
        with self._lock:
            self._listed.discard(kind)

    def _event(self, kind: PodGroupKind, event: str, obj) -> None:
        if event == "SYNC":
            with self._lock:
                for key in [k for k in self._objects if k[0] == kind]:
                    del self._objects[key]
                for o in obj:
                    found = podgroup_object(kind, o)
                    self._objects[(kind, found.namespace, found.name)] = found
                self._listed.add(kind)
            self.on_change(kind, None, None)
            return
        found = podgroup_object(kind, obj)
        with self._lock:
            if event == "DELETED":
                self._objects.pop((kind, found.namespace, found.name), None)
            else:
                self._objects[(kind, found.namespace, found.name)] = found
        self.on_change(kind, found.namespace, found.name)
