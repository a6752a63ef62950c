"""Kubernetes label and field selectors, parsed the way the API server parses them.

The emulator needs the server's exact semantics (``in``/``notin``/exists, ``!=``
matching objects that lack the label, unsupported field labels rejected with 400),
because informers and the binder rely on them to see the right subset.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector string the API server would reject (HTTP 400)."""


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*")
_CMP_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})\s*")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!)?\s*(?P<key>{_KEY})\s*")


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects that lack the key, as in the API server.
        return not present or value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector`` query parameter (all requirements must hold)."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        rest = text
        reqs: list[Requirement] = []
        while rest.strip():
            m = _SET_RE.match(rest)
            if m:
                values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
                if not values:
                    raise SelectorError(
                        f"unable to parse requirement: {text!r}: {m['op']} needs at least one value"
                    )
                reqs.append(Requirement(m["key"], m["op"], values))
            else:
                m = _CMP_RE.match(rest)
                if m:
                    op = "=" if m["op"] in ("=", "==") else "!="
                    reqs.append(Requirement(m["key"], op, (m["value"] or "",)))
                else:
                    m = _EXISTS_RE.match(rest)
                    if not m:
                        raise SelectorError(f"unable to parse requirement: {text!r}")
                    reqs.append(Requirement(m["key"], "!exists" if m["neg"] else "exists"))
            rest = rest[m.end():]
            if rest.strip():
                if not rest.lstrip().startswith(","):
                    raise SelectorError(
                        f"unable to parse requirement: {text!r}: expected ',' at {rest!r}"
                    )
                rest = rest.lstrip()[1:]
                if not rest.strip():
                    raise SelectorError(f"unable to parse requirement: {text!r}: trailing ','")
        return cls(tuple(reqs))

    @classmethod
    def from_object(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """A metav1.LabelSelector object (matchLabels, matchExpressions), as
        LabelSelectorAsSelector reads it: nil or empty selects everything; an unknown
        operator is a SelectorError."""
        reqs = [Requirement(k, "=", (v,)) for k, v in
                sorted(((selector or {}).get("matchLabels") or {}).items())]
        ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
        for expr in (selector or {}).get("matchExpressions") or []:
            op = ops.get(expr.get("operator"))
            if op is None:
                raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector "
                                    "operator")
            reqs.append(Requirement(expr.get("key", ""), op, tuple(expr.get("values") or ())))
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def _get_path(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


# Field labels each resource supports (besides metadata.name / metadata.namespace),
# as registered by the API server's field label conversion functions.
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.schedulerName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "nodes": ("spec.unschedulable",),
    "secrets": ("type",),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "events.events.k8s.io": (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "type",
        "reportingController",
    ),
    "namespaces": ("status.phase",),
    "jobs.batch": ("status.successful",),
}


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: ``path=value``, ``path==value``, ``path!=value`` clauses."""

    clauses: tuple[tuple[str, bool, str], ...] = ()  # (path, equal, value)

    @classmethod
    def parse(cls, text: str | None, resource: str) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        allowed = {"metadata.name", "metadata.namespace", *FIELD_LABELS.get(resource, ())}
        clauses = []
        for part in text.split(","):
            m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
            if not m:
                raise SelectorError(f"invalid selector: {text!r}; can't understand {part!r}")
            path, op, value = m.groups()
            if path not in allowed:
                raise SelectorError(f'field label not supported: {path}')
            clauses.append((path, op != "!=", value))
        return cls(tuple(clauses))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((_get_path(obj, path) == value) == equal for path, equal, value in self.clauses)

    def names(self) -> set[str] | None:
        """The names this selector pins down (``metadata.name=X``), for RBAC resourceNames
        checks."""
        names = {v for p, eq, v in self.clauses if p == "metadata.name" and eq}
        return names or None


def selector_predicate(
    label: str | None, field: str | None, resource: str
) -> Callable[[Mapping[str, Any]], bool]:
    """Both selectors as one predicate over an object (raises SelectorError on bad input)."""
    ls = LabelSelector.parse(label)
    fs = FieldSelector.parse(field, resource)
    return lambda obj: ls.matches((obj.get("metadata") or {}).get("labels")) and fs.matches(obj)
