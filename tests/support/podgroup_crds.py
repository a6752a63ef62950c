"""The PodGroup CRDs users install, for the emulator: scheduler-plugins' and Volcano's.

Transcribed from the projects' own manifests (descriptions left out), so the binder is tested
against the objects as those projects define them, not as fluxnode would like them:

- kubernetes-sigs/scheduler-plugins, manifests/coscheduling/crd.yaml
  (``podgroups.scheduling.x-k8s.io``, version v1alpha1, status subresource);
- volcano-sh/volcano, config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml
  (``podgroups.scheduling.volcano.sh``, version v1beta1, no subresource).

One change: ``minResources``' values are ``anyOf: [integer, string]`` with a quantity
``pattern`` in both; the emulator applies neither keyword (kube_crd_schema refuses a CRD
using them), so they are ``x-kubernetes-int-or-string: true`` alone, which is what the
``anyOf`` spells (controller-gen's rendering of a resource.Quantity). Volcano's
``networkTopology`` is left out for the same reason as the descriptions: nothing here reads it.
"""

from __future__ import annotations

import copy

QUANTITY_MAP = {"type": "object",
                "additionalProperties": {"x-kubernetes-int-or-string": True}}


def _crd(group: str, version: str, short: list[str], spec: dict, status: dict,
         columns: list[dict], subresources: dict) -> dict:
    return copy.deepcopy({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                      "shortNames": short, "singular": "podgroup"},
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": True, "storage": True,
                "additionalPrinterColumns": columns,
                "subresources": subresources,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "properties": spec},
                        "status": {"type": "object", "properties": status},
                    },
                }},
            }],
        },
    })


def scheduler_plugins_crd() -> dict:
    """podgroups.scheduling.x-k8s.io (scheduler-plugins' coscheduling)."""
    int32 = {"type": "integer", "format": "int32"}
    return _crd(
        "scheduling.x-k8s.io", "v1alpha1", ["pg", "pgs"],
        {"minMember": int32, "minResources": QUANTITY_MAP, "scheduleTimeoutSeconds": int32},
        {"failed": int32, "occupiedBy": {"type": "string"}, "phase": {"type": "string"},
         "running": int32, "scheduleStartTime": {"type": "string", "format": "date-time"},
         "succeeded": int32},
        [{"jsonPath": ".status.phase", "name": "Phase", "type": "string"},
         {"jsonPath": ".spec.minMember", "name": "MinMember", "type": "integer"},
         {"jsonPath": ".status.running", "name": "Running", "type": "string"},
         {"jsonPath": ".status.succeeded", "name": "Succeeded", "type": "string"},
         {"jsonPath": ".status.failed", "name": "Failed", "type": "string"},
         {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}],
        {"status": {}},
    )


def volcano_crd() -> dict:
    """podgroups.scheduling.volcano.sh (Volcano)."""
    int32 = {"type": "integer", "format": "int32"}
    condition = {"type": "object", "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string"}, "reason": {"type": "string"},
        "status": {"type": "string"}, "transitionID": {"type": "string"},
        "type": {"type": "string"}}}
    return _crd(
        "scheduling.volcano.sh", "v1beta1", ["pg", "podgroup-v1beta1"],
        {"minMember": int32, "minResources": QUANTITY_MAP,
         "minTaskMember": {"type": "object", "additionalProperties": int32},
         "priorityClassName": {"type": "string"},
         "queue": {"type": "string", "default": "default"},
         "preemptable": {"type": "boolean"}},
        {"conditions": {"type": "array", "items": condition}, "failed": int32,
         "phase": {"type": "string"}, "running": int32, "succeeded": int32},
        [{"jsonPath": ".status.phase", "name": "STATUS", "type": "string"},
         {"jsonPath": ".spec.minMember", "name": "minMember", "type": "integer"},
         {"jsonPath": ".status.running", "name": "RUNNINGS", "type": "integer"},
         {"jsonPath": ".metadata.creationTimestamp", "name": "AGE", "type": "date"},
         {"jsonPath": ".spec.queue", "name": "QUEUE", "priority": 1, "type": "string"}],
        {},
    )


def podgroup(api_version: str, name: str, min_member: int, namespace: str = "default") -> dict:
    return {"apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": min_member}}
