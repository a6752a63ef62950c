"""CustomResourceDefinitions (apiextensions.k8s.io/v1): what a CRD makes the emulator serve.

A created CRD becomes a `CustomResource`: the resource type the store and discovery serve
(group, version, plural, scope, short names, categories, the ``status`` subresource), the
version's schema (`kube_crd_schema`: pruning, defaulting, validation) and its printer columns
(`kube_tables.custom_table`). The rules follow apiextensions-apiserver:

- the CRD itself is checked as pkg/apis/apiextensions/validation/validation.go checks it
  (``metadata.name`` is ``<plural>.<group>``, the scope, exactly one storage version, a schema
  for every version), answering 422 worded as the server;
- ``spec.names`` are defaulted as pkg/apis/apiextensions/v1/defaults.go does (``singular`` the
  lower-case kind, ``listKind`` the kind plus ``List``), and the CRD gets the ``NamesAccepted``
  and ``Established`` conditions and ``status.acceptedNames`` the controllers
  (pkg/controller/establish, pkg/controller/status) would give it;
- a version without ``additionalPrinterColumns`` prints NAME and AGE
  (pkg/apiserver/customresource_handler.go, ``serveDefaultColumnsIfEmpty``).

What the emulator does not serve is refused when the CRD is created, as `CrdNotEmulated`
(a 501 naming it): more than one served version (that needs conversion), the ``scale``
subresource, a schema keyword `kube_crd_schema` does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluxnode.testing.kube_crd_schema import SchemaNotEmulated, check_supported
from fluxnode.testing.kube_types import BY_REF, ApiError, ResourceType, invalid

CRD_REF = "customresourcedefinitions.apiextensions.k8s.io"
DEFAULT_COLUMNS = ({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},)
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")


class CrdNotEmulated(Exception):
    """A CRD asks for something the emulator does not serve (answered 501)."""


@dataclass(frozen=True)
class CustomResource:
    """What one CRD serves."""

    type: ResourceType
    schema: dict
    columns: tuple[dict, ...]
    crd_name: str


def _crd_type() -> ResourceType:
    return BY_REF[CRD_REF]


def define(crd: dict) -> CustomResource:
    """The CustomResource a CRD object defines (defaulting its names in place), or the 422
    the API server answers for an invalid CRD, or CrdNotEmulated."""
    meta, spec = crd.get("metadata") or {}, crd.get("spec") or {}
    name = meta.get("name", "")
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    group = spec.get("group") or ""
    plural, kind = names.get("plural") or "", names.get("kind") or ""
    causes: list[tuple[str, str]] = []
    if not group:
        causes.append(("spec.group", "Required value"))
    elif "." not in group:
        causes.append(("spec.group", f'Invalid value: "{group}": should be a domain with at '
                                     "least one dot"))
    if not plural:
        causes.append(("spec.names.plural", "Required value"))
    if not kind:
        causes.append(("spec.names.kind", "Required value"))
    if group and plural and name != f"{plural}.{group}":
        causes.append(("metadata.name", f'Invalid value: "{name}": must be '
                                        'spec.names.plural+"."+spec.group'))
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(("spec.scope", f"Unsupported value: \"{scope or ''}\": supported values: "
                                     '"Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(("spec.versions", "Invalid value: null: must have exactly one version "
                                        "marked as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        # the server prints the whole list of versions as Go values here; their names stand in
        names_list = "[" + " ".join(str(v.get("name")) for v in versions) + "]"
        causes.append(("spec.versions", f"Invalid value: {names_list}: must have exactly one "
                                        "version "
                                        "marked as storage version"))
    for i, version in enumerate(versions):
        if not ((version.get("schema") or {}).get("openAPIV3Schema")):
            causes.append((f"spec.versions[{i}].schema.openAPIV3Schema",
                           "Required value: schemas are required"))
        for j, column in enumerate(version.get("additionalPrinterColumns") or []):
            where = f"spec.versions[{i}].additionalPrinterColumns[{j}]"
            if not column.get("name"):
                causes.append((f"{where}.name", "Required value"))
            if column.get("type") not in COLUMN_TYPES:
                supported = ", ".join(f'"{t}"' for t in sorted(COLUMN_TYPES))
                causes.append((f"{where}.type", f"Unsupported value: \"{column.get('type', '')}\""
                                                f": supported values: {supported}"))
            if not str(column.get("jsonPath", "")).startswith("."):
                causes.append((f"{where}.jsonPath", "Invalid value: "
                               f"\"{column.get('jsonPath', '')}\": must be a simple json path "
                               "starting with ."))
    if causes:
        raise invalid(_crd_type(), name, causes)
    served = [v for v in versions if v.get("served")]
    if len(served) != 1 or not served[0].get("storage"):
        raise CrdNotEmulated(f"CRD {name}: only one served version, the storage version, is "
                             "emulated (more need conversion)")
    version = served[0]
    subresources = version.get("subresources") or {}
    others = sorted(set(subresources) - {"status"})
    if others:
        raise CrdNotEmulated(f"CRD {name}: the subresources {others}")
    schema = version["schema"]["openAPIV3Schema"]
    try:
        check_supported(schema)
    except SchemaNotEmulated as exc:
        raise CrdNotEmulated(f"CRD {name}: {exc}") from None
    names.setdefault("singular", kind.lower())
    names.setdefault("listKind", f"{kind}List")
    rt = ResourceType(plural, kind, group=group, version=version["name"],
                      namespaced=scope == "Namespaced",
                      subresources=("status",) if "status" in subresources else (),
                      short_names=tuple(names.get("shortNames") or ()),
                      categories=tuple(names.get("categories") or ()),
                      singular=names["singular"])
    columns = tuple(version.get("additionalPrinterColumns") or ()) or DEFAULT_COLUMNS
    return CustomResource(rt, schema, columns, name)


def established_status(crd: dict) -> dict:
    """The status the CRD controllers write once its names are accepted and it is served."""
    names = (crd.get("spec") or {}).get("names") or {}
    conditions: list[dict[str, Any]] = []
    for type_, reason, message in (
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ):
        conditions.append({"type": type_, "status": "True", "reason": reason,
                           "message": message,
                           "lastTransitionTime": (crd.get("metadata") or {}).get(
                               "creationTimestamp")})
    versions = [v["name"] for v in (crd.get("spec") or {}).get("versions") or []
                if v.get("storage")]
    return {"acceptedNames": dict(names), "conditions": conditions, "storedVersions": versions}


def name_taken(ref: str) -> ApiError:
    return ApiError(409, "Conflict", f"the resource {ref} is already served by this API server "
                    "(a built-in type or another CustomResourceDefinition)")
