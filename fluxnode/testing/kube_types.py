"""The API's vocabulary shared by the emulator's modules: the served resource types and the
``Status`` errors the API server answers with (apimachinery pkg/api/errors: NewNotFound,
NewConflict, NewInvalid, NewBadRequest), worded as the server words them.

Apart from the store (`kube_store`) so that what extends the store (CustomResourceDefinitions,
`kube_crd`; admission, `kube_admission`) can use them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class ResourceType:
    """One served resource (what discovery lists)."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    singular: str = ""  # discovery's singularName; the lower-case kind when empty

    @cached_property
    def ref(self) -> str:
        """The name hooks use: ``pods``, ``leases.coordination.k8s.io`` (worked out once:
        every write asks for it a dozen times)."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "namespaces", "Namespace", namespaced=False, subresources=("status",), short_names=("ns",)
    ),
    ResourceType("nodes", "Node", namespaced=False, subresources=("status",), short_names=("no",)),
    ResourceType(
        "pods", "Pod", subresources=("status", "binding", "eviction"), short_names=("po",)
    ),
    ResourceType("bindings", "Binding"),
    ResourceType("secrets", "Secret"),
    ResourceType("configmaps", "ConfigMap", short_names=("cm",)),
    ResourceType("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    ResourceType("services", "Service", subresources=("status",), short_names=("svc",)),
    ResourceType("events", "Event", short_names=("ev",)),
    ResourceType("events", "Event", group="events.k8s.io", short_names=("ev",)),
    ResourceType("leases", "Lease", group="coordination.k8s.io"),
    ResourceType("jobs", "Job", group="batch", subresources=("status",)),
    ResourceType(
        "daemonsets", "DaemonSet", group="apps", subresources=("status",), short_names=("ds",)
    ),
    ResourceType(
        "deployments", "Deployment", group="apps", subresources=("status",), short_names=("deploy",)
    ),
    ResourceType("poddisruptionbudgets", "PodDisruptionBudget", group="policy",
                 subresources=("status",), short_names=("pdb",)),
    ResourceType("priorityclasses", "PriorityClass", group="scheduling.k8s.io",
                 namespaced=False, short_names=("pc",)),
    ResourceType("roles", "Role", group="rbac.authorization.k8s.io"),
    ResourceType("rolebindings", "RoleBinding", group="rbac.authorization.k8s.io"),
    ResourceType("clusterroles", "ClusterRole", group="rbac.authorization.k8s.io",
                 namespaced=False),
    ResourceType("clusterrolebindings", "ClusterRoleBinding", group="rbac.authorization.k8s.io",
                 namespaced=False),
    ResourceType("customresourcedefinitions", "CustomResourceDefinition",
                 group="apiextensions.k8s.io", namespaced=False, subresources=("status",),
                 short_names=("crd", "crds"), categories=("api-extensions",)),
    ResourceType("mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                 group="admissionregistration.k8s.io", namespaced=False,
                 categories=("api-extensions",)),
    ResourceType("validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                 group="admissionregistration.k8s.io", namespaced=False,
                 categories=("api-extensions",)),
)
BY_REF: dict[str, ResourceType] = {r.ref: r for r in RESOURCES}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Resources whose DELETE returns the object (the registry's ReturnDeletedObject); others a Status.
RETURNS_DELETED_OBJECT = {"pods"}



class ApiError(Exception):
    """A failure the API server reports as a ``Status`` object with an HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{rt.ref} "{name}" not found',
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.ref} "{name}": {why}',
                    {"name": name, "group": rt.group, "kind": rt.plural})


_CAUSE_REASONS = {"Required value": "FieldValueRequired", "Invalid value": "FieldValueInvalid",
                  "Forbidden": "FieldValueForbidden", "Duplicate value": "FieldValueDuplicate",
                  "Unsupported value": "FieldValueNotSupported"}


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 like ``apierrors.NewInvalid``: ``Kind.group "name" is invalid: field: message``,
    several errors in brackets, each a cause with its ``field.ErrorType`` reason."""
    texts = [f"{f}: {m}" for f, m in causes]
    text = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [
                {
                    "reason": _CAUSE_REASONS.get(m.split(":", 1)[0], "FieldValueInvalid"),
                    "field": f,
                    "message": m,
                }
                for f, m in causes
            ],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)
