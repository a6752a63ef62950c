"""Server-side printing: the ``meta.k8s.io/v1`` Table the API server answers ``kubectl get`` with.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server chose (``-o wide`` adds those of priority 1); the server computes the
cells. The columns and cells here follow the real server's printers, in
kubernetes/kubernetes pkg/printers/internalversion/printers.go (``AddHandlers``: the column
definitions; ``printPod``, ``printNode``, ``printEvent``, ``printJob``, ...: the cells) and
apimachinery's ``util/duration.HumanDuration`` for ages. A resource without a printer here is
answered 501 naming it (see `PrintingNotEmulated`), never with made-up columns: a real server
has a printer for every built-in type, so a guess would be a silent difference.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

NONE = "<none>"


class PrintingNotEmulated(Exception):
    """A Table was asked for a resource this module has no printer for."""


def human_duration(seconds: float) -> str:
    """apimachinery/pkg/util/duration.HumanDuration: ``45s``, ``3m20s``, ``5h``, ``2d3h``..."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def age(value: str | None, now: datetime.datetime) -> str:
    """translateTimestampSince: ``<unknown>`` for no timestamp."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration((now - when).total_seconds())


def _column(name: str, type_: str = "string", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": "", "priority": priority}


NAME = _column("Name", fmt="name")
AGE = _column("Age")
CONTAINERS, IMAGES = _column("Containers", priority=1), _column("Images", priority=1)
SELECTOR = _column("Selector", priority=1)


def _template_cells(spec: dict) -> list[str]:
    """Containers and Images of a pod template (layoutContainerCells)."""
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers)]


def format_label_selector(selector: dict | None) -> str:
    """metav1.FormatLabelSelector: ``a=b,c in (d,e)``; ``<none>`` for an empty one."""
    if not selector:
        return NONE
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr.get("operator"), ",".join(expr.get("values") or [])
        key = expr.get("key", "")
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} {op}"))
    return ",".join(parts) or NONE


def _labels(labels: dict | None) -> str:
    """labels.FormatLabels: sorted ``k=v`` joined by commas, ``<none>`` when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or NONE


# -- pods ------------------------------------------------------------------------------------
POD_COLUMNS = [NAME, _column("Ready"), _column("Status"), _column("Restarts"), AGE,
               _column("IP", priority=1), _column("Node", priority=1),
               _column("Nominated Node", priority=1), _column("Readiness Gates", priority=1)]


def pod_cells(pod: dict, now: datetime.datetime) -> list[Any]:
    """printPod: READY is ready/total containers, STATUS the phase (``SchedulingGated`` while
    the PodScheduled condition says so) unless a container's
    waiting or terminated reason, or the pod's own reason, says more; ``Terminating`` once
    it has a deletionTimestamp."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    reason = status.get("reason") or status.get("phase") or ""
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in status.get("conditions") or []):
        reason = "SchedulingGated"
    restarts, ready, running = 0, 0, False
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += cs.get("restartCount", 0)
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        initializing = True
        if terminated:
            reason = "Init:" + (terminated.get("reason") or
                                f"ExitCode:{terminated.get('exitCode')}")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        break
    last_restart: datetime.datetime | None = None
    if not initializing:
        restarts = 0
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            finished = _parse_time(((cs.get("lastState") or {}).get("terminated") or {})
                                   .get("finishedAt"))
            if finished and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = (f"Signal:{terminated['signal']}" if terminated.get("signal")
                          else f"ExitCode:{terminated.get('exitCode')}")
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
            reason = "Running" if conditions.get("Ready") == "True" else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    ips = status.get("podIPs") or []
    ip = ips[0].get("ip") if ips else status.get("podIP")
    gates = spec.get("readinessGates") or []
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        true = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        gates_cell = f"{true}/{len(gates)}"
    else:
        gates_cell = NONE
    restarts_cell = str(restarts)
    if last_restart is not None:  # "3 (2m ago)": when the last container restarted
        restarts_cell += f" ({human_duration((now - last_restart).total_seconds())} ago)"
    return [meta["name"], f"{ready}/{len(containers)}", reason, restarts_cell,
            age(meta.get("creationTimestamp"), now), ip or NONE, spec.get("nodeName") or NONE,
            status.get("nominatedNodeName") or NONE, gates_cell]


# -- nodes -----------------------------------------------------------------------------------
NODE_COLUMNS = [NAME, _column("Status"), _column("Roles"), AGE, _column("Version"),
                _column("Internal-IP", priority=1), _column("External-IP", priority=1),
                _column("OS-Image", priority=1), _column("Kernel-Version", priority=1),
                _column("Container-Runtime", priority=1)]


def node_cells(node: dict, now: datetime.datetime) -> list[Any]:
    """printNode: Ready/NotReady/Unknown from the Ready condition, ``,SchedulingDisabled`` when
    cordoned; roles from the node-role.kubernetes.io/<role> and kubernetes.io/role labels."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    states = ["Unknown"] if ready is None else \
        ["Ready" if ready.get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            role = key.removeprefix("node-role.kubernetes.io/")
            if role:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a["address"] for a in addresses if a.get("type") == kind), NONE)

    return [meta["name"], ",".join(states), ",".join(sorted(roles)) or NONE,
            age(meta.get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            address("InternalIP"), address("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


# -- events ----------------------------------------------------------------------------------
EVENT_COLUMNS = [_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"),
                 _column("Subobject", priority=1), _column("Source", priority=1),
                 _column("Message"), _column("First Seen", priority=1),
                 _column("Count", priority=1), _column("Name", priority=1, fmt="name")]


def event_cells(event: dict, now: datetime.datetime) -> list[Any]:
    """printEvent (core/v1 Event): Object is ``kind/name`` in lower case; First Seen falls
    back to eventTime, Last Seen to First Seen, a series gives both Last Seen and Count;
    Source is formatEventSource: the source's component (else reportingComponent) and host
    (else reportingInstance), joined by ", "."""
    involved = event.get("involvedObject") or {}
    series = event.get("series")
    first = event.get("firstTimestamp") or event.get("eventTime")
    first_cell = age(first, now)
    last_cell = age(event["lastTimestamp"], now) if event.get("lastTimestamp") else first_cell
    count = event.get("count") or 1
    if series:
        last_cell, count = age(series.get("lastObservedTime"), now), series.get("count", 0)
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    instance = source.get("host") or event.get("reportingInstance") or ""
    return [last_cell, event.get("type", ""), event.get("reason", ""),
            f"{involved.get('kind', '').lower()}/{involved.get('name', '')}",
            involved.get("fieldPath", ""), f"{component}, {instance}" if instance else component,
            (event.get("message") or "").strip(), first_cell, str(count),
            event["metadata"]["name"]]


# -- workloads -------------------------------------------------------------------------------
JOB_COLUMNS = [NAME, _column("Status"), _column("Completions"), _column("Duration"), AGE,
               CONTAINERS, IMAGES, SELECTOR]
# printJob's Status: the first of these conditions that is True, else Running (Terminating
# once deleting, checked after Complete and Failed)
_JOB_STATES = (("Complete", "Complete"), ("Failed", "Failed"), ("Suspended", "Suspended"),
               ("FailureTarget", "FailureTarget"), ("SuccessCriteriaMet", "SuccessCriteriaMet"))


def job_cells(job: dict, now: datetime.datetime) -> list[Any]:
    """printJob: Status from the conditions, succeeded/completions (``/1 of N`` for a work
    queue), the run time so far (or start to completion)."""
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _parse_time(status.get("startTime")), _parse_time(status.get("completionTime"))
    duration = human_duration(((end or now) - start).total_seconds()) if start else ""
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    state = next((name for kind, name in _JOB_STATES[:2] if kind in true), None)
    if state is None and meta.get("deletionTimestamp"):
        state = "Terminating"
    if state is None:
        state = next((name for kind, name in _JOB_STATES[2:] if kind in true), "Running")
    return [meta["name"], state, completions, duration, age(meta.get("creationTimestamp"), now),
            *_template_cells(spec), format_label_selector(spec.get("selector"))]


DAEMONSET_COLUMNS = [NAME, _column("Desired", "integer"), _column("Current", "integer"),
                     _column("Ready", "integer"), _column("Up-to-date", "integer"),
                     _column("Available", "integer"), _column("Node Selector"), AGE,
                     CONTAINERS, IMAGES, SELECTOR]


def daemonset_cells(ds: dict, now: datetime.datetime) -> list[Any]:
    meta, spec, status = ds["metadata"], ds.get("spec") or {}, ds.get("status") or {}
    node_selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector")
    return [meta["name"], status.get("desiredNumberScheduled", 0),
            status.get("currentNumberScheduled", 0), status.get("numberReady", 0),
            status.get("updatedNumberScheduled", 0), status.get("numberAvailable", 0),
            _labels(node_selector), age(meta.get("creationTimestamp"), now),
            *_template_cells(spec), format_label_selector(spec.get("selector"))]


DEPLOYMENT_COLUMNS = [NAME, _column("Ready"), _column("Up-to-date", "integer"),
                      _column("Available", "integer"), AGE, CONTAINERS, IMAGES, SELECTOR]


def deployment_cells(deploy: dict, now: datetime.datetime) -> list[Any]:
    meta, spec, status = deploy["metadata"], deploy.get("spec") or {}, deploy.get("status") or {}
    return [meta["name"], f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0),
            age(meta.get("creationTimestamp"), now), *_template_cells(spec),
            format_label_selector(spec.get("selector"))]


PDB_COLUMNS = [NAME, _column("Min Available"), _column("Max Unavailable"),
               _column("Allowed Disruptions", "integer"), AGE]


def pdb_cells(pdb: dict, now: datetime.datetime) -> list[Any]:
    meta, spec, status = pdb["metadata"], pdb.get("spec") or {}, pdb.get("status") or {}
    return [meta["name"], str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
            str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
            status.get("disruptionsAllowed", 0), age(meta.get("creationTimestamp"), now)]


# -- the rest --------------------------------------------------------------------------------
NAMESPACE_COLUMNS = [NAME, _column("Status"), AGE]


def namespace_cells(ns: dict, now: datetime.datetime) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"),
            age(ns["metadata"].get("creationTimestamp"), now)]


CONFIGMAP_COLUMNS = [NAME, _column("Data", "integer"), AGE]


def configmap_cells(cm: dict, now: datetime.datetime) -> list[Any]:
    return [cm["metadata"]["name"], len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            age(cm["metadata"].get("creationTimestamp"), now)]


LEASE_COLUMNS = [NAME, _column("Holder"), AGE]


def lease_cells(lease: dict, now: datetime.datetime) -> list[Any]:
    return [lease["metadata"]["name"], (lease.get("spec") or {}).get("holderIdentity", ""),
            age(lease["metadata"].get("creationTimestamp"), now)]


# pkg/printers/internalversion/printers.go, priorityClassColumnDefinitions
PRIORITY_CLASS_COLUMNS = [NAME, _column("Value", "integer"), _column("Global-Default", "boolean"),
                          AGE, _column("PreemptionPolicy")]


def priority_class_cells(klass: dict, now: datetime.datetime) -> list[Any]:
    return [klass["metadata"]["name"], klass.get("value", 0), bool(klass.get("globalDefault")),
            age(klass["metadata"].get("creationTimestamp"), now),
            klass.get("preemptionPolicy") or ""]


# CRDs are printed by apiextensions-apiserver with the generic storage's default convertor
# (apiserver pkg/registry/rest/table.go, defaultTableConvertor): NAME and CREATED AT (RFC 3339)
CRD_COLUMNS = [NAME, _column("Created At", "date")]


def crd_cells(crd: dict, now: datetime.datetime) -> list[Any]:
    return [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp", "")]


# printers.go printMutatingWebhook / printValidatingWebhook: NAME, WEBHOOKS (how many), AGE
WEBHOOK_COLUMNS = [NAME, _column("Webhooks", "integer"), AGE]


def webhook_configuration_cells(config: dict, now: datetime.datetime) -> list[Any]:
    return [config["metadata"]["name"], len(config.get("webhooks") or []),
            age(config["metadata"].get("creationTimestamp"), now)]


PRINTERS: dict[str, tuple[list[dict], Callable[[dict, datetime.datetime], list[Any]]]] = {
    "pods": (POD_COLUMNS, pod_cells),
    "nodes": (NODE_COLUMNS, node_cells),
    "events": (EVENT_COLUMNS, event_cells),
    "jobs.batch": (JOB_COLUMNS, job_cells),
    "daemonsets.apps": (DAEMONSET_COLUMNS, daemonset_cells),
    "deployments.apps": (DEPLOYMENT_COLUMNS, deployment_cells),
    "poddisruptionbudgets.policy": (PDB_COLUMNS, pdb_cells),
    "namespaces": (NAMESPACE_COLUMNS, namespace_cells),
    "configmaps": (CONFIGMAP_COLUMNS, configmap_cells),
    "leases.coordination.k8s.io": (LEASE_COLUMNS, lease_cells),
    "priorityclasses.scheduling.k8s.io": (PRIORITY_CLASS_COLUMNS, priority_class_cells),
    "customresourcedefinitions.apiextensions.k8s.io": (CRD_COLUMNS, crd_cells),
    "mutatingwebhookconfigurations.admissionregistration.k8s.io":
        (WEBHOOK_COLUMNS, webhook_configuration_cells),
    "validatingwebhookconfigurations.admissionregistration.k8s.io":
        (WEBHOOK_COLUMNS, webhook_configuration_cells),
}


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a meta.k8s.io Table (v1 or v1beta1) first."""
    for entry in accept.split(","):
        params = dict(
            p.strip().split("=", 1) for p in entry.split(";")[1:] if "=" in p
        )
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
    return False


def table(ref: str, items: list[dict], list_meta: dict, include_object: str | None = None,
          group_version: str = "meta.k8s.io/v1") -> dict:
    """The Table for `items` of resource `ref`; each row carries the object's metadata as
    PartialObjectMetadata (the default includeObject=Metadata: kubectl reads namespaces and
    labels from it), or the whole object with includeObject=Object."""
    if ref not in PRINTERS:
        raise PrintingNotEmulated(ref)
    columns, cells = PRINTERS[ref]
    return _rows(columns, cells, items, list_meta, include_object, group_version)


def _rows(columns: list[dict], cells: Callable[[dict, datetime.datetime], list[Any]],
          items: list[dict], list_meta: dict, include_object: str | None,
          group_version: str = "meta.k8s.io/v1") -> dict:
    now = datetime.datetime.now(datetime.UTC)
    rows = []
    for item in items:
        if include_object == "None":
            obj = None
        elif include_object == "Object":
            obj = item
        else:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": group_version,
                   "metadata": item["metadata"]}
        row: dict[str, Any] = {"cells": cells(item, now)}
        if obj is not None:
            row["object"] = obj
        rows.append(row)
    return {"kind": "Table", "apiVersion": group_version, "metadata": list_meta,
            "columnDefinitions": columns, "rows": rows}


# -- custom resources ------------------------------------------------------------------------
def _json_path(path: str) -> list[str | int | None]:
    """A printer column's simple JSON path (``.status.phase``, ``.spec.list[0].x``,
    ``.metadata.labels.app\\.kubernetes\\.io/name``, ``[*]``) as steps: keys, indexes, and
    None for ``[*]``."""
    steps: list[str | int | None] = []
    i, n = 0, len(path)
    while i < n:
        if path[i] == ".":
            i += 1
            key = ""
            while i < n and path[i] not in ".[":
                if path[i] == "\\" and i + 1 < n:
                    i += 1
                key += path[i]
                i += 1
            if key:
                steps.append(key)
        elif path[i] == "[":
            end = path.index("]", i)
            inner = path[i + 1:end].strip()
            if inner == "*":
                steps.append(None)
            elif inner[:1] in ("'", '"'):
                steps.append(inner[1:-1])
            else:
                steps.append(int(inner))
            i = end + 1
        else:
            raise ValueError(f"unexpected {path[i]!r} in the JSON path {path!r}")
    return steps


_MISSING = object()


def _find(obj: Any, steps: list[str | int | None]) -> Any:
    """The first value `steps` reach in `obj` (client-go jsonpath FindResults, of which the
    table convertor prints the first), or _MISSING."""
    if not steps:
        return obj
    step, rest = steps[0], steps[1:]
    if step is None:
        for item in obj if isinstance(obj, list) else (obj.values() if isinstance(obj, dict)
                                                       else ()):
            found = _find(item, rest)
            if found is not _MISSING:
                return found
        return _MISSING
    if isinstance(step, int):
        if isinstance(obj, list) and -len(obj) <= step < len(obj):
            return _find(obj[step], rest)
        return _MISSING
    if isinstance(obj, dict) and step in obj:
        return _find(obj[step], rest)
    return _MISSING


def _printed(value: Any) -> str:
    """A value as client-go's jsonpath prints it (a string as it is, others as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, separators=(",", ":"))


def _custom_cell(type_: str, value: Any, now: datetime.datetime) -> Any:
    """tableconvertor.go cellForJSONValue: the cell of one printer column, or None (kubectl
    prints ``<none>``) when the value is missing or not of the column's type."""
    if value is _MISSING or value is None:
        return None
    if type_ == "string":
        return _printed(value)
    if type_ == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if type_ == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if type_ == "boolean" and isinstance(value, bool):
        return value
    if type_ == "date" and isinstance(value, str):
        try:
            when = _parse_time(value)
        except ValueError:
            return "<invalid>"
        return "<unknown>" if when is None else human_duration((now - when).total_seconds())
    return None


def custom_table(columns: tuple[dict, ...], items: list[dict], list_meta: dict,
                 include_object: str | None = None) -> dict:
    """The Table of custom resources: NAME, then the CRD version's additionalPrinterColumns
    (apiextensions-apiserver pkg/registry/customresource/tableconvertor/tableconvertor.go):
    each a JSON path into the object, its cell typed by the column's type (a ``date`` as an
    age), ``priority`` kept so kubectl shows priority > 0 only with ``-o wide``."""
    definitions = [NAME] + [
        {"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
         "description": c.get("description", ""), "priority": int(c.get("priority") or 0)}
        for c in columns]
    paths = [_json_path(c["jsonPath"]) for c in columns]
    now = datetime.datetime.now(datetime.UTC)

    def cells(obj: dict, _now: datetime.datetime) -> list[Any]:
        return [obj["metadata"]["name"]] + [
            _custom_cell(c.get("type", "string"), _find(obj, p), now)
            for c, p in zip(columns, paths, strict=True)]

    return _rows(definitions, cells, items, list_meta, include_object)
