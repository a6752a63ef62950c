"""What a running Job holds, read from outside the binder (tests/scheduler/binder/
test_job_slots.py, test_job_scale.py): the leader's record of the Job's allocations
(``sched.list``), the Job controller's pods and their completion indexes, the pods'
Bindings."""

from __future__ import annotations

from support.binder_cluster import BinderCluster
from support.fluxjob_cluster import job_pods
from support.oracles import parse_idset

INDEX = "batch.kubernetes.io/job-completion-index"


def allocations(c: BinderCluster) -> list[dict]:
    """The binder's allocations for workloads (not its outside-usage pins), as the leader
    lists them."""
    return [a for a in c.inst.rpc("sched.list", {"labels": {"owner": "binder:fluxnode"}})[
        "allocations"] if (a.get("labels") or {}).get("kind") in ("fluxjob", "group")]


def cores_held(c: BinderCluster) -> dict[str, set[int]]:
    """Node -> the cores the leader holds for the binder's workloads."""
    out: dict[str, set[int]] = {}
    for a in allocations(c):
        for n in a["nodes"]:
            out.setdefault(n["hostname"], set()).update(parse_idset(n.get("cores") or ""))
    return out


def live(c: BinderCluster, name: str) -> list[dict]:
    return [p for p in job_pods(c, name)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def bound(c: BinderCluster, name: str, index: str | None = None) -> list[dict]:
    """The Job's live pods bound to a node (of completion index `index` when given)."""
    return [p for p in live(c, name) if (p.get("spec") or {}).get("nodeName")
            and (index is None or (p["metadata"].get("labels") or {}).get(INDEX) == index)]


def where(pod: dict) -> tuple[str, str, str]:
    """Node, cores and allocation id, as the pod's Binding wrote them."""
    ann = pod["metadata"].get("annotations") or {}
    return pod["spec"]["nodeName"], ann.get("fluxnode.io/cores"), ann.get("fluxnode.io/allocation")


def slot(listed: dict, i: int) -> tuple[str, str, str]:
    s = listed["slots"][i]
    return s["hostname"], s["cores"], str(listed["id"])
