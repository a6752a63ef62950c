"""A CustomResourceDefinition version's openAPIV3Schema, applied as apiextensions-apiserver does.

Three steps, in the real server's order for every write of a custom resource:

1. **pruning** (apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go): a field the
   structural schema does not name is dropped, unless the object it is in says
   ``x-kubernetes-preserve-unknown-fields: true``; ``apiVersion``, ``kind`` and ``metadata`` at
   the root are never pruned here. What was dropped is what ``fieldValidation=Strict`` refuses
   (``strict decoding error: unknown field "spec.x"``, apiserver
   pkg/endpoints/handlers/rest.go) and ``Warn`` reports;
2. **defaulting** (pkg/apiserver/schema/defaulting/algorithm.go): an absent property with a
   ``default`` gets it;
3. **validation** (pkg/apiserver/validation/validation.go over kube-openapi's validator):
   ``type``, ``required``, ``enum``, ``minimum``/``maximum``, ``minLength``/``maxLength``
   (in characters, as Go counts runes), ``nullable``,
   ``x-kubernetes-int-or-string``, errors worded as the server words them
   (``spec.queue: Required value``, ``spec.phase: Unsupported value: "x": supported values:
   "a", "b"``, ``spec.count: Invalid value: "string": spec.count in body must be of type
   integer: "string"``).

A schema with a keyword this module does not apply is refused when the CRD is created
(`SchemaNotEmulated`, a 501 naming the keyword): a keyword accepted and then ignored would be
a silent difference from a real server.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from fluxnode.testing.kube_copy import json_copy

# Keywords applied below, and those that only describe (no effect on a write).
APPLIED = {"type", "properties", "required", "enum", "items", "additionalProperties",
           "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "nullable",
           "default", "minimum", "maximum", "format", "minLength", "maxLength"}
DESCRIPTIVE = {"description", "title", "example", "x-kubernetes-list-type",
               "x-kubernetes-list-map-keys", "x-kubernetes-map-type"}
# Formats: date-time is checked (strfmt's RFC 3339); the others are accepted as kube-openapi's
# format registry accepts any value of the right type for them in a CRD (the API server
# validates only the formats it registers, and int32/int64/float/double never fail on JSON).
FORMATS = {"date-time", "int32", "int64", "float", "double", ""}


class SchemaNotEmulated(Exception):
    """A schema keyword (or format) the emulator does not apply."""


def check_supported(schema: Any, path: str = "openAPIV3Schema") -> None:
    """Raise SchemaNotEmulated for the first keyword of `schema` that is not applied here."""
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key not in APPLIED and key not in DESCRIPTIVE:
            raise SchemaNotEmulated(f"the schema keyword {key!r} (at {path})")
        if key == "format" and value not in FORMATS:
            raise SchemaNotEmulated(f"the format {value!r} (at {path})")
    for name, sub in (schema.get("properties") or {}).items():
        check_supported(sub, f"{path}.properties.{name}")
    if isinstance(schema.get("items"), dict):
        check_supported(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        check_supported(schema["additionalProperties"], f"{path}.additionalProperties")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


# -- pruning ---------------------------------------------------------------------------------
def prune(obj: dict, schema: dict) -> list[str]:
    """Drop the fields `schema` does not name (in place); returns their paths, sorted as the
    server lists them."""
    dropped: list[str] = []
    root = {**schema, "properties": {**(schema.get("properties") or {}),
                                     "apiVersion": {}, "kind": {}, "metadata": {}}}
    _prune(obj, root, "", dropped, root=True)
    return sorted(dropped)


def _prune(value: Any, schema: dict, path: str, dropped: list[str], *, root: bool = False) -> None:
    if isinstance(value, dict):
        if root is False and path == "metadata":
            return
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):  # a map: every value has that schema
            for key, sub in value.items():
                _prune(sub, additional, _join(path, key), dropped)
            return
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        for key in list(value):
            sub_schema = (props or {}).get(key)
            if sub_schema is None:
                if not preserve and additional is not True:
                    dropped.append(_join(path, key))
                    del value[key]
                continue
            if not (root and key in ("apiVersion", "kind", "metadata")):
                _prune(value[key], sub_schema, _join(path, key), dropped)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune(item, schema["items"], _join(path, i), dropped)


# -- defaulting ------------------------------------------------------------------------------
def apply_defaults(value: Any, schema: dict) -> None:
    """Set each absent property that has a ``default`` (in place), depth first."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = json_copy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        if isinstance(schema.get("additionalProperties"), dict):
            for sub_value in value.values():
                apply_defaults(sub_value, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


# -- validation ------------------------------------------------------------------------------
def _go(value: Any) -> str:
    """A value as Go's %v/%q print it in field errors: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_matches(want: str, value: Any) -> bool:
    got = _type_of(value)
    return got == want or (want == "number" and got == "integer")


def validate(obj: dict, schema: dict) -> list[tuple[str, str]]:
    """The schema's errors for `obj` as (field, message) pairs, as the server reports them."""
    errors: list[tuple[str, str]] = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    root = {**schema, "properties": {k: v for k, v in (schema.get("properties") or {}).items()
                                     if k not in ("apiVersion", "kind", "metadata")},
            "required": [r for r in schema.get("required") or []
                         if r not in ("apiVersion", "kind", "metadata")]}
    _validate(body, root, "", errors)
    return errors


def _validate(value: Any, schema: dict, path: str, errors: list[tuple[str, str]]) -> None:
    where = path or "<root>"
    if value is None:
        if schema.get("nullable") or not schema.get("type"):
            return
        errors.append((where, f"Invalid value: \"null\": {where} in body must be of type "
                              f"{schema['type']}: \"null\""))
        return
    want = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if _type_of(value) not in ("integer", "string"):
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body must be of "
                                  f"type integer,string: {json.dumps(_type_of(value))}"))
            return
    elif want and not _type_matches(want, value):
        errors.append((where, f"Invalid value: {json.dumps(_type_of(value))}: {where} in body "
                              f"must be of type {want}: {json.dumps(_type_of(value))}"))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_go(v) for v in schema["enum"])
        errors.append((where, f"Unsupported value: {_go(value)}: supported values: {supported}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body should be "
                                  f"greater than or equal to {_go(schema['minimum'])}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body should be "
                                  f"less than or equal to {_go(schema['maximum'])}"))
    if isinstance(value, str):  # kube-openapi's TooShort / TooLong
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body should be at "
                                  f"least {schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body should be at "
                                  f"most {schema['maxLength']} chars long"))
    if isinstance(value, str) and schema.get("format") == "date-time":
        try:
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            errors.append((where, f"Invalid value: {_go(value)}: {where} in body must be of "
                                  f"type date-time: {_go(value)}"))
    if isinstance(value, dict):
        for name in schema.get("required") or []:
            if name not in value:
                errors.append((_join(path, name), "Required value"))
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                _validate(sub, props[key], _join(path, key), errors)
            elif isinstance(additional, dict):
                _validate(sub, additional, _join(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _validate(item, schema["items"], _join(path, i), errors)
