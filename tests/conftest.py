"""Fixtures shared by every area: a Kubernetes API emulator per test, reached by the real client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluxnode.testing.kube_emulator import KubeEmulator


def pytest_report_header(config) -> str:
    from support.kubectl import kubectl_path, kubectl_version

    return f"kubectl: {kubectl_version()} ({kubectl_path() or 'not installed: make system-deps'})"


@pytest.fixture
def kube(tmp_path) -> Iterator[KubeEmulator]:
    with KubeEmulator(
        directory=tmp_path / "kube", namespaces=("default", "kube-system", "fluxnode")
    ) as emulator:
        yield emulator


@pytest.fixture
def core(kube):
    from kubernetes import client

    api_client = kube.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
