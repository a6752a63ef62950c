"""`kubectl fluxnode queue`: the FluxJob objects as the binder's ordered queue.

Design: the plugin reads the queue only through the API server (the FluxJob objects the
binder writes, daemonset/workloads/fluxjob-crd.yaml), never the leader, so it works with the
user's own kubeconfig and RBAC. The order is the binder's (scheduler/binder/fluxjob_loop.py
and issue 30's queue semantics):

1. workloads still waiting (Queued, Reserved) first, by the POSITION the binder wrote; one
   with no position yet after them, by priority (higher first), then creation time. A
   Running Job that grew (its parallelism raised) and waits for its growth has a POSITION
   too, and is listed among them at that place;
2. then those holding their allocation (Admitted, Running);
3. then those that ended (Finished, Failed).

Within groups 2 and 3 (and to break any tie) priority, then creation time, then
namespace/name. This module is pure (objects in, rows out) so the order is testable alone;
kubectl_plugin.py does the reading and the printing.
"""

from __future__ import annotations

# the FluxJob phases (scheduler/binder/fluxjob.py PHASES) by where they sort; not imported
# from there so the plugin starts without the binder's imports
GROUPS = {"Queued": 0, "Reserved": 0, "Admitted": 1, "Running": 1, "Finished": 2, "Failed": 2}
HEADER = ("POSITION", "NAMESPACE/NAME", "QUEUE", "PHASE", "PRIORITY", "PODS", "NODES",
          "START", "REASON")


def _sort_key(obj: dict) -> tuple:
    meta, spec, status = (obj.get("metadata") or {}), (obj.get("spec") or {}), \
        (obj.get("status") or {})
    phase = status.get("phase") or "Queued"  # a record the binder has not written yet
    group = GROUPS.get(phase, 3)
    position = status.get("position")
    if group == 1 and isinstance(position, int):  # running, its growth waiting
        group = 0
    has_position = group == 0 and isinstance(position, int)
    priority = spec.get("priority") if isinstance(spec.get("priority"), int) else 0
    return (group, not has_position, position if has_position else 0, -priority,
            meta.get("creationTimestamp") or "", meta.get("namespace") or "",
            meta.get("name") or "")


def ordered(objects: list[dict]) -> list[dict]:
    """The FluxJob objects in queue order (see the module's docstring)."""
    return sorted(objects, key=_sort_key)


def rows(objects: list[dict]) -> list[tuple[str, ...]]:
    """One row of HEADER per FluxJob, in queue order; POSITION is the binder's, or "-"."""
    out = []
    for obj in ordered(objects):
        meta, spec, status = (obj.get("metadata") or {}), (obj.get("spec") or {}), \
            (obj.get("status") or {})
        position = status.get("position")
        pods = status.get("pods") or f"{status.get('boundPods') or 0}/{spec.get('pods', '?')}"
        out.append((str(position) if isinstance(position, int) else "-",
                    f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                    str(spec.get("queue") or "-"), str(status.get("phase") or "Queued"),
                    str(spec.get("priority", "-")), str(pods), str(status.get("nodes") or "-"),
                    str(status.get("start") or "-"), str(status.get("reason") or "-")))
    return out


def table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    """Columns padded as kubectl pads them (three spaces between); the last one not padded."""
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = []
    for r in [header, *body]:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)
