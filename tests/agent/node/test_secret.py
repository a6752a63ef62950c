"""The CURVE Secret: created once per cluster, even when agents race; clear errors."""

from __future__ import annotations

import threading

import pytest
from fluxnode.agent.kube.api_client import KubeAccessError
from fluxnode.agent.node.secret import SecretError, ensure_curve_secret
from kubernetes import client


def test_created_once_under_a_race(kube):
    n = 8
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def agent(i: int) -> None:
        api_client = kube.api_client()
        try:
            barrier.wait(10)
            results[i] = ensure_curve_secret(
                client.CoreV1Api(api_client), "fluxnode", "fluxnode-curve"
            )
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            api_client.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len({r.public_key for r in results}) == 1
    assert results[0].secret_key
    assert [s["metadata"]["name"] for s in kube.list("secrets", "fluxnode")] == ["fluxnode-curve"]
    # every agent that found it missing tried to create; the server accepted exactly one
    assert kube.count_requests("create", "secrets") >= 1
    assert kube.get("secrets", "fluxnode-curve", "fluxnode")["metadata"]["resourceVersion"]


def test_existing_secret_is_reused(kube, core):
    first = ensure_curve_secret(core, "fluxnode", "fluxnode-curve")
    again = ensure_curve_secret(core, "fluxnode", "fluxnode-curve")
    assert first.public_key == again.public_key and first.secret_key == again.secret_key
    assert kube.count_requests("create", "secrets") == 1


def test_forbidden_read_is_a_clear_error(kube, core):
    kube.forbid("get", "secrets")
    with pytest.raises(
        KubeAccessError,
        match=r"cannot read Secret fluxnode/fluxnode-curve: permission denied \(403\)",
    ):
        ensure_curve_secret(core, "fluxnode", "fluxnode-curve")


def test_forbidden_create_is_a_clear_error(kube, core):
    kube.forbid("create", "secrets")
    with pytest.raises(
        KubeAccessError, match=r"cannot create Secret fluxnode/fluxnode-curve: permission denied"
    ):
        ensure_curve_secret(core, "fluxnode", "fluxnode-curve")


def test_secret_without_a_certificate_is_rejected(kube, core):
    kube.create(
        "secrets",
        {"metadata": {"name": "fluxnode-curve"}, "stringData": {"other": "x"}},
        "fluxnode",
    )
    with pytest.raises(SecretError, match="has no 'curve.cert' key"):
        ensure_curve_secret(core, "fluxnode", "fluxnode-curve")
    kube.update("secrets", {"metadata": {"name": "fluxnode-curve", "namespace": "fluxnode"},
                            "stringData": {"curve.cert": "garbage"}})
    with pytest.raises(SecretError, match=r"fluxnode-curve\[curve.cert\]"):
        ensure_curve_secret(core, "fluxnode", "fluxnode-curve")
