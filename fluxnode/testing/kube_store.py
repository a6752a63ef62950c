"""The emulator's object store: what etcd plus the API server's registry strategies do.

Thread-safe (one lock) because the HTTP server runs on its own event loop thread while
tests read and set state directly. Every write takes the next value of one global
resourceVersion counter and is appended to a change history that watches replay from,
so list-then-watch informers see exactly what they would see against a real server,
including 410 Gone once the history they need was compacted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import datetime
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fluxnode.testing import kube_priority
from fluxnode.testing.kube_admission import (
    MUTATING_REF,
    VALIDATING_REF,
    configuration_causes,
    default_configuration,
)
from fluxnode.testing.kube_copy import json_copy
from fluxnode.testing.kube_crd import (
    CRD_REF,
    CrdNotEmulated,
    CustomResource,
    define,
    established_status,
    name_taken,
)
from fluxnode.testing.kube_crd_schema import apply_defaults, prune
from fluxnode.testing.kube_crd_schema import validate as validate_schema
from fluxnode.testing.kube_events import event_causes
from fluxnode.testing.kube_job_validation import default_pod_failure_policy, job_causes
from fluxnode.testing.kube_patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from fluxnode.testing.kube_types import (  # noqa: F401 (the store's importers use them)
    BY_REF,
    DEFAULT_NAMESPACES,
    RESOURCES,
    RETURNS_DELETED_OBJECT,
    ApiError,
    ResourceType,
    bad_request,
    conflict,
    invalid,
    not_found,
)


def _same(obj: Any) -> Any:
    return obj


# Object uids: random version 4 UUIDs, as the API server's (uuid.NewUUID). Drawn from a
# generator seeded once from the system's randomness, not from os.urandom per object: the
# system call was 4% of the server thread's samples in bench/workloads.py (two per pod).
# A uid only has to be unique; nothing depends on its value, so no seed is fixed.
_UIDS = random.Random()
# the version (4) and variant (RFC 4122) bits, set as uuid.UUID(int=..., version=4) sets
# them; formatted here, without a UUID object (a third of the cost, bench/workloads.py)
_UID_BITS = (0x4 << 76) | (0x2 << 62)
_UID_MASK = ~((0xF << 76) | (0x3 << 62))


def new_uid() -> str:
    """A random version 4 UUID, as text."""
    h = f"{(_UIDS.getrandbits(128) & _UID_MASK) | _UID_BITS:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)$")


# labels (key, value) found valid, not checked again (the rules never change); at most this
# many kept, then forgotten all at once
_VALID_LABELS: set[tuple[str, str]] = set()
_VALID_LABELS_KEPT = 50_000


DEFAULT_TERMINATION_GRACE = 30  # seconds: the pod spec default


def default_job(job: dict) -> None:
    """A batch/v1 Job as the API server stores it (in place): the defaults of
    pkg/apis/batch/v1/defaults.go (parallelism and completions 1 when neither is set,
    parallelism 1, backoffLimit 6, completionMode NonIndexed, suspend false,
    podReplacementPolicy TerminatingOrFailed) and the job strategy's generated selector
    (pkg/registry/batch/job/strategy.go, generateSelector): the template labelled with the
    Job's uid and name, the selector matching the uid."""
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    # (with backoffLimitPerIndex the Job's own limit is MaxInt32: each index has its own)
    spec.setdefault("backoffLimit", 6 if spec.get("backoffLimitPerIndex") is None
                    else 2**31 - 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy",
                    "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    default_pod_failure_policy(spec)
    if spec.get("manualSelector"):
        return
    meta = job["metadata"]
    uid, name = meta["uid"], meta["name"]
    template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}),
                               "batch.kubernetes.io/controller-uid": uid,
                               "batch.kubernetes.io/job-name": name,
                               "controller-uid": uid, "job-name": name}
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def scheduling_gate_causes(pod: dict, old: dict | None) -> list[tuple[str, str]]:
    """A pod's schedulingGates as pkg/apis/core/validation/validation.go checks them: each
    named, no name twice (validateSchedulingGates); on an update only removals
    (validateOnlyDeletedSchedulingGates: a new gate is Forbidden, named by its index in the
    new list)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    causes: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, gate in enumerate(gates):
        name = gate.get("name", "") if isinstance(gate, dict) else ""
        if not name:
            causes.append((f"spec.schedulingGates[{i}].name", "Required value"))
        elif name in seen:
            causes.append((f"spec.schedulingGates[{i}].name", f'Duplicate value: "{name}"'))
        seen.add(name)
    if old is not None and gates:
        before = {g.get("name") for g in (old.get("spec") or {}).get("schedulingGates") or []}
        for i, gate in enumerate(gates):
            name = gate.get("name", "") if isinstance(gate, dict) else ""
            if name and name not in before:
                causes.append((f"spec.schedulingGates[{i}].name", "Forbidden: only deletion is "
                               f"allowed, but found new scheduling gate '{name}'"))
    return causes


MAX_CONFIGMAP_BYTES = 1024 * 1024  # core.MaxSecretSize


def configmap_size_causes(cm: dict) -> list[tuple[str, str]]:
    """ValidateConfigMap's size rule (pkg/apis/core/validation): the values of data and
    binaryData (decoded) together at most 1 MiB, reported on the whole object."""
    size = sum(len(v.encode()) for v in (cm.get("data") or {}).values() if isinstance(v, str))
    for value in (cm.get("binaryData") or {}).values():
        try:
            size += len(base64.b64decode(value, validate=True))
        except (binascii.Error, TypeError, ValueError):
            size += len(str(value))
    if size > MAX_CONFIGMAP_BYTES:
        return [("[]", f"Too long: may not be more than {MAX_CONFIGMAP_BYTES} bytes")]
    return []


def pod_grace_period(pod: dict, options: dict | None) -> int:
    """The grace period of a pod DELETE, as the pod strategy's CheckGracefulDelete decides it:
    the request's gracePeriodSeconds, else the pod's terminationGracePeriodSeconds (default
    30); 0 (delete at once) for a pod never bound to a node or already Succeeded/Failed."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    value = (options or {}).get("gracePeriodSeconds")
    if value is None:
        value = spec.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        raise bad_request(f"gracePeriodSeconds: invalid value {value!r}") from None


_now: tuple[int, str] = (0, "")


def now_rfc3339() -> str:
    """The time to the second, as the API server writes it (formatted once a second: a
    burst of thousands of writes a second asks for it three times per pod)."""
    global _now
    second = int(time.time())
    if _now[0] != second:
        _now = (second, datetime.datetime.fromtimestamp(second, datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"))
    return _now[1]


@dataclass(frozen=True)
class Change:
    """One committed write, as a watch sees it."""

    rv: int
    ref: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict
    prev: dict | None


@dataclass(eq=False)
class Watcher:
    """An open watch: the store pushes items onto it from any thread, always under the
    store's lock, so they queue in resourceVersion order; the watch's handler takes
    everything queued at once (one socket write for a burst of changes)."""

    ref: str
    namespace: str | None
    matches: Callable[[dict], bool]
    loop: asyncio.AbstractEventLoop
    items: collections.deque = field(default_factory=collections.deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # the loop's thread (a watch is opened on it): a push made there (an HTTP request's
    # write) wakes the handler at once, one from another thread (a test, a bench's load)
    # through the loop
    thread: int = field(default_factory=threading.get_ident)

    def push(self, item: tuple) -> None:
        self.items.append(item)
        if len(self.items) != 1:  # not the first since the handler last took: already woken
            return
        if threading.get_ident() == self.thread:
            self.ready.set()
            return
        try:
            self.loop.call_soon_threadsafe(self.ready.set)
        except RuntimeError:  # the loop is closed: the watch is gone anyway
            pass

    async def take(self, timeout: float) -> list[tuple]:
        """Everything pushed since the last take, oldest first; waits up to ``timeout``
        seconds for the first (an empty list after that, or on a wake that found nothing)."""
        if not self.items:
            self.ready.clear()
            try:
                # (a timeout scope, not `wait_for`: that wraps the wait in a task of its own,
                # a cost on every wake-up of every watch)
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
            except TimeoutError:
                return []
        out = []
        while self.items:
            out.append(self.items.popleft())
        return out

    def _visible(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if (
            self.namespace is not None
            and obj.get("metadata", {}).get("namespace") != self.namespace
        ):
            return False
        return self.matches(obj)

    def event_for(self, change: Change) -> dict | None:
        """The watch event this watcher sees for a change (selector transitions as
        ADDED/DELETED)."""
        now, before = self._visible(change.obj), self._visible(change.prev)
        if change.type == "ADDED":
            return {"type": "ADDED", "object": change.obj} if now else None
        if change.type == "DELETED":
            return {"type": "DELETED", "object": change.obj} if now else None
        if now and before:
            return {"type": "MODIFIED", "object": change.obj}
        if now:
            return {"type": "ADDED", "object": change.obj}
        if before:
            gone = json_copy(change.prev)
            gone["metadata"]["resourceVersion"] = str(change.rv)
            return {"type": "DELETED", "object": gone}
        return None


@dataclass(frozen=True)
class WatchStart:
    """What a new watch sends first, or the 410 it must report instead."""

    events: list[dict]
    watcher: Watcher | None
    gone: str | None = None
    rv: int = 0  # the store's resourceVersion when the watch opened (its initial state's)


class KubeStore:
    """Objects by resource, namespace and name, with history and watchers."""

    def __init__(
        self, namespaces: Iterable[str] = DEFAULT_NAMESPACES, history_limit: int = 100_000
    ):
        self.lock = threading.RLock()
        self.rv = 0
        self.compacted_rv = 0
        self.history_limit = history_limit
        self._objects: dict[str, dict[tuple[str, str], dict]] = {r.ref: {} for r in RESOURCES}
        # what is served: the built-in types and those of the CustomResourceDefinitions
        self.types: dict[str, ResourceType] = dict(BY_REF)
        self.custom: dict[str, CustomResource] = {}
        self._history: list[Change] = []
        self._watchers: set[Watcher] = set()
        # the open watches by resource (ref), as a tuple replaced when one opens or closes:
        # a write pushes to its resource's without looking at the others' (`_commit`)
        self._watching: dict[str, tuple[Watcher, ...]] = {}
        # called with every committed Change, under the lock: must only note it (the
        # emulated controllers queue the object's key and act on their own thread)
        self.listeners: list[Callable[[Change], None]] = []
        for ns in namespaces:
            self.create("namespaces", None, {"metadata": {"name": ns}})
        for obj in kube_priority.system_class_objects():
            self.create(kube_priority.REF, None, obj)

    # -- reading -----------------------------------------------------------------------------
    def resource(self, ref: str) -> ResourceType:
        rt = self.types.get(ref)
        if rt is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({ref})"
            )
        return rt

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return (namespace or "" if rt.namespaced else "", name)

    def get(self, ref: str, namespace: str | None, name: str, *, copy: bool = True) -> dict:
        """A copy of the object, or with ``copy=False`` the stored object itself, which the
        caller must only read (as `list`)."""
        rt = self.resource(ref)
        with self.lock:
            obj = self._objects[ref].get(self._key(rt, namespace, name))
            if obj is None:
                raise not_found(rt, name)
            return json_copy(obj) if copy else obj

    def count(self, ref: str) -> int:
        """How many objects of a resource are stored (a cheap check before a list)."""
        return len(self._objects.get(ref) or ())

    def list(self, ref: str, namespace: str | None = None,
             matches: Callable[[dict], bool] = lambda o: True, *,
             copy: bool = True) -> tuple[list[dict], int]:
        """The objects in key order, and the resourceVersion. With ``copy=False`` the stored
        objects themselves, which the caller must only read (a write replaces a stored
        object, never changes it): e.g. the PriorityClasses that every pod create looks
        at, whose copies were 6% of the server thread's CPU in bench/workloads.py."""
        rt = self.resource(ref)
        clone = json_copy if copy else _same
        with self.lock:
            items = [clone(o) for (ns, _), o in sorted(self._objects[ref].items())
                     if (namespace is None or not rt.namespaced or ns == namespace) and matches(o)]
            return items, self.rv

    # -- writing -----------------------------------------------------------------------------
    def _commit(self, rt: ResourceType, type_: str, obj: dict, prev: dict | None, *,
                copy: bool = True) -> dict:
        """Store ``obj`` (which the store owns from now on) and tell the watchers; a copy of
        it, or with ``copy=False`` the stored object itself, which the caller must only
        read (every write replaces a stored object, none is changed in place)."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = self._key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if type_ == "DELETED":
            self._objects[rt.ref].pop(key, None)
        else:
            self._objects[rt.ref][key] = obj
        # Stored objects are never changed in place (every write copies, changes the copy
        # and stores it), so the history shares them instead of copying both per write.
        change = Change(self.rv, rt.ref, type_, obj, prev or None)
        self._history.append(change)
        if len(self._history) > self.history_limit:
            dropped = self._history[: len(self._history) - self.history_limit]
            self._history = self._history[len(dropped):]
            self.compacted_rv = dropped[-1].rv
        for w in self._watching.get(rt.ref, ()):
            w.push(("change", change))
        for listener in self.listeners:
            listener(change)
        return json_copy(obj) if copy else obj

    def _check_namespace(self, rt: ResourceType, namespace: str | None, obj: dict) -> str | None:
        meta = obj.setdefault("metadata", {})
        if not rt.namespaced:
            meta.pop("namespace", None)
            return None
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        ns = namespace or body_ns or "default"
        stored = self._objects["namespaces"].get(("", ns))
        if stored is None:
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        if stored["metadata"].get("deletionTimestamp"):
            # NamespaceLifecycle admission (apiserver plugin/namespace/lifecycle)
            raise ApiError(
                403, "Forbidden",
                f'{rt.ref} "{(obj.get("metadata") or {}).get("name", "")}" is forbidden: unable '
                f"to create new content in namespace {ns} because it is being terminated",
                {"name": (obj.get("metadata") or {}).get("name", ""), "group": rt.group,
                 "kind": rt.plural,
                 "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                             "message": f"namespace {ns} is being terminated"}]},
            )
        meta["namespace"] = ns
        return ns

    def _check_type(self, rt: ResourceType, obj: dict) -> None:
        api, kind = obj.get("apiVersion"), obj.get("kind")
        if api and api != rt.api_version:
            raise bad_request(
                f"the API version in the data ({api}) does not match the expected API version "
                f"({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind

    def decode(self, ref: str, obj: dict) -> None:
        """What decoding a request body does to it before admission sees it: a custom
        resource pruned and defaulted by its schema."""
        self._prepare_custom(self.resource(ref), obj)

    def _prepare_custom(self, rt: ResourceType, obj: dict) -> None:
        """A custom resource as its CRD's schema decodes it: unknown fields pruned, defaults
        set (apiextensions-apiserver pkg/apiserver/schema/pruning, .../defaulting)."""
        custom = self.custom.get(rt.ref)
        if custom is not None:
            prune(obj, custom.schema)
            apply_defaults(obj, custom.schema)

    def _spec_changed(self, rt: ResourceType, new: dict, old: dict) -> bool:
        """Whether a write bumps metadata.generation: a change of spec for built-in types; for
        a custom resource a change of anything but metadata, and but status when it has the
        status subresource (apiextensions-apiserver pkg/registry/customresource/strategy.go,
        PrepareForUpdate)."""
        if rt.ref not in self.custom:
            return new.get("spec") != old.get("spec")
        skip = ("metadata", "status") if rt.has_status else ("metadata",)
        return ({k: v for k, v in new.items() if k not in skip}
                != {k: v for k, v in old.items() if k not in skip})

    def _validate(self, rt: ResourceType, obj: dict, *, create: bool = False,
                  old: dict | None = None) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        causes: list[tuple[str, str]] = []
        pattern = _DNS_LABEL if rt.plural == "namespaces" else _SUBDOMAIN
        if not name:
            causes.append(("metadata.name", "Required value: name or generateName is required"))
        elif len(name) > 253 or not pattern.match(name):
            causes.append(
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 name must consist of lower '
                    'case alphanumeric characters, \'-\' or \'.\'',
                )
            )
        for key, value in (meta.get("labels") or {}).items():
            if isinstance(value, str) and (key, value) in _VALID_LABELS:  # (a pod's labels
                continue  # are its Job's, 8 times over; a value that is no string: refused)
            found = len(causes)
            label_name = key.rsplit("/", 1)[-1]
            if (
                not _LABEL_NAME.match(label_name)
                or len(label_name) > 63
                or ("/" in key and not _SUBDOMAIN.match(key.rsplit("/", 1)[0]))
            ):
                causes.append(
                    (
                        "metadata.labels",
                        f'Invalid value: "{key}": name part must consist of alphanumeric '
                        'characters, \'-\', \'_\' or \'.\'',
                    )
                )
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                causes.append(
                    (
                        "metadata.labels",
                        f'Invalid value: "{value}": a valid label must be an empty string or '
                        'consist of alphanumeric characters, \'-\', \'_\' or \'.\'',
                    )
                )
            if len(causes) == found and isinstance(value, str):
                if len(_VALID_LABELS) >= _VALID_LABELS_KEPT:
                    _VALID_LABELS.clear()
                _VALID_LABELS.add((key, value))
        if rt.ref == "pods":
            containers = (obj.get("spec") or {}).get("containers")
            if not containers:
                causes.append(("spec.containers", "Required value"))
            for i, c in enumerate(containers or []):
                if not isinstance(c, dict) or not c.get("name"):
                    causes.append((f"spec.containers[{i}].name", "Required value"))
                if not isinstance(c, dict) or not c.get("image"):
                    causes.append((f"spec.containers[{i}].image", "Required value"))
            causes += scheduling_gate_causes(obj, old)
        if rt.ref == kube_priority.REF:
            kube_priority.check_global_default(obj, list(self._objects[rt.ref].values()))
            causes += kube_priority.class_causes(obj, old)
        if rt.ref == "secrets":
            for key, value in (obj.get("data") or {}).items():
                try:
                    base64.b64decode(value, validate=True)
                except (binascii.Error, TypeError, ValueError):
                    causes.append((f"data[{key}]", "Invalid value: not valid base64"))
        if rt.ref == "configmaps":
            for key, value in (obj.get("data") or {}).items():
                if not isinstance(value, str):
                    causes.append((f"data[{key}]", "Invalid value: must be a string"))
            causes += configmap_size_causes(obj)
        if rt.plural == "events" and rt.group in ("", "events.k8s.io"):
            causes += event_causes(obj, events_api=bool(rt.group), create=create)
        custom = self.custom.get(rt.ref)
        if custom is not None:
            causes += validate_schema(obj, custom.schema)
        if rt.ref in (MUTATING_REF, VALIDATING_REF):
            causes += configuration_causes(obj)
        if causes:
            raise invalid(rt, name, causes)

    @staticmethod
    def _validate_job(rt: ResourceType, obj: dict) -> None:
        """A Job's spec as the job strategy validates an API create or update, after its
        defaults (kube_job_validation); direct writes skip it as they skip the defaults."""
        if rt.ref == "jobs.batch":
            causes = job_causes(obj)
            if causes:
                raise invalid(rt, obj["metadata"].get("name", ""), causes)

    @staticmethod
    def _normalize(rt: ResourceType, obj: dict) -> None:
        if rt.ref in (MUTATING_REF, VALIDATING_REF):
            default_configuration(obj)
        if rt.ref == "namespaces":
            # the namespace strategy labels every namespace with its name, for namespace
            # selectors (pkg/registry/core/namespace/strategy.go, PrepareForCreate/Update)
            meta = obj["metadata"]
            if meta.get("name"):
                meta["labels"] = {**(meta.get("labels") or {}),
                                  "kubernetes.io/metadata.name": meta["name"]}
        if rt.ref == "secrets":
            string_data = obj.pop("stringData", None) or {}
            data = obj.setdefault("data", {}) if string_data else obj.get("data")
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj.setdefault("type", "Opaque")

    def create(self, ref: str, namespace: str | None, body: dict, *, as_client: bool = False,
               dry_run: bool = False, owned: bool = False) -> dict:
        """POST semantics; ``as_client`` applies the registry's create strategy (e.g. pod status
        reset). ``owned``: ``body`` is the store's to keep (the HTTP layer parsed it for
        this call) and the result is the stored object, which the caller only reads (it
        serializes it at once); otherwise both are copies."""
        rt = self.resource(ref)
        if rt.ref == "bindings":
            return self.bind(namespace, (body.get("metadata") or {}).get("name", ""), body)
        obj = body if owned else json_copy(body)
        if not isinstance(obj, dict):
            raise bad_request("the request body must be a JSON object")
        with self.lock:
            self._check_type(rt, obj)
            ns = self._check_namespace(rt, namespace, obj)
            meta = obj["metadata"]
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + new_uid()[-5:]
            self._normalize(rt, obj)
            self._prepare_custom(rt, obj)
            self._validate(rt, obj, create=True)
            name = meta["name"]
            if self._key(rt, ns, name) in self._objects[ref]:
                raise ApiError(409, "AlreadyExists", f'{rt.ref} "{name}" already exists',
                               {"name": name, "group": rt.group, "kind": rt.plural})
            definition = self._define(obj) if ref == CRD_REF else None
            for drop in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(drop, None)
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = now_rfc3339()
            if "spec" in obj or rt.ref in (
                "pods",
                "jobs.batch",
                "daemonsets.apps",
                "deployments.apps",
            ) or rt.ref in self.custom:
                meta["generation"] = 1
            if as_client:
                self._create_strategy(rt, obj)
                self._validate_job(rt, obj)
            if dry_run:
                return obj
            stored = self._commit(rt, "ADDED", obj, None, copy=not owned)
            if definition is not None:
                return self._establish(definition, obj)
            return stored

    @staticmethod
    def _create_strategy(rt: ResourceType, obj: dict) -> None:
        if rt.ref == "pods":
            spec = obj.setdefault("spec", {})
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("dnsPolicy", "ClusterFirst")
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            if spec.get("schedulingGates"):
                # pod strategy PrepareForCreate, applySchedulingGatedCondition
                obj["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastProbeTime": None, "lastTransitionTime": None}]
        elif rt.ref == "namespaces":
            obj["status"] = {"phase": "Active"}
        elif rt.ref == "jobs.batch":
            default_job(obj)
            obj.pop("status", None)
        elif rt.has_status and rt.ref != "nodes":
            obj.pop("status", None)

    def _write(self, rt: ResourceType, namespace: str | None, name: str, new: dict,
               subresource: str | None, as_client: bool, precondition_rv: str | None,
               copy: bool = True) -> dict:
        """Replace an existing object with ``new`` (shared by PUT and PATCH); the result is
        a copy, or with ``copy=False`` the stored object, which the caller only reads."""
        key = self._key(rt, namespace, name)
        old = self._objects[rt.ref].get(key)
        if old is None:
            raise not_found(rt, name)
        if precondition_rv and precondition_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt,
                name,
                "the object has been modified; please apply your changes to the latest version and "
                "try again",
            )
        self._check_type(rt, new)
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise bad_request(
                f'the name of the object ({meta.get("name")}) does not match the name on the URL '
                f'({name})'
            )
        if (
            rt.namespaced
            and meta.get("namespace", old["metadata"]["namespace"]) != old["metadata"]["namespace"]
        ):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        for keep in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            if keep in old["metadata"]:
                meta[keep] = old["metadata"][keep]
        if as_client and rt.has_status:
            # A built-in type's write changes only the top level and `metadata` below (the
            # steps that follow set fields there), so the old object's other parts are
            # shared, never changed: stored objects are only replaced. A custom resource's
            # schema prunes and defaults in place (`_prepare_custom`): a copy of its own.
            custom = rt.ref in self.custom
            if subresource == "status":
                status = new.get("status")
                new = json_copy(old) if custom else {**old, "metadata": {**old["metadata"]}}
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
            elif "status" in old:
                new["status"] = json_copy(old["status"]) if custom else old["status"]
            else:
                new.pop("status", None)
        self._normalize(rt, new)
        self._prepare_custom(rt, new)
        self._validate(rt, new, old=old)
        if as_client and subresource is None:
            self._validate_job(rt, new)
        if rt.ref == CRD_REF:
            self._redefine(new, old)
        if "generation" in new["metadata"] and self._spec_changed(rt, new, old):
            new["metadata"]["generation"] += 1
        if old["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(rt, "DELETED", new, old)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            # a write that changes nothing is not written: no new resourceVersion, no watch
            # event (apiserver storage GuaranteedUpdate skips an unchanged object)
            return json_copy(old) if copy else old
        return self._commit(rt, "MODIFIED", new, old, copy=copy)

    def update(self, ref: str, namespace: str | None, name: str, body: dict, *,
               subresource: str | None = None, as_client: bool = False,
               owned: bool = False) -> dict:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion when given.
        ``owned`` as for `create`: ``body`` is the store's to keep and the result is the
        stored object, which the caller only reads."""
        rt = self.resource(ref)
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        new = body if owned else json_copy(body)
        with self.lock:
            rv = (new.get("metadata") or {}).get("resourceVersion")
            return self._write(rt, namespace, name, new, subresource, as_client, rv,
                               copy=not owned)

    def patch(
        self,
        ref: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
        *,
        subresource: str | None = None,
        as_client: bool = False,
        copy: bool = True,
    ) -> dict:
        """PATCH semantics for ``merge``, ``strategic`` and ``json`` patches; with
        ``copy=False`` the result is the stored object, which the caller only reads."""
        rt = self.resource(ref)
        with self.lock:
            _old, new, precondition = self.patched(ref, namespace, name, patch, patch_type)
            return self._write(rt, namespace, name, new, subresource, as_client, precondition,
                               copy=copy)

    def patched(self, ref: str, namespace: str | None, name: str, patch: Any,
                patch_type: str) -> tuple[dict, dict, str | None]:
        """What a patch makes of the stored object, not written: (the stored object, which
        the caller only reads; the patched one; the patch's own resourceVersion, a
        precondition)."""
        rt = self.resource(ref)
        with self.lock:
            old = self._objects[ref].get(self._key(rt, namespace, name))
            if old is None:
                raise not_found(rt, name)
            try:
                if patch_type == "json":
                    new = json_patch(old, patch)
                elif not isinstance(patch, dict):
                    raise PatchError("a merge patch body must be a JSON object")
                elif patch_type == "strategic":
                    new = strategic_merge_patch(old, patch)
                else:
                    new = merge_patch(old, patch)
            except PatchError as exc:
                raise ApiError(
                    422 if patch_type == "json" else 400,
                    "Invalid" if patch_type == "json" else "BadRequest",
                    str(exc),
                ) from exc
            precondition = (
                (patch.get("metadata") or {}).get("resourceVersion")
                if isinstance(patch, dict)
                else None
            )
            return old, new, precondition

    def delete(
        self, ref: str, namespace: str | None, name: str, options: dict | None = None,
        *, graceful: bool = False,
    ) -> tuple[dict, bool]:
        """DELETE semantics; returns (last state, deleted now?). Finalizers defer the removal.
        `graceful` (API requests): a pod is deleted gracefully as the API server does it
        (`pod_grace_period`); the kubelet finishes it later (KubeEmulator's emulated kubelet)."""
        rt = self.resource(ref)
        pre = (options or {}).get("preconditions") or {}
        with self.lock:
            key = self._key(rt, namespace, name)
            old = self._objects[ref].get(key)
            if old is None:
                raise not_found(rt, name)
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                    f"{old['metadata']['uid']}",
                )
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != old["metadata"]["resourceVersion"]
            ):
                raise conflict(rt, name, "Precondition failed: the object has been modified")
            if graceful and ref == "namespaces":
                # the namespace lifecycle: DELETE marks it Terminating (spec.finalizers
                # ["kubernetes"]), the namespace controller deletes what is in it and then it
                # (pkg/registry/core/namespace/storage/storage.go Delete); done by the caller
                if old["metadata"].get("deletionTimestamp"):
                    return json_copy(old), False
                new = json_copy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new.setdefault("spec", {})["finalizers"] = ["kubernetes"]
                new.setdefault("status", {})["phase"] = "Terminating"
                return self._commit(rt, "MODIFIED", new, old), False
            grace = pod_grace_period(old, options) if graceful and ref == "pods" else 0
            if grace > 0:
                # graceful: the pod stays (terminating) until the kubelet has stopped it; a
                # second DELETE may only shorten the wait (registry/rest BeforeDelete)
                meta = old["metadata"]
                current = meta.get("deletionGracePeriodSeconds")
                if current is not None and grace >= current:
                    return json_copy(old), False
                new = json_copy(old)
                when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=grace)
                new["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._commit(rt, "MODIFIED", new, old), False
            if old["metadata"].get("finalizers"):
                if old["metadata"].get("deletionTimestamp"):
                    return json_copy(old), False
                new = json_copy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._commit(rt, "MODIFIED", new, old), False
            if rt.ref == CRD_REF:
                self._undefine(old)
            if rt.ref == "namespaces":
                for other in list(self.types.values()):
                    if other.namespaced:
                        for (ns, _name), o in list(self._objects[other.ref].items()):
                            if ns == name:
                                self._commit(other, "DELETED", json_copy(o), o, copy=False)
            return self._commit(rt, "DELETED", json_copy(old), old), True

    # -- CustomResourceDefinitions ------------------------------------------------------------
    def _define(self, crd: dict) -> CustomResource:
        definition = define(crd)
        if definition.type.ref in self.types:
            raise name_taken(definition.type.ref)
        return definition

    def _establish(self, definition: CustomResource, crd: dict) -> dict:
        """Serve a new CRD's resource and write the status its controllers would (a second
        write, as theirs is); returns the CRD as created."""
        self.types[definition.type.ref] = definition.type
        self.custom[definition.type.ref] = definition
        self._objects.setdefault(definition.type.ref, {})
        stored = self._objects[CRD_REF][self._key(self.types[CRD_REF], None,
                                                  crd["metadata"]["name"])]
        new = {**stored, "status": established_status(stored)}
        self._commit(self.types[CRD_REF], "MODIFIED", new, stored, copy=False)
        return json_copy(stored)  # as created: the status is the controllers' later write

    def _redefine(self, new: dict, old: dict) -> None:
        """A CRD update: its columns, schema and names apply from now on; its group, plural
        and scope stay (a real server would serve a second resource: not emulated)."""
        definition = define(new)
        before = self.custom.get(f"{old['spec']['names']['plural']}.{old['spec']['group']}")
        if before is None or before.type.ref != definition.type.ref or \
                before.type.namespaced != definition.type.namespaced:
            raise CrdNotEmulated(f"CRD {new['metadata']['name']}: a change of its group, "
                                 "plural or scope")
        self.types[definition.type.ref] = definition.type
        self.custom[definition.type.ref] = definition

    def _undefine(self, crd: dict) -> None:
        """A deleted CRD: its objects go (the finalizer's controller deletes them on a real
        server, pkg/controller/finalizer), its watches end, its resource is no longer
        served."""
        ref = f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        rt = self.types.get(ref)
        if rt is None or ref not in self.custom:
            return
        for _key, obj in sorted(self._objects.get(ref, {}).items()):
            self._commit(rt, "DELETED", json_copy(obj), obj, copy=False)
        for w in list(self._watchers):
            if w.ref == ref:
                w.push(("close",))
        del self.types[ref], self.custom[ref], self._objects[ref]

    def bind(self, namespace: str | None, pod_name: str, binding: dict) -> dict:
        """pods/binding: assign a node once (copying the Binding's annotations onto the pod);
        409 if the pod is already bound or being deleted."""
        rt = BY_REF["pods"]
        if not isinstance(binding, dict):
            raise bad_request("the request body must be a JSON object")
        body_name = (binding.get("metadata") or {}).get("name")
        if body_name and body_name != pod_name:
            raise bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL "
                f"({pod_name})"
            )
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise invalid(BY_REF["bindings"], pod_name, [("target.name", "Required value")])
        with self.lock:
            key = self._key(rt, namespace or "default", pod_name)
            old = self._objects["pods"].get(key)
            if old is None:
                raise not_found(rt, pod_name)
            if old["metadata"].get("deletionTimestamp"):
                raise conflict(
                    BY_REF["bindings"],
                    pod_name,
                    f"pod {pod_name} is being deleted, cannot be assigned to a host",
                )
            bound = (old.get("spec") or {}).get("nodeName")
            if bound:
                raise conflict(
                    BY_REF["bindings"],
                    pod_name,
                    f'pod {pod_name} is already assigned to node "{bound}"',
                )
            if (old.get("spec") or {}).get("schedulingGates"):
                # "Reject binding to a scheduling un-ready Pod" (storage.go
                # setPodNodeAndMetadata; assignPod makes it a Conflict on pods/binding)
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding '
                               f'"{pod_name}": pod {pod_name} has non-empty '
                               ".spec.schedulingGates",
                               {"name": pod_name, "kind": "pods/binding"})
            # stored objects are never changed in place: copy only what this write changes
            new = {**old, "metadata": {**old["metadata"]}, "spec": {**old["spec"]},
                   "status": {**(old.get("status") or {})}}
            new["spec"]["nodeName"] = target
            # Like setPodHostAndAnnotations: the Binding's annotations land on the pod in the same
            # write.
            annotations = (binding.get("metadata") or {}).get("annotations") or {}
            if annotations:
                new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}),
                                                  **annotations}
            conditions = [
                c
                for c in new["status"].get("conditions", [])
                if c.get("type") != "PodScheduled"
            ]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now_rfc3339()})
            new["status"]["conditions"] = conditions
            self._commit(rt, "MODIFIED", new, old, copy=False)
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }

    # -- watching ----------------------------------------------------------------------------
    def open_watch(self, ref: str, namespace: str | None, matches: Callable[[dict], bool],
                   resource_version: str | None, loop: asyncio.AbstractEventLoop,
                   initial_events: bool | None = None) -> WatchStart:
        """Register a watch; replay history after ``resource_version`` or send current state.
        ``initial_events`` (a watch-list's sendInitialEvents): True sends the current state
        whatever ``resource_version`` says (not older than it); False sends no state, only
        changes after ``resource_version`` (from now when it is unset or 0)."""
        rt = self.resource(ref)
        with self.lock:
            watcher = Watcher(ref, namespace if rt.namespaced else None, matches, loop)
            if initial_events is False and resource_version in (None, "", "0"):
                events = []
            elif initial_events or resource_version in (None, "", "0"):
                items, _ = self.list(ref, namespace, matches)
                events = [{"type": "ADDED", "object": o} for o in items]
            else:
                try:
                    since = int(resource_version)
                except ValueError as exc:
                    raise bad_request(f'invalid resource version "{resource_version}"') from exc
                if since < self.compacted_rv:
                    return WatchStart(
                        [],
                        None,
                        gone=f"too old resource version: {since} ({self.compacted_rv + 1})",
                    )
                events = [e for c in self._history if c.rv > since and c.ref == ref
                          for e in [watcher.event_for(c)] if e is not None]
            self._watchers.add(watcher)
            self._watching[ref] = (*self._watching.get(ref, ()), watcher)
            return WatchStart(events, watcher, rv=self.rv)

    def close_watch(self, watcher: Watcher) -> None:
        with self.lock:
            self._watchers.discard(watcher)
            left = tuple(w for w in self._watching.get(watcher.ref, ()) if w is not watcher)
            if left:
                self._watching[watcher.ref] = left
            else:
                self._watching.pop(watcher.ref, None)

    def watchers(self, ref: str | None = None) -> list[Watcher]:
        with self.lock:
            return [w for w in self._watchers if ref is None or w.ref == ref]

    def compact(self) -> int:
        """Drop all history: any watch resuming from an older resourceVersion gets 410 Gone."""
        with self.lock:
            self._history.clear()
            self.compacted_rv = self.rv
            return self.rv

    def expire_watches(self, ref: str | None = None) -> int:
        """End open watches with an ERROR event carrying a 410 Status (like an etcd compaction)."""
        with self.lock:
            targets = self.watchers(ref)
            for w in targets:
                w.push(("gone", f"too old resource version: {self.rv} ({self.rv + 1})"))
            return len(targets)

    def send_bookmarks(self, ref: str | None = None) -> int:
        with self.lock:
            targets = self.watchers(ref)
            for w in targets:
                w.push(("bookmark", self.rv))
            return len(targets)

    def close_all_watches(self) -> None:
        with self.lock:
            for w in self._watchers:
                w.push(("close",))
