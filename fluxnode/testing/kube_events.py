"""Event validation as the Kubernetes API server does it (core/v1 and events.k8s.io/v1).

Source: kubernetes/kubernetes ``pkg/apis/core/validation/events.go``
(``ValidateEventCreate`` / ``ValidateEventUpdate`` / ``legacyValidateEvent``); both
Event APIs are stored as the internal ``core.Event`` and validated there (the
``pkg/apis/events`` group has no validation of its own). The rules:

- every Event ("legacy" rules, both APIs, create and update):
  - without ``eventTime`` (an old-style Event): a cluster-scoped involved object (no
    namespace) needs the Event in ``default``; a namespaced one needs the Event in the
    object's own namespace;
  - with ``eventTime``: a cluster-scoped involved object needs the Event in ``default``
    or ``kube-system`` (the kubelet posts its Node's Events in ``default``; a namespaced
    object's namespace is NOT compared in this branch); ``reportingController``
    (``reportingComponent`` in core/v1) required and a qualified name;
    ``reportingInstance``, ``action``, ``reason`` required and at most 128 characters;
    the note (``message``) at most 1024 characters;
- events.k8s.io/v1 create, in addition ("strict" rules; core/v1 is exempt for
  backwards compatibility): ``eventTime`` required, ``type`` Normal or Warning, the
  deprecated ``firstTimestamp``/``lastTimestamp``/``count``/``source`` unset, a
  ``series`` with count >= 2 and a lastObservedTime.

Field paths are those of the internal type, as the real server reports them even for
events.k8s.io/v1 (``involvedObject.namespace`` for ``regarding.namespace``, ``message``
for ``note``). Messages follow ``field.Error``: ``Required value`` and
``Invalid value: "<value>": <detail>``.
"""

from __future__ import annotations

import re

REPORTING_INSTANCE_LENGTH_LIMIT = 128
ACTION_LENGTH_LIMIT = 128
REASON_LENGTH_LIMIT = 128
NOTE_LENGTH_LIMIT = 1024

_QNAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QNAME_FMT = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)

Cause = tuple[str, str]


def required(path: str) -> Cause:
    return path, "Required value"


def invalid_value(path: str, value: object, detail: str) -> Cause:
    return path, f'Invalid value: "{value}": {detail}'


def qualified_name_errors(value: str) -> list[str]:
    """``validation.IsQualifiedName`` (apimachinery): ``[prefix/]name``; the one copy
    (Events' reportingController, a Job's onPodConditions types: kube_job_validation)."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a qualified name {_QNAME_FMT} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    errs = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _SUBDOMAIN.match(prefix):
            errs.append(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QNAME_PART.match(name):
        errs.append(f"name part {_QNAME_FMT}")
    return errs


def _internal(obj: dict, events_api: bool) -> dict:
    """The fields of ``core.Event`` that validation reads, from either wire form."""
    if events_api:  # events.k8s.io/v1 field names (k8s.io/api/events/v1 conversion)
        return {
            "involved": obj.get("regarding") or {},
            "message": obj.get("note") or "",
            "reportingController": obj.get("reportingController") or "",
            "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"),
            "count": obj.get("deprecatedCount") or 0,
            "source": obj.get("deprecatedSource") or {},
        }
    return {
        "involved": obj.get("involvedObject") or {},
        "message": obj.get("message") or "",
        "reportingController": obj.get("reportingComponent") or "",
        "firstTimestamp": obj.get("firstTimestamp"),
        "lastTimestamp": obj.get("lastTimestamp"),
        "count": obj.get("count") or 0,
        "source": obj.get("source") or {},
    }


def event_causes(obj: dict, *, events_api: bool, create: bool) -> list[Cause]:
    """What the API server refuses in this Event (empty: valid). ``events_api``: posted
    through events.k8s.io/v1 (else core/v1); ``create``: a create (else an update)."""
    ev = _internal(obj, events_api)
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    involved_ns = ev["involved"].get("namespace") or ""
    controller_field = "reportingController" if events_api else "reportingComponent"
    causes: list[Cause] = []
    # legacyValidateEvent
    if not obj.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                causes.append(invalid_value("involvedObject.namespace", involved_ns,
                                            "does not match event.namespace"))
        elif namespace != involved_ns:
            causes.append(invalid_value("involvedObject.namespace", involved_ns,
                                        "does not match event.namespace"))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            causes.append(invalid_value("involvedObject.namespace", involved_ns,
                                        "does not match event.namespace"))
        controller = ev["reportingController"]
        if not controller:
            causes.append(required(controller_field))
        for msg in qualified_name_errors(controller):
            causes.append(invalid_value(controller_field, controller, msg))
        for path, value, limit in (
            ("reportingInstance", obj.get("reportingInstance") or "",
             REPORTING_INSTANCE_LENGTH_LIMIT),
            ("action", obj.get("action") or "", ACTION_LENGTH_LIMIT),
            ("reason", obj.get("reason") or "", REASON_LENGTH_LIMIT),
        ):
            if not value:
                causes.append(required(path))
            if len(value) > limit:
                causes.append(invalid_value(path, "", f"can have at most {limit} characters"))
        if len(ev["message"]) > NOTE_LENGTH_LIMIT:
            causes.append(invalid_value("message", "",
                                        f"can have at most {NOTE_LENGTH_LIMIT} characters"))
    if not events_api or not create:
        return causes
    # ValidateEventCreate, strict part (events.k8s.io/v1 and newer)
    series = obj.get("series")
    if series is not None:
        if (series.get("count") or 0) < 2:
            causes.append(invalid_value("series.count", "", "should be at least 2"))
        if not series.get("lastObservedTime"):
            causes.append(required("series.lastObservedTime"))
    if not obj.get("eventTime"):
        causes.append(required("eventTime"))
    type_ = obj.get("type") or ""
    if type_ not in ("Normal", "Warning"):
        causes.append(invalid_value("type", "", f"has invalid value: {type_}"))
    for path in ("firstTimestamp", "lastTimestamp"):
        if ev[path]:
            causes.append(invalid_value(path, "", "needs to be unset"))
    if ev["count"]:
        causes.append(invalid_value("count", "", "needs to be unset"))
    if ev["source"].get("component") or ev["source"].get("host"):
        causes.append(invalid_value("source", "", "needs to be unset"))
    return causes


# -- one Event, two APIs ------------------------------------------------------------------
# Both APIs read and write the same stored core.Event (the events.k8s.io group is another
# version of it): an Event written through one is listed and read through the other. The
# field correspondence is that of kubernetes/kubernetes pkg/apis/events/v1/conversion.go
# (Convert_v1_Event_To_core_Event and back): events.k8s.io name -> core/v1 name.
_EVENTS_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_CORE_TO_EVENTS = {core: new for new, core in _EVENTS_TO_CORE.items()}


def as_core_event(event: dict) -> dict:
    """An events.k8s.io/v1 Event as core/v1 shows it."""
    out = {_EVENTS_TO_CORE.get(k, k): v for k, v in event.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    out.setdefault("eventTime", None)  # a zero MicroTime is written as null,
    out.setdefault("involvedObject", {})  # a zero ObjectReference as {}
    return out


def as_events_event(event: dict) -> dict:
    """A core/v1 Event as events.k8s.io/v1 shows it."""
    out = {_CORE_TO_EVENTS.get(k, k): v for k, v in event.items()}
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    out.setdefault("eventTime", None)  # a zero MicroTime is written as null (the official
    # Python client's model then refuses the list, as it does against a real server)
    out.setdefault("regarding", {})
    return out
