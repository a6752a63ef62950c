"""The three PATCH flavours the API server accepts, applied to plain JSON objects.

The official client sends a dict body as strategic-merge-patch and a list body as
json-patch; kubectl and others use merge-patch. Strategic merge here is JSON merge
plus the merge keys of the list fields our components patch (conditions by type,
containers by name, ...), which is what the real server does for those fields.
"""

from __future__ import annotations

from typing import Any

from fluxnode.testing.kube_copy import json_copy


class PatchError(ValueError):
    """A patch the API server would reject (HTTP 422 or 400)."""


# Lists that merge by key under strategic merge (field name -> merge key).
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "addresses": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, null deletes, everything else replaces. The
    result shares nothing with `target` or `patch` (the target is copied once, then
    changed)."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = json_copy(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merge_into(result: dict, patch: dict) -> None:
    """Merge `patch` into `result`, which is the caller's own copy."""
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = result[key] = {}
            _merge_into(current, value)
        else:
            result[key] = json_copy(value)


def strategic_merge_patch(target: Any, patch: Any, field: str | None = None) -> Any:
    """JSON merge with key-merged lists and ``$patch: delete|replace`` directives. The
    result shares nothing with `target` or `patch` (the target is copied once, then
    changed)."""
    return _strategic(json_copy(target), patch, field)


def _strategic(target: Any, patch: Any, field: str | None) -> Any:
    """`strategic_merge_patch` on a target that is the caller's own copy (changed in
    place where it is kept)."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: json_copy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        result = target if isinstance(target, dict) else {}
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                result.pop(key, None)
            else:
                merged = _strategic(result.get(key), value, key)
                if merged is None:
                    result.pop(key, None)
                else:
                    result[key] = merged
        return result
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field]
        if field == "ports" and patch and all(
            isinstance(i, dict) and "port" in i and "containerPort" not in i for i in patch
        ):
            # a Service's ports merge by port (ServicePort's patchMergeKey in
            # k8s.io/api/core/v1/types.go), a container's by containerPort
            key = "port"
        result = target
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise PatchError(
                    f"{field}: every element must be an object with the merge key {key!r}"
                )
            index = next(
                (
                    i
                    for i, cur in enumerate(result)
                    if isinstance(cur, dict) and cur.get(key) == item[key]
                ),
                None,
            )
            if item.get("$patch") == "delete":
                if index is not None:
                    del result[index]
            elif index is None:
                result.append({k: json_copy(v) for k, v in item.items() if k != "$patch"})
            else:
                result[index] = _strategic(result[index], item, None)
        return result
    return json_copy(patch)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"json-patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise PatchError(f"json-patch path {path!r} does not exist")
    return cur, parts[-1]


def _read(doc: Any, path: str) -> Any:
    cur = doc
    for part in _pointer(path):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise PatchError(f"json-patch path {path!r} does not exist")
    return cur


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise PatchError("json-patch body must be a list of operations")
    doc = json_copy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"json-patch operation {op!r} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind == "test":
            if _read(doc, path) != op.get("value"):
                raise PatchError(f"json-patch test failed at {path!r}")
            continue
        if kind in ("move", "copy"):
            value = json_copy(_read(doc, op["from"]))
            if kind == "move":
                doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
            doc = json_patch(doc, [{"op": "add", "path": path, "value": value}])
            continue
        parts = _pointer(path)
        if not parts:
            if kind in ("add", "replace"):
                doc = json_copy(op.get("value"))
                continue
            raise PatchError("json-patch cannot remove the whole document")
        parent, last = _parent(doc, parts, path)
        if kind == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(json_copy(op.get("value")))
                elif last.isdigit() and int(last) <= len(parent):
                    parent.insert(int(last), json_copy(op.get("value")))
                else:
                    raise PatchError(f"json-patch index {last!r} out of range at {path!r}")
            elif isinstance(parent, dict):
                parent[last] = json_copy(op.get("value"))
            else:
                raise PatchError(f"json-patch path {path!r} does not exist")
        elif kind in ("remove", "replace"):
            if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
                if kind == "remove":
                    del parent[int(last)]
                else:
                    parent[int(last)] = json_copy(op.get("value"))
            elif isinstance(parent, dict) and last in parent:
                if kind == "remove":
                    del parent[last]
                else:
                    parent[last] = json_copy(op.get("value"))
            else:
                raise PatchError(f"json-patch path {path!r} does not exist")
        else:
            raise PatchError(f"json-patch operation {kind!r} is not supported")
    return doc
