"""What the node agent keeps of a Node: the fields it decides with, nothing else.

The agent holds every Node of the cluster in its informer and copies the whole cache on
each reconcile. A Node as the API server sends it carries its container images (often
dozens, each with its names and size), managedFields, nodeInfo, every condition with its
timestamps and messages, and whatever annotations the cluster's tools add: kilobytes per
node, all of it unread. The informer keeps `node_view(node)` instead (client-go's
transform), which holds what selection, ranks, broker.toml and R read:

* metadata: name, labels, creationTimestamp (join order), the fluxnode.io/ annotations
  (the broker-port override);
* spec: taints, unschedulable;
* status: the Ready condition's status, addresses, capacity and allocatable.
"""

from __future__ import annotations

ANNOTATION_PREFIX = "fluxnode.io/"


def node_view(node: dict) -> dict:
    """A Node reduced to the fields the agent reads (a new dict; `node` is not changed)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    kept_meta = {k: meta[k] for k in ("name", "labels", "creationTimestamp") if k in meta}
    ours = {k: v for k, v in (meta.get("annotations") or {}).items()
            if k.startswith(ANNOTATION_PREFIX)}
    if ours:
        kept_meta["annotations"] = ours
    kept_spec = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
    kept_status = {k: status[k] for k in ("addresses", "capacity", "allocatable") if k in status}
    ready = [{"type": "Ready", "status": c.get("status")}
             for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if ready:
        kept_status["conditions"] = ready[:1]
    return {"metadata": kept_meta, "spec": kept_spec, "status": kept_status}
