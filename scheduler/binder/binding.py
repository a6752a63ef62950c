"""Writing a scheduling outcome to the API server, the way kube-scheduler does.

A placed pod gets a Binding (the pods/binding subresource: the only way to set
``spec.nodeName``) whose annotations name its allocation and its share (the API
server copies a Binding's annotations onto the pod in the same write), then a
``Scheduled`` Event. A pod that cannot be placed gets ``PodScheduled=False``
with a reason that says whether it waits (``WaitingForResources``,
``WaitingForGroup``) or can never fit (``Unschedulable``), plus a
``FailedScheduling`` Event. A pod the admission webhook gated (``fluxnode.io/admission``,
issue 30) has that gate removed just before its Binding, once its whole group is placed: a
JSON patch that first tests the gate is still where the informer saw it. Bodies are plain
dicts and answers are not turned into model objects: that is most of the client's CPU cost
per pod.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from dataclasses import dataclass

from fluxnode.agent.kube import raw as kube_raw
from fluxnode.agent.kube.timestamps import stamps, time_now
from fluxnode.scheduler.binder.admission import ADMISSION_GATE
from fluxnode.scheduler.binder.cluster_state import (
    ALLOCATION_ANNOTATION,
    CORES_ANNOTATION,
    GPUS_ANNOTATION,
    GROUP_ANNOTATION,
    RANK_ANNOTATION,
    PodInfo,
)
from fluxnode.scheduler.binder.event_recorder import EventRecorder
from fluxnode.scheduler.binder.http_writer import HttpWriter, Write
from fluxnode.scheduler.binder.slot_assignment import PodSlot
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("fluxnode.binder.binding")


class BindError(RuntimeError):
    """The API server refused the binding; `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


_EVENT_SEQ = itertools.count()


def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return f"HTTP {exc.status} {exc.reason}"


def _bind_error(exc: Exception) -> BindError:
    """A failed write as a BindError: the API server's status and message, or status 0 for
    connection trouble (the write may or may not have happened)."""
    if isinstance(exc, ApiException):
        return BindError(exc.status, _api_message(exc))
    return BindError(0, f"{type(exc).__name__}: {exc}")


@dataclass
class PodWriter:
    api: kube_raw.RawApi | HttpWriter  # HttpWriter unless a proxy is configured
    scheduler_name: str = "fluxnode"
    instance: str = ""
    # Events go through it when given (event_recorder.py: a bounded queue and a thread of
    # their own), else each is posted where it is made
    events: EventRecorder | None = None

    def bind(self, pod: PodInfo, slot: PodSlot, alloc_id: int, group: str) -> None:
        """Bind (with annotations) and record the Scheduled event. Raises BindError if the bind
        fails."""
        self.bind_only(pod, slot, alloc_id, group)
        self.scheduled(pod, slot, alloc_id)

    def bind_only(self, pod: PodInfo, slot: PodSlot, alloc_id: int, group: str) -> None:
        """The Binding (with annotations), without its event. Raises BindError if it fails."""
        self.ungate(pod)
        try:
            self.api.request("POST", *self._binding(pod, slot, alloc_id, group))
        except Exception as exc:
            raise _bind_error(exc) from None

    def bind_many(self, binds: list[tuple[PodInfo, PodSlot, int, str]]) -> list[BindError | None]:
        """Bind each pod as `bind_only` does; one outcome each, in order (None: bound). The
        Bindings of pods without a gate to remove are pipelined on one connection
        (http_writer.py: one send for all, their answers read in order; a Binding is
        refused with a 409 when sent twice, so an unknown outcome is retried as a lone
        one is); the others go one by one."""
        outcomes: list[BindError | None] = [None] * len(binds)
        piped: list[int] = []
        for i, (pod, slot, alloc_id, group) in enumerate(binds):
            if isinstance(self.api, HttpWriter) and not _gated(pod):
                piped.append(i)
                continue
            try:
                self.bind_only(pod, slot, alloc_id, group)
            except BindError as exc:
                outcomes[i] = exc
        if piped:
            answers = self.api.pipeline(
                [Write("POST", *self._binding(*binds[i])) for i in piped])
            for i, answer in zip(piped, answers, strict=True):
                if isinstance(answer, Exception):
                    outcomes[i] = _bind_error(answer)
        return outcomes

    def _binding(self, pod: PodInfo, slot: PodSlot, alloc_id: int,
                 group: str) -> tuple[str, dict]:
        """The path and body of the pod's Binding."""
        annotations = {
            ALLOCATION_ANNOTATION: str(alloc_id),
            RANK_ANNOTATION: str(slot.rank),
            CORES_ANNOTATION: slot.cores,
            GPUS_ANNOTATION: slot.gpus,
            GROUP_ANNOTATION: group,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": slot.hostname},
        }
        return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding", body

    def ungate(self, pod: PodInfo) -> None:
        """Remove fluxnode's admission gate, if the pod has it. Raises BindError if the API
        server refuses (e.g. the gates changed since the informer saw them: 422)."""
        gates = (pod.raw.get("spec") or {}).get("schedulingGates") or []
        for i, gate in enumerate(gates):
            if isinstance(gate, dict) and gate.get("name") == ADMISSION_GATE:
                patch = [{"op": "test", "path": f"/spec/schedulingGates/{i}/name",
                          "value": ADMISSION_GATE},
                         {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]
                try:
                    self.api.request("PATCH",
                                     f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                                     patch, "application/json-patch+json")
                except Exception as exc:  # (connection trouble: the gate may be gone or not)
                    raise _bind_error(exc) from None
                return

    def scheduled(self, pod: PodInfo, slot: PodSlot, alloc_id: int) -> None:
        """The `Scheduled` event of a bound pod; never raises (the pod is bound whatever
        happens to its event)."""
        self.event(pod, "Normal", "Scheduled", _scheduled_message(pod, slot, alloc_id))

    def scheduled_many(self, bound: list[tuple[PodInfo, PodSlot, int]]) -> None:
        """The `Scheduled` events of bound pods: queued for the recorder, or pipelined on
        one connection (best effort, as each one is: a failure is logged, never raised or
        retried)."""
        if self.events is not None:
            for pod, slot, alloc_id in bound:
                self.events.post(*self._event(_pod_involved(pod), "Normal", "Scheduled",
                                              _scheduled_message(pod, slot, alloc_id),
                                              "Binding"))
            return
        if not isinstance(self.api, HttpWriter):
            for pod, slot, alloc_id in bound:
                self.scheduled(pod, slot, alloc_id)
            return
        writes = [Write("POST", *self._event(_pod_involved(pod), "Normal", "Scheduled",
                                             _scheduled_message(pod, slot, alloc_id),
                                             "Binding"))
                  for pod, slot, alloc_id in bound]
        for (pod, _slot, _alloc), answer in zip(bound, self.api.pipeline(writes), strict=True):
            if isinstance(answer, ApiException):
                log.warning("cannot record Scheduled event for Pod %s: %s", pod.ref,
                            _api_message(answer))
            elif isinstance(answer, Exception):
                log.warning("cannot record Scheduled event for Pod %s: %s", pod.ref, answer)

    def not_scheduled(self, pod: PodInfo, reason: str, message: str, event: bool = True) -> None:
        """PodScheduled=False with `reason`, and a FailedScheduling event. A pod gone (404)
        is not an error; any other failure to write the condition raises (the caller writes
        it again later); the event is best effort."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": time_now(),
        }
        try:
            self.api.request(
                "PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                {"status": {"conditions": [condition]}}, "application/strategic-merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise BindError(exc.status, _api_message(exc)) from None
        if event:
            self.event(pod, "Warning", "FailedScheduling", message)

    def event(self, pod: PodInfo, type_: str, reason: str, message: str) -> None:
        self.object_event(_pod_involved(pod), type_, reason, message,
                          "Scheduling" if reason != "Scheduled" else "Binding")

    def object_event(self, involved: dict, type_: str, reason: str, message: str,
                     action: str) -> None:
        """A core/v1 Event about `involved` (apiVersion, kind, namespace, name, uid), in its
        namespace; best effort: a failure is logged, never raised or retried."""
        if self.events is not None:
            self.events.post(*self._event(involved, type_, reason, message, action))
            return
        ref = f"{involved['kind']} {involved['namespace']}/{involved['name']}"
        try:
            self.api.request("POST", *self._event(involved, type_, reason, message, action))
        except ApiException as exc:
            log.warning("cannot record %s event for %s: %s", reason, ref, _api_message(exc))
        except Exception as exc:  # the API server away: events are best effort, never retried
            log.warning("cannot record %s event for %s: %s", reason, ref, exc)

    def _event(self, involved: dict, type_: str, reason: str, message: str,
               action: str) -> tuple[str, dict]:
        """The path and body of a core/v1 Event about `involved`."""
        now, now_micro = stamps()
        name, namespace = involved["name"], involved["namespace"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # named like client-go's recorder (object name + hex nanoseconds), plus a process
            # counter so two workers never collide: unique, and cheaper than a UUID per pod
            "metadata": {
                "name": f"{name}.{time.time_ns():x}{next(_EVENT_SEQ) & 0xFF:02x}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.scheduler_name},
            "reportingComponent": self.scheduler_name,
            # the API server refuses a reportingInstance over 128 characters (a pod name can
            # have 253); pkg/apis/core/validation/events.go
            "reportingInstance": (self.instance or f"{self.scheduler_name}-{os.getpid()}")[:128],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now_micro,
            "action": action,
            "count": 1,
        }
        return f"/api/v1/namespaces/{namespace}/events", body


def _gated(pod: PodInfo) -> bool:
    """The pod has fluxnode's admission gate (removed before its Binding)."""
    return any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE
               for g in (pod.raw.get("spec") or {}).get("schedulingGates") or [])


def _pod_involved(pod: PodInfo) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
            "uid": pod.uid}


def _scheduled_message(pod: PodInfo, slot: PodSlot, alloc_id: int) -> str:
    return (f"Successfully assigned {pod.ref} to {slot.hostname} (allocation {alloc_id}, "
            f"cores {slot.cores or '-'}, gpus {slot.gpus or '-'})")
