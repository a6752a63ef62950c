"""What the node agent keeps of a Node: the fields it decides with, nothing else.

The agent holds every Node of the cluster in its informer. A Node as the API server sends
it carries its container images (often dozens, each with its names and size),
managedFields, nodeInfo, every condition with its timestamps and messages, and whatever
annotations the cluster's tools add: kilobytes per node, all of it unread. The informer
keeps `node_view(node)` instead (client-go's transform), which holds what selection, ranks,
broker.toml and R read:

* metadata: name, labels, creationTimestamp (join order), the fluxnode.io/ annotations
  (the broker-port override);
* spec: taints, unschedulable;
* status: the Ready condition's status, addresses, capacity and allocatable.

Most of a view is the same from node to node (the label keys and most label values, the
capacity of one instance type, the Ready condition, the taints of a node pool), so the
views share it: strings are interned and the parts nodes have in common are one object
(`Shared`), about 1 KiB a node instead of 3 (issue 32: 5,000 Nodes in a 60 MiB agent).
A view is therefore read-only: the agent reads views and never changes one, and the
informer replaces a Node's view whole on every change.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ANNOTATION_PREFIX = "fluxnode.io/"

SHARED_MAX = 4096
"""Distinct shared parts kept at most (per kind); past it a new part is kept unshared, so a
cluster of all-different nodes costs no more than before."""


class Shared:
    """One object for each distinct value of a part of a view (a capacity, a taint list)."""

    def __init__(self, limit: int = SHARED_MAX):
        self.limit = limit
        self._parts: dict[str, Any] = {}

    def __call__(self, part: Any) -> Any:
        key = json.dumps(part, sort_keys=True, separators=(",", ":"))
        found = self._parts.get(key)
        if found is not None:
            return found
        part = _interned(part)
        if len(self._parts) < self.limit:
            self._parts[key] = part
        return part


_SPEC, _CAPACITY, _CONDITIONS, _ANNOTATIONS = Shared(), Shared(), Shared(), Shared()


def node_view(node: dict) -> dict:
    """A Node reduced to the fields the agent reads (a new dict, maybe sharing parts with
    other views; `node` is not changed)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    kept_meta = {k: _interned(meta[k]) for k in ("name", "labels", "creationTimestamp")
                 if k in meta}
    ours = {k: v for k, v in (meta.get("annotations") or {}).items()
            if k.startswith(ANNOTATION_PREFIX)}
    if ours:
        kept_meta["annotations"] = _ANNOTATIONS(ours)
    kept_spec = _SPEC({k: spec[k] for k in ("taints", "unschedulable") if k in spec})
    kept_status = {k: _CAPACITY(status[k]) for k in ("capacity", "allocatable") if k in status}
    if "addresses" in status:
        kept_status["addresses"] = _interned(status["addresses"])
    ready = [{"type": "Ready", "status": c.get("status")}
             for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if ready:
        kept_status["conditions"] = _CONDITIONS(ready[:1])
    return {"metadata": kept_meta, "spec": kept_spec, "status": kept_status}


def _interned(value: Any) -> Any:
    """`value` rebuilt with every string interned: the same label key or value, address
    type or quantity on 5,000 nodes is one string, not 5,000."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {_interned(k): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value
