"""Which pods must be placed together, and how many of them there are.

A group is placed all or nothing, so its identity and size come from what the
user declared: the scheduler-plugins / Fluence group labels, Kueue's plain-pod group (the
``kueue.x-k8s.io/pod-group-name`` label, its size in the
``kueue.x-k8s.io/pod-group-total-count`` annotation), Volcano's
``scheduling.k8s.io/group-name`` annotation, an indexed Job, or nothing (a group of one).

Two of these name an object rather than carry a size: scheduler-plugins' PodGroup
(``scheduling.x-k8s.io/v1alpha1``, named by the ``scheduling.x-k8s.io/pod-group`` label) and
Volcano's (``scheduling.volcano.sh/v1beta1``, named by the annotation), each in the pod's
namespace with the size in ``spec.minMember``. When that kind's CRD is installed (a
`PodGroupDirectory` says so; podgroup_directory.py watches them) the object's minMember is
the size, and a pod whose object does not exist yet gets an identity that *waits*
(`GroupIdentity.waiting` says why) rather than a size guessed from nothing; without the
CRD the label is a plain group name as before. `GroupIdentity.declared` tells a size the
user wrote (a label, an annotation, a PodGroup) from the default of 1: only a declared size
caps a group's members (admission.py refuses the pod that would exceed it).

Identities include a UID where one exists (the Job's uid, the pod's own uid) so a recreated
group never inherits a stale allocation that was keyed by a name.

A pod is a Job's only when it names that Job as its controller (an ownerReference with
``controller: true`` to a batch/v1 Job), as kube's Job controller decides which pods it
manages (``getPodsForJob``: the pods whose controller reference is the Job; an orphan whose
labels match the Job's selector is the Job's once the controller adopts it, i.e. writes that
reference). The Job labels (``batch.kubernetes.io/job-name``, ``controller-uid``) are only
labels: anyone may write them on any pod, so a pod that carries them without the reference
is a pod of its own (`job_owner`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "fluence.flux-framework.org/pod-group",
                KUEUE_GROUP_LABEL)
SIZE_KEYS = ("fluence.flux-framework.org/group-size", "fluxnode.io/group-size")
# where a size may be written: labels and annotations alike, and Kueue's count (annotation)
SIZE_SOURCES = {"labels": SIZE_KEYS, "annotations": SIZE_KEYS + (KUEUE_COUNT_ANNOTATION,)}
JOB_INDEX_LABELS = ("batch.kubernetes.io/job-completion-index",)
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# set on an opted-in Job's pod template by the admission webhook (admission.py): its pods are
# one group, Indexed or not, as the Job was admitted as a whole
ADMITTED_JOB_ANNOTATION = "fluxnode.io/job"
SCHEDULER_PLUGINS_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


class PodGroupError(ValueError):
    """A pod's group declaration is malformed (e.g. a size that is not a positive integer)."""


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Identity of a group: namespace, kind ("group", "job", "pod") and name."""

    namespace: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> GroupKey:
        namespace, kind, name = text.split("/", 2)
        return cls(namespace, kind, name)


@dataclass(frozen=True, slots=True)
class PodGroupKind:
    """A PodGroup CRD users already write: its group, version and plural, and the GroupKey
    kind its pods' groups get."""

    group: str
    version: str
    key_kind: str
    plural: str = "podgroups"
    kind: str = "PodGroup"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


# scheduler-plugins' coscheduling (apis/scheduling/v1alpha1) and Volcano's (scheduling/v1beta1)
SCHEDULER_PLUGINS = PodGroupKind("scheduling.x-k8s.io", "v1alpha1", "group")
VOLCANO = PodGroupKind("scheduling.volcano.sh", "v1beta1", "volcano")
POD_GROUP_KINDS = (SCHEDULER_PLUGINS, VOLCANO)


@dataclass(frozen=True, slots=True)
class PodGroupObject:
    """The fields of one PodGroup object the binder uses."""

    kind: PodGroupKind
    namespace: str
    name: str
    uid: str
    min_member: int | None  # spec.minMember as stored (None when absent)


class PodGroupDirectory(Protocol):
    """Which PodGroup CRDs are installed and the objects of those that are."""

    def installed(self, kind: PodGroupKind) -> bool: ...

    def get(self, kind: PodGroupKind, namespace: str, name: str) -> PodGroupObject | None: ...


@dataclass(frozen=True, slots=True)
class GroupIdentity:
    key: GroupKey
    size: int
    declared: bool = False  # the size is the user's (label, annotation, PodGroup), not 1
    waiting: str = ""  # non-empty: the group cannot be sized yet, and why
    podgroup: PodGroupObject | None = None  # the PodGroup object that sizes it


JobSizeLookup = Callable[[str, str], int | None]
"""(namespace, job name) -> the number of pods the Job runs at once, or None if unknown."""


def _first(mapping: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = mapping.get(key)
        if value:
            return str(value)
    return None


def _size(value: str, where: str) -> int:
    try:
        size = int(value)
    except ValueError:
        raise PodGroupError(f"{where}: group size {value!r} is not an integer") from None
    if size < 1:
        raise PodGroupError(f"{where}: group size {size} must be >= 1")
    return size


def declared_size(pod: dict) -> int | None:
    """The size a pod declares for its group (label first, then annotation)."""
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    for source, keys in SIZE_SOURCES.items():
        value = _first(meta.get(source) or {}, keys)
        if value is not None:
            return _size(value, f"{where} {source}")
    return None


def job_size(job: dict) -> int:
    """Pods an indexed Job runs at once: min(completions, parallelism), each defaulting to 1."""
    spec = job.get("spec") or {}
    completions = spec.get("completions") or 1
    parallelism = spec.get("parallelism")
    if parallelism is None:
        parallelism = completions
    return max(1, min(int(completions), int(parallelism)))


def completion_index(pod: dict) -> int | None:
    """An Indexed Job's pod's completion index (label, else annotation), or None when it has
    none or it is not a non-negative integer (such a pod is ordered by uid, as others)."""
    meta = pod.get("metadata") or {}
    value = _first(meta.get("labels") or {}, JOB_INDEX_LABELS) or (
        meta.get("annotations") or {}).get(JOB_INDEX_ANNOTATION)
    if value is None or not str(value).isdigit():
        return None
    return int(value)


def _podgroup_identity(key: GroupKey, kind: PodGroupKind, declared: int | None,
                       podgroups: PodGroupDirectory | None) -> GroupIdentity:
    """A group named by a PodGroup convention: sized by its object when kind's CRD is
    installed (waiting while it does not exist), else by what the pod declares."""
    if podgroups is None or not podgroups.installed(kind):
        return GroupIdentity(key, declared or 1, declared is not None)
    obj = podgroups.get(kind, key.namespace, key.name)
    if obj is None:
        return GroupIdentity(key, declared or 1, declared is not None, waiting=(
            f"waiting for PodGroup {key.namespace}/{key.name} ({kind.api_version}): it does "
            "not exist yet; create it with spec.minMember, the group's size"))
    size = _size(str(obj.min_member if obj.min_member is not None else 1),
                 f"PodGroup {key.namespace}/{key.name} ({kind.api_version}) spec.minMember")
    return GroupIdentity(key, size, True, podgroup=obj)


def declared_group_key(pod: dict) -> GroupKey | None:
    """The key of the group the user named (a group label, else Volcano's annotation), or
    None: what `group_of` keys such a pod by, without sizing it (cheap, for every event)."""
    meta = pod.get("metadata") or {}
    name = _first(meta.get("labels") or {}, GROUP_LABELS)
    if name is not None:
        return GroupKey(meta.get("namespace") or "default", "group", name)
    volcano = (meta.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
    if volcano:
        return GroupKey(meta.get("namespace") or "default", VOLCANO.key_kind, str(volcano))
    return None


def group_of(pod: dict, job_size_lookup: JobSizeLookup | None = None,
             podgroups: PodGroupDirectory | None = None) -> GroupIdentity:
    """The group `pod` belongs to. Raises PodGroupError for a malformed declaration."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    key = declared_group_key(pod)
    if key is not None:
        declared = declared_size(pod)
        if key.kind == VOLCANO.key_kind:
            return _podgroup_identity(key, VOLCANO, declared, podgroups)
        if labels.get(SCHEDULER_PLUGINS_LABEL):
            return _podgroup_identity(key, SCHEDULER_PLUGINS, declared, podgroups)
        return GroupIdentity(key, declared or 1, declared is not None)
    owner = job_owner(meta)
    is_indexed = _first(labels, JOB_INDEX_LABELS) or annotations.get(JOB_INDEX_ANNOTATION)
    admitted = annotations.get(ADMITTED_JOB_ANNOTATION)
    if owner is not None and (is_indexed is not None or admitted == owner[0]):
        job_name, uid = owner
        size = declared_size(pod)
        if size is None and job_size_lookup is not None:
            size = job_size_lookup(namespace, job_name)
        key = GroupKey(namespace, "job", f"{job_name}.{uid}" if uid else job_name)
        return GroupIdentity(key, size or 1)
    return GroupIdentity(GroupKey(namespace, "pod", meta.get("uid") or meta.get("name", "?")), 1)


def job_owner(meta: dict) -> tuple[str, str] | None:
    """(name, uid) of the batch/v1 Job a pod's metadata names as its controller, or None:
    the only way a pod is a Job's (see the module's docstring)."""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True \
                and ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1" \
                and ref.get("name"):
            return str(ref["name"]), str(ref.get("uid") or "")
    return None


def is_declared_group(key: GroupKey) -> bool:
    """A group the user named (a label, an annotation, a PodGroup), not a Job's or a pod's."""
    return key.kind in ("group", VOLCANO.key_kind)


_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def record_name(key: GroupKey) -> str:
    """The name of a declared group's FluxJob record (podgroup_records.py): ``<kind>-<name>``
    (``group-train``, ``volcano-train``), never a Job's record's name (the Job's own); a
    group name that is no DNS name (label values may hold upper case and ``_``) is lowered
    and suffixed with a hash of the name, so distinct groups keep distinct records."""
    name = f"{key.kind}-{key.name}"
    if _DNS_NAME.match(name) and len(name) <= 253:
        return name
    clean = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:200]
    return f"{clean}-{hashlib.sha256(key.name.encode()).hexdigest()[:8]}"
