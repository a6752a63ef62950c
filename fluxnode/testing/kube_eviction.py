"""The Eviction subresource (``POST pods/<name>/eviction``) and the PodDisruptionBudgets it obeys.

``kubectl drain`` evicts every pod it removes; the API server refuses (429 TooManyRequests)
an eviction that would take a PodDisruptionBudget's healthy pods below what it asks for, and
kubectl retries every 5 s until the budget allows it or ``--timeout`` runs out. The rules are
those of kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go (``EvictionREST.Create``,
``canIgnorePDB``, ``checkAndDecrement``, ``getPodDisruptionBudgets``).

A real cluster's disruption controller (pkg/controller/disruption/disruption.go) keeps each
budget's status (currentHealthy, desiredHealthy, disruptionsAllowed) up to date; the emulator
has no controllers, so it computes that status when an eviction needs it, from the pods as
they are at that moment: healthy means Ready and not being deleted (``countHealthyPods``), and
the pods named in ``status.disruptedPods`` (evictions approved but not yet seen deleted) do
not count. Only an integer ``minAvailable`` is emulated: ``maxUnavailable`` and percentages
need the owning controllers' scale (``getExpectedPodCount``), which the emulator does not
keep, so they answer 501.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from fluxnode.testing.kube_selectors import selector_predicate
from fluxnode.testing.kube_store import ApiError, bad_request

if TYPE_CHECKING:
    from fluxnode.testing.kube_store import KubeStore


class BudgetNotEmulated(Exception):
    """A PodDisruptionBudget whose status needs what the emulator does not keep."""


def _ready(pod: dict) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _selector_string(selector: dict | None) -> str | None:
    """A LabelSelector as a selector string; None when it is empty (matches nothing here,
    as in getPodDisruptionBudgets: "a nil or empty selector ... should match nothing")."""
    if not selector:
        return None
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or None


def _matches(pdb: dict, pod: dict) -> bool:
    selector = _selector_string((pdb.get("spec") or {}).get("selector"))
    if selector is None:
        return False
    return selector_predicate(selector, None, "pods")(pod)


def budget_status(store: KubeStore, pdb: dict) -> dict:
    """What the disruption controller would have written into the budget's status now."""
    spec = pdb.get("spec") or {}
    if "maxUnavailable" in spec or not isinstance(spec.get("minAvailable"), int):
        raise BudgetNotEmulated(
            f"PodDisruptionBudget {pdb['metadata']['name']}: only an integer minAvailable is "
            "emulated (maxUnavailable and percentages need the controllers' scale)"
        )
    namespace = pdb["metadata"]["namespace"]
    pods = [p for p in store.list("pods", namespace)[0] if _matches(pdb, p)]
    # an approved eviction's pod counts as disrupted until it is seen terminating or gone
    # (the controller also drops entries after a timeout)
    live = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
    disrupted = {k: v for k, v in ((pdb.get("status") or {}).get("disruptedPods") or {}).items()
                 if k in live}
    healthy = sum(1 for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")
                  and p["metadata"]["name"] not in disrupted)
    desired = spec["minAvailable"]
    return {
        **(pdb.get("status") or {}),
        "disruptedPods": disrupted,
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": len(pods),
        "disruptionsAllowed": max(0, healthy - desired),
    }


def too_many_requests(message: str, cause: str, retry_after: int) -> ApiError:
    """errors.NewTooManyRequests with a DisruptionBudget cause, as eviction.go makes it."""
    return ApiError(
        429,
        "TooManyRequests",
        message,
        {"causes": [{"reason": "DisruptionBudget", "message": cause}],
         "retryAfterSeconds": retry_after},
    )


def evict(store: KubeStore, namespace: str, name: str, eviction: dict) -> tuple[dict, dict]:
    """Evict a pod: returns (the Status to answer, the pod as the deletion left it). Raises
    ApiError 429 when a budget forbids it, BudgetNotEmulated for a budget it cannot judge."""
    if not isinstance(eviction, dict):
        raise bad_request("the request body must be a JSON object")
    if (eviction.get("metadata") or {}).get("name") != name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = dict(eviction.get("deleteOptions") or {})
    with store.lock:
        pod = store.get("pods", namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                   "code": 201}
        # canIgnorePDB: a terminal, pending or already terminating pod is deleted at once
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            obj, _ = store.delete("pods", namespace, name, options, graceful=True)
            return success, obj
        pdbs = [p for p in store.list("poddisruptionbudgets.policy", namespace)[0]
                if _matches(p, pod)]
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError", "This pod has more than one "
                           "PodDisruptionBudget, which the eviction subresource does not support.")
        if pdbs:
            pdb = pdbs[0]
            status = budget_status(store, pdb)
            pdb_name = pdb["metadata"]["name"]
            if (not _ready(pod) and status["currentHealthy"] >= status["desiredHealthy"]
                    and status["desiredHealthy"] > 0):
                # an unready pod does not count as healthy: deleting it costs the budget
                # nothing, as long as it does not become ready meanwhile (the precondition)
                options["preconditions"] = {**(options.get("preconditions") or {}),
                                            "resourceVersion": pod["metadata"]["resourceVersion"]}
            elif status["disruptionsAllowed"] == 0:
                store.update("poddisruptionbudgets.policy", namespace, pdb_name,
                             {**pdb, "status": status})
                raise too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    f"The disruption budget {pdb_name} needs {status['desiredHealthy']} "
                    f"healthy pods and has {status['currentHealthy']} currently",
                    0,
                )
            else:
                status["disruptionsAllowed"] -= 1
                now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                status["disruptedPods"] = {**(status.get("disruptedPods") or {}), name: now}
                store.update("poddisruptionbudgets.policy", namespace, pdb_name,
                             {**pdb, "status": status})
        obj, _ = store.delete("pods", namespace, name, options, graceful=True)
        return success, obj
