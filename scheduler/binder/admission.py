"""What fluxnode's mutating admission webhook does to an opted-in Job or pod (issue 30).

Pure functions from an AdmissionReview v1 request (a dict, as the API server sends it) to
its response, so the HTTPS server (webhook_server.py) only moves bytes. Opting in is the
label ``fluxnode.io/queue: <queue>``; the MutatingWebhookConfiguration's objectSelector
sends only such objects here, but nothing below trusts that.

- A batch/v1 **Job** is created suspended (``spec.suspend: true``): no pod exists until
  fluxnode has the whole set's allocation. It is stamped with this webhook's clock
  (annotation ``fluxnode.io/submitted``, microseconds), which orders the Jobs created in one
  second of their creationTimestamp (queue.submitted). Its pod template gets the queue label,
  ``schedulerName: fluxnode``, the annotation ``fluxnode.io/job: <job name>``, which
  marks the pods that Job's controller creates as already admitted with their Job, and the
  label ``fluxnode.io/job-admitted: "true"``, which the configuration's pods webhook leaves
  out (objectSelector ``DoesNotExist``): those pods are not sent here at all. The label
  grants nothing else: a pod that carries it without coming from such a Job is simply not
  sent, so it has no gate and takes the classic path (docs/binder.md, "Admission webhook").
- A **pod** gets the scheduling gate ``fluxnode.io/admission`` (and fluxnode's scheduler
  name), so it is not schedulable until fluxnode admits its whole group; the pods of a
  Job fluxnode admitted (the annotation above and a controller reference to that Job) pass
  unchanged.
- A **malformed group** is refused, with the field named: sizes declared twice that
  disagree (``fluxnode.io/group-size``, Fluence's size, Kueue's
  ``kueue.x-k8s.io/pod-group-total-count``), a size that is not a positive integer, Kueue's
  group name without its count or the reverse (Kueue's own rule), a size without a group,
  a Job whose template declares a size other than its pod count, another scheduler named.
- A pod that would make its **group larger than its declared size** is refused, naming the
  group, its size and how many members it has: a size the user declared (a label, an
  annotation, or the minMember of the PodGroup object that sizes it, podgroup.py), against
  the live members this replica's pod cache counts (group_members.py, whose docstring says
  what two pods created at once through two replicas do). A group with no declared size is
  not capped, nor is any group when no counter is given.

Only CREATE is mutated (the configuration's rules send nothing else); any other request
is allowed unchanged. A request that is not an AdmissionReview is a `ReviewError`, which the
server answers with a 400 naming what is wrong.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from fluxnode.scheduler.binder.job_shape import JobShapeError, integer_field, job_pod_count
from fluxnode.scheduler.binder.podgroup import (
    GROUP_LABELS,
    KUEUE_COUNT_ANNOTATION,
    KUEUE_GROUP_LABEL,
    SIZE_SOURCES,
    VOLCANO_GROUP_ANNOTATION,
    GroupKey,
    PodGroupDirectory,
    PodGroupError,
    group_of,
    is_declared_group,
)
from fluxnode.scheduler.binder.queue import SUBMITTED_ANNOTATION, rfc3339_micro

QUEUE_LABEL = "fluxnode.io/queue"
ADMISSION_GATE = "fluxnode.io/admission"
JOB_ANNOTATION = "fluxnode.io/job"  # on a Job's pod template: the pods come with their Job
# on a Job's pod template too: the configuration's pods webhook does not select such pods
JOB_ADMITTED_LABEL = "fluxnode.io/job-admitted"
DEFAULT_SCHEDULER = "default-scheduler"
REVIEW_API_VERSION = "admission.k8s.io/v1"


class ReviewError(ValueError):
    """The request body is not an AdmissionReview v1 this webhook can answer."""


class Refusal(ValueError):
    """An opted-in object fluxnode will not admit; the message names the field."""


@dataclass
class Verdict:
    """The webhook's answer to one request: allowed with a JSON patch (maybe empty), or
    refused with a message."""

    uid: str
    allowed: bool = True
    patch: list[dict] = field(default_factory=list)
    message: str = ""
    code: int = 200

    def review(self) -> dict:
        """The AdmissionReview v1 response body."""
        response: dict = {"uid": self.uid, "allowed": self.allowed}
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(self.patch)).decode()
        if not self.allowed:
            response["status"] = {"code": self.code, "message": self.message,
                                  "reason": "Invalid" if self.code == 422 else "BadRequest"}
        return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
                "response": response}


def parse_review(body: bytes) -> dict:
    """The ``request`` of an AdmissionReview v1 body; ReviewError says what is missing."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReviewError(f"body is not JSON: {exc}") from None
    except RecursionError:  # arrays or objects nested past what the decoder takes
        raise ReviewError("body is not JSON: nested too deeply") from None
    if not isinstance(review, dict):
        raise ReviewError("body is not a JSON object")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got "
            f"apiVersion {review.get('apiVersion')!r} kind {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request object")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise ReviewError("request.uid is missing")
    return request


MemberCount = Callable[[GroupKey], int]
"""A group key -> how many live members it has now (group_members.py)."""


@dataclass(frozen=True)
class Admission:
    """The webhook's decisions, for one scheduler name; `members` and `podgroups` (both
    optional) let it cap declared groups at their size."""

    scheduler_name: str = "fluxnode"
    members: MemberCount | None = None
    podgroups: PodGroupDirectory | None = None
    clock: Callable[[], float] = time.time  # the submission stamp's

    def review(self, request: dict) -> Verdict:
        """Answer one parsed request (see parse_review). Never raises for the object's
        content: what cannot be read is a refusal naming the field."""
        uid = request["uid"]
        if request.get("operation") != "CREATE":
            return Verdict(uid)
        resource = request.get("resource")
        kind = (resource.get("group"), resource.get("resource")) if isinstance(
            resource, dict) else None
        obj = request.get("object")
        if kind not in (("", "pods"), ("batch", "jobs")):
            return Verdict(uid)
        if not isinstance(obj, dict):
            return Verdict(uid, False, message="request.object: expected an object", code=400)
        try:
            if kind == ("batch", "jobs"):
                patch = self.job_patch(obj)
            else:
                patch = self.pod_patch(obj, request.get("namespace") or "")
        except (Refusal, JobShapeError) as exc:
            return Verdict(uid, False, message=f"fluxnode: {exc}", code=422)
        return Verdict(uid, patch=patch)

    # -- Jobs -------------------------------------------------------------------------

    def job_patch(self, job: dict) -> list[dict]:
        meta = _map(job, "metadata", "metadata")
        queue = _queue(_map(meta, "labels", "metadata.labels"), "metadata.labels")
        if queue is None:
            return []
        spec = _map(job, "spec", "spec")
        template = _map(spec, "template", "spec.template")
        tmeta = _map(template, "metadata", "spec.template.metadata")
        tspec = _map(template, "spec", "spec.template.spec")
        count = job_pod_count(spec)
        for where, size in declared_sizes(tmeta, "spec.template.metadata"):
            if size != count:
                raise Refusal(f"{where}: group size {size} disagrees with the Job's {count} "
                              "pods (min of spec.parallelism and spec.completions)")
        patch = [{"op": "add", "path": "/spec/suspend", "value": True}]
        # the stamp that orders Jobs created in one second (queue.submitted); one the user
        # wrote is replaced
        patch += _set_in({"metadata": {"annotations": {}} if isinstance(
            meta.get("annotations"), dict) else {}}, "", ("metadata", "annotations"),
            SUBMITTED_ANNOTATION, rfc3339_micro(self.clock()))
        # _set_in's working copy: the template's metadata as it is, or absent
        template = ({"metadata": orjson.loads(orjson.dumps(tmeta))}
                    if isinstance(template.get("metadata"), dict) else {})
        patch += _set_in(template, "/spec/template", ("metadata", "labels"),
                         QUEUE_LABEL, queue)
        patch += _set_in(template, "/spec/template", ("metadata", "labels"),
                         JOB_ADMITTED_LABEL, "true")
        patch += _set_in(template, "/spec/template", ("metadata", "annotations"),
                         JOB_ANNOTATION, meta.get("name") or "")
        patch += self._scheduler(tspec, "/spec/template/spec", "spec.template.spec")
        return patch

    # -- pods -------------------------------------------------------------------------

    def pod_patch(self, pod: dict, namespace: str = "") -> list[dict]:
        meta = _map(pod, "metadata", "metadata")
        if _queue(_map(meta, "labels", "metadata.labels"), "metadata.labels") is None:
            return []
        spec = _map(pod, "spec", "spec")
        if admitted_with_job(meta):
            return []
        check_group(meta, "metadata")
        self.check_room(pod, namespace)
        gates = spec.get("schedulingGates")
        if gates is not None and not isinstance(gates, list):
            raise Refusal("spec.schedulingGates: expected a list")
        patch = self._scheduler(spec, "/spec", "spec")
        if not gates:
            patch.append({"op": "add", "path": "/spec/schedulingGates",
                          "value": [{"name": ADMISSION_GATE}]})
        elif not any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates):
            patch.append({"op": "add", "path": "/spec/schedulingGates/-",
                          "value": {"name": ADMISSION_GATE}})
        return patch

    def check_room(self, pod: dict, namespace: str = "") -> None:
        """Refuse a pod its declared group has no room for (see the module's docstring).
        The request's namespace is the pod's: a body sent to a namespaced URL need not
        name one."""
        if self.members is None:
            return
        meta = pod.get("metadata") or {}
        placed = {**pod, "metadata": {**meta, "namespace": namespace or meta.get("namespace")
                                      or "default"}}
        try:
            ident = group_of(placed, podgroups=self.podgroups)
        except PodGroupError:
            return  # check_group refused what is malformed in the pod; a bad PodGroup waits
        if not is_declared_group(ident.key) or not ident.declared:
            return
        have = self.members(ident.key)
        if have >= ident.size:
            source = (f"PodGroup {ident.key.namespace}/{ident.key.name} spec.minMember"
                      if ident.podgroup is not None else "declared")
            raise Refusal(f"group {ident.key.namespace}/{ident.key.name} is full: its size is "
                          f"{ident.size} ({source}) and it has {have} members already; delete "
                          "one or raise the size before adding a pod")

    def _scheduler(self, spec: dict, path: str, where: str) -> list[dict]:
        name = spec.get("schedulerName")
        if name in (None, "", DEFAULT_SCHEDULER):
            return [{"op": "add", "path": f"{path}/schedulerName", "value": self.scheduler_name}]
        if name != self.scheduler_name:
            raise Refusal(f"{where}.schedulerName: {name!r} is another scheduler, but the "
                          f"{QUEUE_LABEL} label asks {self.scheduler_name} to place it")
        return []


def held_by_others(pod: dict) -> bool:
    """The pod carries a scheduling gate other than fluxnode's: another controller holds it,
    and the API server would refuse its Binding until that gate is removed."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(not (isinstance(g, dict) and g.get("name") == ADMISSION_GATE) for g in gates)


def admitted_with_job(meta: dict) -> bool:
    """A pod the controller of a Job fluxnode admitted created: it carries the template's
    annotation naming the Job, and a controller reference to that same Job."""
    job = (meta.get("annotations") or {}).get(JOB_ANNOTATION)
    if not job:
        return False
    owners = meta.get("ownerReferences") or []
    return any(
        isinstance(o, dict) and o.get("controller") and o.get("kind") == "Job"
        and o.get("apiVersion") == "batch/v1" and o.get("name") == job
        for o in owners
    )


def declared_sizes(meta: dict, where: str) -> list[tuple[str, int]]:
    """Every group size the metadata declares, each with its field path; each must be a
    positive integer."""
    sizes = []
    for source, keys in SIZE_SOURCES.items():
        values = meta.get(source) or {}
        for key in keys:
            if key in values:
                field_path = f"{where}.{source}[{key}]"
                sizes.append((field_path, integer_field(values[key], field_path, minimum=1)))
    return sizes


def check_group(meta: dict, where: str) -> None:
    """Refuse a pod's malformed group declaration (see the module's docstring)."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    kueue_name = labels.get(KUEUE_GROUP_LABEL)
    has_count = KUEUE_COUNT_ANNOTATION in annotations
    if kueue_name and not has_count:
        raise Refusal(f"{where}.annotations[{KUEUE_COUNT_ANNOTATION}]: required with the "
                      f"{KUEUE_GROUP_LABEL} label")
    if has_count and not kueue_name:
        raise Refusal(f"{where}.labels[{KUEUE_GROUP_LABEL}]: required with the "
                      f"{KUEUE_COUNT_ANNOTATION} annotation")
    sizes = declared_sizes(meta, where)
    if sizes and not (any(labels.get(k) for k in GROUP_LABELS)
                      or annotations.get(VOLCANO_GROUP_ANNOTATION)):
        raise Refusal(f"{sizes[0][0]}: a group size without a group name (label "
                      f"{' or '.join(GROUP_LABELS)}, or annotation {VOLCANO_GROUP_ANNOTATION})")
    for field_path, size in sizes[1:]:
        if size != sizes[0][1]:
            raise Refusal(f"{field_path}: group size {size} disagrees with "
                          f"{sizes[0][0]} ({sizes[0][1]})")


def _queue(labels: dict, where: str) -> str | None:
    if QUEUE_LABEL not in labels:
        return None
    queue = labels[QUEUE_LABEL]
    if not isinstance(queue, str) or not queue:
        raise Refusal(f"{where}[{QUEUE_LABEL}]: must name a queue")
    return queue


def _map(obj: dict, key: str, where: str) -> dict:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refusal(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _pointer(key: str) -> str:
    """A map key as one JSON Pointer token (RFC 6901: ~ as ~0, / as ~1)."""
    return key.replace("~", "~0").replace("/", "~1")


def _set_in(obj: dict, base: str, maps: tuple[str, ...], key: str, value: str) -> list[dict]:
    """JSON Patch operations setting obj[maps...][key] = value, creating the maps missing.
    `obj` is a copy the caller owns: it is updated too, so that a later call sees the maps
    this one created (two "add" of the same new map would replace each other)."""
    path, node = base, obj
    for name in maps:
        path = f"{path}/{name}"
        if not isinstance(node.get(name), dict):
            node[name] = {}
            created = node[name]
            for inner in maps[maps.index(name) + 1:]:
                created[inner] = {}
                created = created[inner]
            created[key] = value
            return [{"op": "add", "path": path, "value": orjson.loads(orjson.dumps(node[name]))}]
        node = node[name]
    node[key] = value
    return [{"op": "add", "path": f"{path}/{_pointer(key)}", "value": value}]
