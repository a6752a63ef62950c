"""Placement rules a pod carries (nodeSelector, required node affinity, tolerations) against
nodes."""

from __future__ import annotations

import pytest
from fluxnode.agent.kube.node_affinity import (
    MISMATCH,
    NodeAffinityError,
    NodeTraits,
    eligible_nodes,
    explain,
    pod_placement,
)

CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def node(name: str, labels: dict | None = None, taints: list | None = None) -> NodeTraits:
    return NodeTraits.from_node({"metadata": {"name": name, "labels": labels or {}},
                                 "spec": {"taints": taints or []}})


def pod(spec: dict) -> dict:
    return {"metadata": {"namespace": "default", "name": "p"}, "spec": spec}


def required(*terms: dict) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict:
    e = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


GPU_A100 = node("a", {"gpu": "a100", "zone": "z1", "cores": "64"})
GPU_H100 = node("b", {"gpu": "h100", "zone": "z2", "cores": "128"})
PLAIN = node("c", {"zone": "z1"})


def test_node_selector_needs_every_label():
    p = pod_placement(pod({"nodeSelector": {"gpu": "a100", "zone": "z1"}}))
    assert p.reason_against(GPU_A100) is None
    assert p.reason_against(GPU_H100) == MISMATCH
    assert p.reason_against(PLAIN) == MISMATCH


@pytest.mark.parametrize(("expression", "passing"), [
    (expr("gpu", "In", "a100", "h100"), {"a", "b"}),
    (expr("gpu", "NotIn", "a100"), {"b", "c"}),      # a node without the label is "not in"
    (expr("gpu", "Exists"), {"a", "b"}),
    (expr("gpu", "DoesNotExist"), {"c"}),
    (expr("cores", "Gt", "100"), {"b"}),
    (expr("cores", "Lt", "100"), {"a"}),
])
def test_required_affinity_operators(expression, passing):
    p = pod_placement(pod(required({"matchExpressions": [expression]})))
    assert {n.name for n in (GPU_A100, GPU_H100, PLAIN) if p.reason_against(n) is None} == passing


def test_terms_are_ored_expressions_anded_empty_term_matches_nothing():
    p = pod_placement(pod(required(
        {"matchExpressions": [expr("gpu", "Exists"), expr("zone", "In", "z2")]},
        {"matchFields": [expr("metadata.name", "In", "c")]})))
    assert [n.name for n in (GPU_A100, GPU_H100, PLAIN) if p.reason_against(n) is None] == [
        "b",
        "c",
    ]
    nothing = pod_placement(pod(required({})))
    assert all(nothing.reason_against(n) == MISMATCH for n in (GPU_A100, GPU_H100, PLAIN))


def test_hard_taints_need_a_toleration():
    cp = node("cp", taints=[CONTROL_PLANE_TAINT, {"key": "soft", "effect": "PreferNoSchedule"}])
    assert pod_placement(pod({})).reason_against(cp) == \
        "node(s) had untolerated taint {node-role.kubernetes.io/control-plane}"
    for tol in (
        {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        },
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        {"operator": "Exists"},
    ):
        assert pod_placement(pod({"tolerations": [tol]})).reason_against(cp) is None, tol
    wrong_effect = {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Exists",
        "effect": "NoExecute",
    }
    assert pod_placement(pod({"tolerations": [wrong_effect]})).reason_against(cp) is not None
    gpu = node("g", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}])
    assert (
        pod_placement(
            pod({"tolerations": [{"key": "nvidia.com/gpu", "value": "present"}]})
        ).reason_against(gpu)
        is None
    )
    assert (
        pod_placement(
            pod({"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]})
        ).reason_against(gpu)
        == "node(s) had untolerated taint {nvidia.com/gpu: present}"
    )


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"nodeSelector": ["gpu"]}, "spec.nodeSelector"),
        (
            required({"matchExpressions": [{"key": "gpu", "operator": "Near", "values": ["x"]}]}),
            "nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (required({"matchExpressions": [expr("gpu", "In")]}), "matchExpressions[0].values"),
        (
            required({"matchExpressions": [expr("cores", "Gt", "many")]}),
            "matchExpressions[0].values",
        ),
        (required({"matchFields": [expr("metadata.uid", "In", "x")]}), "matchFields[0]"),
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
            "nodeSelectorTerms",
        ),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].key"),
    ],
)
def test_malformed_rules_name_the_field(spec, named):
    with pytest.raises(NodeAffinityError) as exc:
        pod_placement(pod(spec))
    assert named in str(exc.value) and "default/p" in str(exc.value)


def test_eligible_nodes_for_a_group_and_the_reason_summary():
    cp = node("cp", {"zone": "z1"}, [CONTROL_PLANE_TAINT])
    placements = [pod_placement(pod({"nodeSelector": {"zone": "z1"}}))] * 8
    ok, excluded = eligible_nodes(placements, [GPU_A100, GPU_H100, PLAIN, cp])
    assert ok == ["a", "c"]
    assert excluded == {
        MISMATCH: 1,
        "node(s) had untolerated taint {node-role.kubernetes.io/control-plane}": 1,
    }
    assert explain(excluded, 4) == ("0/4 nodes are available: 1 node(s) didn't match Pod's node "
                                    "affinity/selector, 1 node(s) had untolerated taint "
                                    "{node-role.kubernetes.io/control-plane}")
