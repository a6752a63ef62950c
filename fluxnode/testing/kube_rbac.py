"""RBAC for the emulator: authorize requests with the Roles/ClusterRoles of manifests.

Lets a test run a component with exactly the permissions its manifests grant, so a
missing rule fails the test (403) and an unused rule can be spotted. Semantics follow
the RBAC authorizer: rules are additive; a ClusterRoleBinding grants everywhere, a
RoleBinding only in its namespace; ``resourceNames`` never authorizes create or
deletecollection, and authorizes list/watch only when ``fieldSelector`` pins
``metadata.name``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from fluxnode.testing.kube_emulator import RequestInfo
from fluxnode.testing.kube_selectors import FieldSelector


@dataclass(frozen=True)
class Grant:
    rule: dict
    namespace: str | None  # None: cluster-wide (ClusterRoleBinding)


def _matches(rule: dict, info: RequestInfo) -> bool:
    groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
    verbs, names = rule.get("verbs") or [], rule.get("resourceNames") or []
    if not ("*" in groups or info.group in groups):
        return False
    if not ("*" in verbs or info.verb in verbs):
        return False
    res = info.resource_path
    if not ("*" in resources or res in resources or (info.subresource and f"*/{info.subresource}" in resources)):
        return False
    if not names:
        return True
    if info.verb in ("create", "deletecollection"):
        return False
    if info.verb in ("list", "watch"):
        pinned = FieldSelector.parse(info.query.get("fieldSelector"), info.resource).names()
        return pinned is not None and len(pinned) == 1 and pinned <= set(names)
    return info.name in names


class RbacAuthorizer:
    """``emulator.authorizer = RbacAuthorizer.from_manifests(paths, "ns", "serviceaccount")``."""

    def __init__(self, grants: Iterable[Grant]):
        self.grants = list(grants)

    @classmethod
    def from_manifests(cls, paths: Iterable[Path], namespace: str, service_account: str) -> RbacAuthorizer:
        docs = [d for p in paths for d in yaml.safe_load_all(Path(p).read_text()) if d]
        roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules") or []
                 for d in docs if d["kind"] in ("Role", "ClusterRole")}
        grants = []
        for d in docs:
            if d["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if not any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                       and s.get("namespace", d["metadata"].get("namespace")) == namespace for s in d.get("subjects") or []):
                continue
            ref = d["roleRef"]
            scope = None if d["kind"] == "ClusterRoleBinding" else d["metadata"]["namespace"]
            key = (ref["kind"], None if ref["kind"] == "ClusterRole" else scope, ref["name"])
            for rule in roles.get(key, []):
                grants.append(Grant(rule, scope))
        return cls(grants)

    def __call__(self, info: RequestInfo) -> str | None:
        for g in self.grants:
            if g.namespace is not None and g.namespace != info.namespace:
                continue
            if _matches(g.rule, info):
                return None
        return "no RBAC rule allows it"
