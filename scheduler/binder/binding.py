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
from fluxnode.scheduler.binder.http_writer import HttpWriter
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


@dataclass
class PodWriter:
    api: kube_raw.RawApi | HttpWriter  # HttpWriter unless a proxy is configured
    scheduler_name: str = "fluxnode"
    instance: str = ""

    def bind(self, pod: PodInfo, slot: PodSlot, alloc_id: int, group: str) -> None:
        """Bind (with annotations) and record the Scheduled event. Raises BindError if the bind
        fails."""
        self.bind_only(pod, slot, alloc_id, group)
        self.scheduled(pod, slot, alloc_id)

    def bind_only(self, pod: PodInfo, slot: PodSlot, alloc_id: int, group: str) -> None:
        """The Binding (with annotations), without its event. Raises BindError if it fails."""
        self.ungate(pod)
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
        try:
            self.api.request(
                "POST", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding", body
            )
        except ApiException as exc:
            raise BindError(exc.status, _api_message(exc)) from None
        except Exception as exc:  # connection trouble: the bind may or may not have happened
            raise BindError(0, f"{type(exc).__name__}: {exc}") from None

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
                except ApiException as exc:
                    raise BindError(exc.status, _api_message(exc)) from None
                except Exception as exc:  # connection trouble: the gate may be gone or not
                    raise BindError(0, f"{type(exc).__name__}: {exc}") from None
                return

    def scheduled(self, pod: PodInfo, slot: PodSlot, alloc_id: int) -> None:
        """The `Scheduled` event of a bound pod; never raises (the pod is bound whatever
        happens to its event)."""
        self.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.ref} to {slot.hostname} (allocation {alloc_id}, cores "
            f"{slot.cores or '-'}, gpus {slot.gpus or '-'})",
        )

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
        self.object_event(
            {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
             "uid": pod.uid},
            type_, reason, message, "Scheduling" if reason != "Scheduled" else "Binding")

    def object_event(self, involved: dict, type_: str, reason: str, message: str,
                     action: str) -> None:
        """A core/v1 Event about `involved` (apiVersion, kind, namespace, name, uid), in its
        namespace; best effort: a failure is logged, never raised or retried."""
        now, now_micro = stamps()
        name, namespace = involved["name"], involved["namespace"]
        ref = f"{involved['kind']} {namespace}/{name}"
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
        try:
            self.api.request("POST", f"/api/v1/namespaces/{namespace}/events", body)
        except ApiException as exc:
            log.warning("cannot record %s event for %s: %s", reason, ref, _api_message(exc))
        except Exception as exc:  # the API server away: events are best effort, never retried
            log.warning("cannot record %s event for %s: %s", reason, ref, exc)
