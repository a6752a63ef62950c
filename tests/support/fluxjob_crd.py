"""A FluxJob-like CustomResourceDefinition for the emulator's tests, written here (not the
product's): group fluxnode.io, kind FluxJob, plural fluxjobs, the status subresource, and the
printer columns `kubectl get fluxjobs` shows (QUEUE, PHASE, PRIORITY, POSITION, PODS, NODES,
START, REASON, AGE; NODES and REASON only with ``-o wide``)."""

from __future__ import annotations

import copy

GROUP, VERSION, PLURAL, KIND = "fluxnode.io", "v1alpha1", "fluxjobs", "FluxJob"
API_VERSION = f"{GROUP}/{VERSION}"

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["pods"],
            "properties": {
                "queue": {"type": "string", "default": "batch"},
                "priority": {"type": "integer", "minimum": 0, "default": 16},
                "pods": {"type": "integer", "minimum": 1},
                "suspend": {"type": "boolean"},
                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string",
                          "enum": ["Pending", "Queued", "Running", "Completed", "Failed"]},
                "position": {"type": "integer"},
                "nodes": {"type": "string"},
                "startTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
            },
        },
    },
}

COLUMNS = [
    {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
    {"name": "Position", "type": "integer", "jsonPath": ".status.position"},
    {"name": "Pods", "type": "integer", "jsonPath": ".spec.pods"},
    {"name": "Nodes", "type": "string", "jsonPath": ".status.nodes", "priority": 1},
    {"name": "Start", "type": "date", "jsonPath": ".status.startTime"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def fluxjob_crd(scope: str = "Namespaced") -> dict:
    """The CRD as a manifest (a fresh copy each call)."""
    return copy.deepcopy({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": PLURAL, "singular": "fluxjob", "kind": KIND,
                      "shortNames": ["fj"], "categories": ["fluxnode"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": SCHEMA},
                "subresources": {"status": {}},
                "additionalPrinterColumns": COLUMNS,
            }],
        },
    })


def fluxjob(name: str, pods: int = 2, **spec: object) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name},
            "spec": {"pods": pods, **spec}}
