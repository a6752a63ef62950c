"""Fixtures shared by every area: a Kubernetes API emulator per test, reached by the real client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluxnode.testing.kube_emulator import KubeEmulator


@pytest.fixture
def kube(tmp_path) -> Iterator[KubeEmulator]:
    with KubeEmulator(directory=tmp_path / "kube", namespaces=("default", "kube-system", "fluxnode")) as emulator:
        yield emulator


@pytest.fixture
def core(kube):
    from kubernetes import client

    api_client = kube.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
