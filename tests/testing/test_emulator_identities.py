"""A second identity in the API emulator: a component's service account authorized by the
RBAC of its manifests, beside the test's own unrestricted identity (same emulator)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from support.paths import REPO

from fluxnode.testing.kube_rbac import RbacAuthorizer

USER = "system:serviceaccount:fluxnode:fluxnode-binder"


def test_a_service_account_gets_only_what_its_manifest_grants(kube, core):
    kube.add_node("n1")
    core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    )
    path = kube.add_identity(
        USER,
        RbacAuthorizer.from_manifests(
            [REPO / "daemonset" / "binder.yaml"], "fluxnode", "fluxnode-binder"
        ),
    )
    binder = client.CoreV1Api(kube.api_client(path))
    assert [p.metadata.name for p in binder.list_pod_for_all_namespaces().items] == ["p"]
    with pytest.raises(client.ApiException) as exc:
        binder.delete_namespaced_pod("p", "default")  # the binder never deletes pods
    message = json.loads(exc.value.body)["message"]
    assert exc.value.status == 403 and f'User "{USER}" cannot delete' in message
    with pytest.raises(client.ApiException) as exc:  # the Role is in fluxnode only
        binder.read_namespaced_config_map("fluxnode-ranks", "default")
    assert exc.value.status == 403
    core.delete_namespaced_pod("p", "default")  # the test's own identity is not restricted
