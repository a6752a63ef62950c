"""Which nodes a pod may run on: nodeSelector, required node affinity, taints.

The graph scheduler knows cores, GPUs and memory; Kubernetes also lets a pod say
*where* it may run (``spec.nodeSelector``, ``spec.affinity.nodeAffinity.
requiredDuringSchedulingIgnoredDuringExecution``) and lets a node refuse pods
(``spec.taints`` with effect NoSchedule or NoExecute, unless tolerated). These are
hard constraints: kube-scheduler's NodeAffinity and TaintToleration filters drop
such nodes before scoring, and so must we, or a pod would land on the tainted
control-plane node of a kind cluster or on a node without the GPU model it asked
for. Preferred affinity and PreferNoSchedule taints are preferences; the graph
scheduler's policy decides among the nodes that pass.

The rules follow the Kubernetes API reference: nodeSelectorTerms are ORed, the
matchExpressions and matchFields of one term are ANDed, an empty term matches
nothing; ``NotIn`` and ``DoesNotExist`` hold for a node without the label;
``Gt``/``Lt`` compare integers. A toleration with an empty key and ``Exists``
tolerates every taint; an empty effect matches every effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

HARD_EFFECTS = ("NoSchedule", "NoExecute")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
MISMATCH = "node(s) didn't match Pod's node affinity/selector"


class NodeAffinityError(ValueError):
    """A pod's selector, affinity or tolerations are malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """What a node offers to placement rules: its name, labels and hard taints."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    @classmethod
    def from_node(cls, obj: dict) -> NodeTraits:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        taints = tuple(
            Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
            for t in spec.get("taints") or []
            if isinstance(t, dict) and t.get("effect") in HARD_EFFECTS
        )
        return cls(str(meta.get("name") or ""), dict(meta.get("labels") or {}), taints)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, value: str | None) -> bool:
        op = self.operator
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class Term:
    """One nodeSelectorTerm: every label expression and every field expression must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node: NodeTraits) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(node.labels.get(r.key)) for r in self.expressions) and all(
            r.matches(node.name if r.key == "metadata.name" else None) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """A pod's hard placement rules, parsed once."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()

    @property
    def restricts(self) -> bool:
        """Whether the pod limits where it runs (taints can still limit it)."""
        return bool(self.selector) or self.terms is not None

    def reason_against(self, node: NodeTraits) -> str | None:
        """Why the pod may not run on ``node`` (kube-scheduler's words), or None if it may."""
        if any(node.labels.get(k) != v for k, v in self.selector):
            return MISMATCH
        if self.terms is not None and not any(t.matches(node) for t in self.terms):
            return MISMATCH
        for taint in node.taints:
            if not any(t.tolerates(taint) for t in self.tolerations):
                return f"node(s) had untolerated taint {taint}"
        return None


def pod_placement(pod: dict) -> PodPlacement:
    """Parse a pod's nodeSelector, required node affinity and tolerations."""
    meta = pod.get("metadata") or {}
    where = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise NodeAffinityError(f"{where}: spec.nodeSelector must be a map of label to value")
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = None
    if required is not None:
        path = f"{where}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        raw_terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        if not isinstance(raw_terms, list):
            raise NodeAffinityError(f"{path}.nodeSelectorTerms: required list")
        terms = tuple(_term(t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(raw_terms))
    tolerations = tuple(
        _toleration(t, f"{where}: spec.tolerations[{i}]")
        for i, t in enumerate(spec.get("tolerations") or [])
    )
    return PodPlacement(
        tuple(sorted((str(k), str(v)) for k, v in selector.items())), terms, tolerations
    )


def _term(raw: object, path: str) -> Term:
    if not isinstance(raw, dict):
        raise NodeAffinityError(f"{path}: must be an object")
    exprs = tuple(
        requirement(r, f"{path}.matchExpressions[{i}]")
        for i, r in enumerate(raw.get("matchExpressions") or [])
    )
    fields = tuple(
        requirement(r, f"{path}.matchFields[{i}]")
        for i, r in enumerate(raw.get("matchFields") or [])
    )
    for i, r in enumerate(fields):
        if r.key != "metadata.name" or r.operator not in ("In", "NotIn"):
            raise NodeAffinityError(
                f"{path}.matchFields[{i}]: only metadata.name with In or NotIn is supported"
            )
    return Term(exprs, fields)


def requirement(raw: object, path: str, operators: tuple[str, ...] = OPERATORS) -> Requirement:
    """One ``matchExpressions`` entry at `path`: a node selector requirement (`OPERATORS`),
    or with `operators` narrowed to In, NotIn, Exists and DoesNotExist a label selector
    requirement (pod_affinity.py). NodeAffinityError names the field."""
    if not isinstance(raw, dict) or not raw.get("key"):
        raise NodeAffinityError(f"{path}.key: required")
    op = raw.get("operator")
    if op not in operators:
        raise NodeAffinityError(f"{path}.operator: {op!r} is not one of {', '.join(operators)}")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise NodeAffinityError(f"{path}.values: must be a list")
    values = tuple(str(v) for v in values)
    if op in ("In", "NotIn") and not values:
        raise NodeAffinityError(f"{path}.values: must be non-empty for {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise NodeAffinityError(f"{path}.values: must be empty for {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise NodeAffinityError(f"{path}.values: {op} takes exactly one integer")
        try:
            int(values[0])
        except ValueError:
            raise NodeAffinityError(f"{path}.values: {values[0]!r} is not an integer") from None
    return Requirement(str(raw["key"]), op, values)


def _toleration(raw: object, path: str) -> Toleration:
    if not isinstance(raw, dict):
        raise NodeAffinityError(f"{path}: must be an object")
    op = raw.get("operator") or "Equal"
    if op not in ("Equal", "Exists"):
        raise NodeAffinityError(f"{path}.operator: {op!r} is not Equal or Exists")
    key = str(raw.get("key") or "")
    if not key and op != "Exists":
        raise NodeAffinityError(f"{path}.key: an empty key needs operator Exists")
    return Toleration(key, op, str(raw.get("value") or ""), str(raw.get("effect") or ""))


def eligible_nodes(
    placements: Iterable[PodPlacement], nodes: Iterable[NodeTraits]
) -> tuple[list[str], dict[str, int]]:
    """Nodes every one of ``placements`` may run on, and how many nodes each reason excluded."""
    distinct = set(placements)  # a group's pods mostly share one template
    ok: list[str] = []
    excluded: dict[str, int] = {}
    for node in nodes:
        reason = next((r for p in distinct if (r := p.reason_against(node))), None)
        if reason is None:
            ok.append(node.name)
        else:
            excluded[reason] = excluded.get(reason, 0) + 1
    return ok, excluded


def explain(excluded: Mapping[str, int], total: int) -> str:
    """kube-scheduler's summary: ``0/3 nodes are available: 2 node(s) had untolerated taint {a},
    ...``."""
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(excluded.items()))
    return f"0/{total} nodes are available: {parts}"
