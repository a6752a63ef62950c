"""PriorityClasses and the Priority admission plugin, as a real API server has them.

Why a module of its own: priority is one concept with three parts the server keeps in
different places, and the binder orders its queue by it (scheduler/binder/fluxjob.py):

- the system classes every server creates at start-up (pkg/apis/scheduling/types.go,
  SystemPriorityClasses: system-node-critical 2000001000, system-cluster-critical
  2000000000), served as objects;
- PriorityClass validation (pkg/apis/scheduling/validation/validation.go,
  ValidatePriorityClass): a name with the ``system-`` prefix is reserved, a user class's
  value is at most HighestUserDefinablePriority (1000000000), and the value may not change
  (ValidatePriorityClassUpdate);
- the plugin (plugin/pkg/admission/priority/admission.go): on a pod's CREATE it sets
  spec.priority (and spec.preemptionPolicy) from spec.priorityClassName, or from the
  globalDefault class when none is named (else 0); an unknown class is refused
  (Forbidden, "no PriorityClass with name X was found"), and so is a spec.priority the
  client set that differs from what the class says. On a PriorityClass's CREATE or UPDATE
  it refuses a second globalDefault class.
"""

from __future__ import annotations

from fluxnode.testing.kube_types import ApiError

REF = "priorityclasses.scheduling.k8s.io"
SYSTEM_PREFIX = "system-"
HIGHEST_USER_DEFINABLE = 1_000_000_000
SYSTEM_CLASSES = {"system-node-critical": 2_000_001_000,
                  "system-cluster-critical": 2_000_000_000}
DEFAULT_PREEMPTION = "PreemptLowerPriority"


def system_class_objects() -> list[dict]:
    """The classes the server creates at start-up (the scheduling REST storage's
    PostStartHook, AddSystemPriorityClasses)."""
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value,
             "description": "Used for system critical pods that must not be moved from their "
                            "current node." if name == "system-node-critical" else
                            "Used for system critical pods that must run in the cluster, "
                            "but can be moved to another node if necessary.",
             "preemptionPolicy": DEFAULT_PREEMPTION}
            for name, value in SYSTEM_CLASSES.items()]


def class_causes(obj: dict, old: dict | None) -> list[tuple[str, str]]:
    """ValidatePriorityClass (and ValidatePriorityClassUpdate when `old`), as (field,
    message) causes."""
    name = (obj.get("metadata") or {}).get("name") or ""
    value = obj.get("value")
    causes: list[tuple[str, str]] = []
    if not isinstance(value, int) or isinstance(value, bool):
        causes.append(("value", "Required value"))
    elif name.startswith(SYSTEM_PREFIX):
        if SYSTEM_CLASSES.get(name) != value:
            causes.append(("metadata.name", f"Forbidden: priority class names with "
                           f"'{SYSTEM_PREFIX}' prefix are reserved for system use only. error: "
                           f"{name!r} is not a known system priority class"))
    elif value > HIGHEST_USER_DEFINABLE:
        causes.append(("value", "Forbidden: maximum allowed value of a user defined priority "
                       f"is {HIGHEST_USER_DEFINABLE}"))
    if old is not None and old.get("value") != value:
        causes.append(("value", "Forbidden: may not be changed in an update."))
    preemption = obj.setdefault("preemptionPolicy", DEFAULT_PREEMPTION)
    if preemption not in ("PreemptLowerPriority", "Never"):
        causes.append(("preemptionPolicy", f'Unsupported value: "{preemption}": supported '
                       'values: "Never", "PreemptLowerPriority"'))
    return causes


def check_global_default(obj: dict, classes: list[dict]) -> None:
    """The plugin's Validate for a PriorityClass: only one globalDefault class."""
    if not obj.get("globalDefault"):
        return
    name = (obj.get("metadata") or {}).get("name") or ""
    for other in classes:
        other_name = other["metadata"]["name"]
        if other.get("globalDefault") and other_name != name:
            raise ApiError(403, "Forbidden",
                           f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: '
                           f"PriorityClass {other_name} is already marked as default. Only "
                           "one default can exist",
                           {"name": name, "group": "scheduling.k8s.io",
                            "kind": "priorityclasses"})


def admit_pod(pod: dict, classes: list[dict]) -> None:
    """The plugin's Admit for a pod's CREATE: spec.priority (and preemptionPolicy) from its
    class, in place; raises the server's Forbidden otherwise."""
    meta = pod.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "Unknown"
    spec = pod.setdefault("spec", {})
    wanted = spec.get("priorityClassName") or ""
    by_name = {c["metadata"]["name"]: c for c in classes}
    if wanted:
        chosen = by_name.get(wanted)
        if chosen is None:
            raise _forbidden(name, f"no PriorityClass with name {wanted} was found")
    else:
        chosen = next((c for c in classes if c.get("globalDefault")), None)
        if chosen is not None:
            spec["priorityClassName"] = chosen["metadata"]["name"]
    value = chosen["value"] if chosen is not None else 0
    preemption = (chosen or {}).get("preemptionPolicy") or DEFAULT_PREEMPTION
    if spec.get("priority") is not None and spec["priority"] != value:
        raise _forbidden(name, "the integer value of priority "
                         f"({spec['priority']}) must not be provided in pod spec; priority "
                         f"admission controller computed {value} from the given PriorityClass "
                         "name")
    spec["priority"] = value
    spec["preemptionPolicy"] = preemption


def _forbidden(name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'pods "{name}" is forbidden: {why}',
                    {"name": name, "kind": "pods"})
