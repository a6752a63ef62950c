"""Which pods must be placed together, and how many of them there are.

A group is placed all or nothing, so its identity and size come from what the
user declared: the scheduler-plugins / Fluence group labels, Kueue's plain-pod group (the
``kueue.x-k8s.io/pod-group-name`` label, its size in the
``kueue.x-k8s.io/pod-group-total-count`` annotation), an indexed Job,
or nothing (a group of one). Identities include a UID where one exists (the
Job's controller-uid, the pod's own uid) so a recreated group never inherits a
stale allocation that was keyed by a name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "fluence.flux-framework.org/pod-group",
                KUEUE_GROUP_LABEL)
SIZE_KEYS = ("fluence.flux-framework.org/group-size", "fluxnode.io/group-size")
# where a size may be written: labels and annotations alike, and Kueue's count (annotation)
SIZE_SOURCES = {"labels": SIZE_KEYS, "annotations": SIZE_KEYS + (KUEUE_COUNT_ANNOTATION,)}
JOB_INDEX_LABELS = ("batch.kubernetes.io/job-completion-index",)
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
# set on an opted-in Job's pod template by the admission webhook (admission.py): its pods are
# one group, Indexed or not, as the Job was admitted as a whole
ADMITTED_JOB_ANNOTATION = "fluxnode.io/job"


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
class GroupIdentity:
    key: GroupKey
    size: int


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


def group_of(pod: dict, job_size_lookup: JobSizeLookup | None = None) -> GroupIdentity:
    """The group `pod` belongs to. Raises PodGroupError for a malformed declaration."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    name = _first(labels, GROUP_LABELS)
    if name is not None:
        return GroupIdentity(GroupKey(namespace, "group", name), declared_size(pod) or 1)
    job_name = _first(labels, JOB_NAME_LABELS)
    is_indexed = _first(labels, JOB_INDEX_LABELS) or annotations.get(JOB_INDEX_ANNOTATION)
    admitted = annotations.get(ADMITTED_JOB_ANNOTATION)
    if job_name is not None and (is_indexed is not None or admitted == job_name):
        uid = _first(labels, JOB_UID_LABELS) or ""
        size = declared_size(pod)
        if size is None and job_size_lookup is not None:
            size = job_size_lookup(namespace, job_name)
        key = GroupKey(namespace, "job", f"{job_name}.{uid}" if uid else job_name)
        return GroupIdentity(key, size or 1)
    return GroupIdentity(GroupKey(namespace, "pod", meta.get("uid") or meta.get("name", "?")), 1)
