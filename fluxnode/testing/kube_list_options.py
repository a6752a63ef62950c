"""The list and watch options a request may combine, and the watch-list stream they ask for.

Design: kubectl 1.37 (client-go's WatchListClient on by default) waits for a deletion
or a condition with a watch that asks for its initial state in the stream itself:
``watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&
allowWatchBookmarks=true``. A server with the WatchList feature (KEP-3157) answers with
an ADDED event per object, then a BOOKMARK whose object carries the annotation
``k8s.io/initial-events-end: "true"`` and the resourceVersion of that state, then the
changes from there; the client waits for that bookmark before it reads any state. The
emulator, which says it is 1.33, serves the feature (its storage is always current, so
"not older than" any resourceVersion is its state now).

Which combinations are refused, and with which words, is apimachinery's
``ValidateListOptions`` (pkg/apis/meta/internalversion/validation/validation.go): a 422
``ListOptions.meta.k8s.io "" is invalid`` whose causes name the field.
"""

from __future__ import annotations

from fluxnode.testing.kube_types import ResourceType, bad_request, invalid

NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark's annotation
_LIST_OPTIONS = ResourceType("listoptions", "ListOptions", group="meta.k8s.io")


def initial_events(query, watch: bool) -> bool | None:
    """``sendInitialEvents`` as the request gives it (None: not given), once the request's
    list options are known to be allowed together; raises the server's 422 (or 400 for a
    value that is no boolean) otherwise."""
    raw = query.get("sendInitialEvents")
    send: bool | None = None
    if raw is not None:
        if raw not in ("true", "false", "1", "0"):
            raise bad_request(f'sendInitialEvents: invalid boolean value "{raw}"')
        send = raw in ("true", "1")
    match = query.get("resourceVersionMatch") or ""
    causes: list[tuple[str, str]] = []
    if watch:
        if raw is not None and match != NOT_OLDER_THAN:
            causes.append(("resourceVersionMatch", "Forbidden: sendInitialEvents requires "
                           f"setting resourceVersionMatch to {NOT_OLDER_THAN}"))
        if match:
            if raw is None:
                causes.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is "
                               "forbidden for watch unless sendInitialEvents is provided"))
            if match != NOT_OLDER_THAN:
                causes.append(("resourceVersionMatch", f'Unsupported value: "{match}": '
                               f'supported values: "{NOT_OLDER_THAN}"'))
    else:
        version = query.get("resourceVersion") or ""
        if match:
            if not version:
                causes.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is "
                               "forbidden unless resourceVersion is provided"))
            if query.get("continue"):
                causes.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is "
                               "forbidden when continue is provided"))
            if match not in (NOT_OLDER_THAN, EXACT):
                causes.append(("resourceVersionMatch", f'Unsupported value: "{match}": '
                               f'supported values: "{EXACT}", "{NOT_OLDER_THAN}", ""'))
            if match == EXACT and version == "0":
                causes.append(("resourceVersionMatch", 'Forbidden: resourceVersionMatch '
                               '"exact" is forbidden for resourceVersion "0"'))
        if raw is not None:
            causes.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden "
                           "for list"))
    if causes:
        raise invalid(_LIST_OPTIONS, "", causes)
    return send


def end_of_initial_events(rt: ResourceType, rv: int) -> dict:
    """The bookmark that closes a watch-list stream's initial state."""
    return {"type": "BOOKMARK", "object": {
        "kind": rt.kind, "apiVersion": rt.api_version,
        "metadata": {"resourceVersion": str(rv),
                     "annotations": {INITIAL_EVENTS_END: "true"}}}}

