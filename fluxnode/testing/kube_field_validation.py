"""Server-side field validation (``?fieldValidation=Strict``), which kubectl asks for.

kubectl (1.27+) validates what it sends by asking the server to: it looks in the server's
OpenAPI v3 document for a ``fieldValidation`` query parameter on the kind's PATCH operation
(cli-runtime pkg/resource/query_param_verifier_v3.go, ``supportsQueryParamV3``) and, when it
is there, sends ``fieldValidation=Strict`` on every create, update and patch. A real server
then decodes strictly and rejects an unknown or duplicated field with 400 BadRequest,
``strict decoding error: unknown field "spec.bogus"`` (apiserver
pkg/endpoints/handlers/rest.go and apimachinery's strict JSON decoding). Here the unknown fields
are found with the official schemas kubernetes-validate ships (the ``-strict`` set, whose
objects forbid additional properties): only those errors count, because other schema
errors are the registry's validation (422, the store's own checks), not decoding.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
from kubernetes_validate import utils as kv_utils

# jsonschema: "Additional properties are not allowed ('a', 'b' were unexpected)"
UNKNOWN = re.compile(r"\(((?:'[^']+'(?:, )?)+) (?:was|were) unexpected\)")
QUOTED = re.compile(r"'([^']+)'")


class NoSchema(Exception):
    """kubernetes-validate has no schema for this kind (a CRD, a new kind)."""


@functools.lru_cache(maxsize=64)
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    version = kubernetes_validate.latest_version()
    newest = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= version][-1]
    schema_dir = f"v{newest}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv_utils.schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json", version
        )
    except FileNotFoundError:
        raise NoSchema(f"{kind} {api_version}") from None
    definitions = kv_utils.schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", version
    )
    registry = referencing.Resource.from_contents(definitions) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def unknown_field_paths(obj: dict) -> list[tuple]:
    """The fields of `obj` its kind's schema does not have, as paths (keys and list
    indexes), sorted."""
    validator = _validator(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    found: set[tuple] = set()
    for error in validator.iter_errors(obj):
        for sub in [error, *(error.context or [])]:
            if sub.validator != "additionalProperties":
                continue
            for names in UNKNOWN.findall(sub.message):
                for field in QUOTED.findall(names):
                    found.add((*sub.absolute_path, field))
    return sorted(found, key=lambda p: [str(x) for x in p])


def field_name(path: tuple) -> str:
    """A path as the API server names it: ``spec.template.spec.containers[0].bogus``."""
    return _path(path)


def drop_fields(obj: dict, paths: list[tuple]) -> None:
    """Remove the fields at `paths` (what a typed decoder silently drops)."""
    for path in paths:
        node: Any = obj
        for part in path[:-1]:
            node = node[part]
        node.pop(path[-1], None)


def unknown_fields(obj: dict) -> list[str]:
    """The unknown fields of `obj` as the API server names them, sorted."""
    return [field_name(p) for p in unknown_field_paths(obj)]
