"""The daemonset/ kustomization as `kubectl kustomize` renders it (what `kubectl apply -k`
sends), shared by the manifest tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from support.paths import REPO

DAEMONSET = REPO / "daemonset"


def render_kustomization(directory=DAEMONSET) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: cannot render the kustomization")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"kubectl kustomize {directory} failed: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="session")
def rendered() -> list[dict]:
    return render_kustomization()


def one(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.fixture(scope="session")
def binder_deployment(rendered) -> dict:
    return one(rendered, "Deployment", "fluxnode-binder")


@pytest.fixture(scope="session")
def agent_daemonset(rendered) -> dict:
    return one(rendered, "DaemonSet", "fluxnode-agent")
