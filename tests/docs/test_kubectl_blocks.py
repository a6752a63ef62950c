"""The docs' kubectl examples run as shown, with real kubectl against the API emulator.

A block fenced ```console title="kubectl against the API emulator" is a transcript like the
```console blocks tests/docs/test_console_blocks.py runs (same parser and matcher: `...` for
what varies, a last line `[N]` for a non-zero exit), run here instead with KUBECONFIG set to
a fresh emulator per block that looks like the kind cluster of docs/installer.md (one
control-plane node, fluxnode-worker, -worker2, -worker3). The emulator has no controllers;
between commands this test plays the two the examples need, as they behave on a cluster:
the DaemonSet controller (a Ready agent pod on every node the DaemonSet selects, cordoned or
not) and the Deployment's ReplicaSet controller (Ready replicas up to spec.replicas, on
schedulable nodes without one). Commands run from the checkout's root (``-k daemonset/``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs.test_console_blocks import DOC_FILES, Block, output_matches, run_step, titled_blocks
from support.kubectl import env_for, require_kubectl
from support.paths import REPO as ROOT

from fluxnode.testing.kube_emulator import KubeEmulator

FENCE = '```console title="kubectl against the API emulator"'
WORKERS = ("fluxnode-worker", "fluxnode-worker2", "fluxnode-worker3")
READY = [{"type": "Ready", "status": "True"}]


KUBECTL_BLOCKS = [block for path in DOC_FILES for block in titled_blocks(path, FENCE)]


def kind_cluster(directory: Path) -> KubeEmulator:
    kube = KubeEmulator(directory=directory).start()
    kube.add_node("fluxnode-control-plane", control_plane=True, address="172.18.0.2")
    for i, name in enumerate(WORKERS):
        kube.add_node(name, address=f"172.18.0.{3 + i}")
    return kube


def _pod(kube: KubeEmulator, name: str, node: str, template: dict, owner: dict) -> None:
    containers = template["spec"]["containers"]
    kube.create("pods", {
        "metadata": {"name": name, "namespace": "fluxnode",
                     "labels": dict(template["metadata"].get("labels") or {}),
                     "ownerReferences": [{**owner, "controller": True}]},
        "spec": {**template["spec"], "nodeName": node},
        "status": {"phase": "Running", "conditions": READY,
                   "podIP": kube.get("nodes", node)["status"]["addresses"][0]["address"],
                   "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0,
                                          "state": {"running": {}}} for c in containers]},
    }, "fluxnode")


class Controllers:
    """The DaemonSet and ReplicaSet controllers, one pass per call, over namespace fluxnode."""

    def __init__(self, kube: KubeEmulator):
        self.kube, self.made = kube, 0

    def _suffix(self) -> str:
        """A pod name's random-looking five characters (deterministic here)."""
        self.made += 1
        n, out = self.made * 7919, ""
        for _ in range(5):
            n, k = divmod(n, 27)
            out += "bcdfghjklmnpqrstvwxz2456789"[k]
        return out

    def __call__(self) -> None:
        kube = self.kube
        if "fluxnode" not in {n["metadata"]["name"] for n in kube.list("namespaces")}:
            return
        pods = [p for p in kube.list("pods", "fluxnode")
                if not p["metadata"].get("deletionTimestamp")]
        nodes = kube.list("nodes")
        workers = [n for n in nodes
                   if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"]]

        def owned(uid: str) -> list[dict]:
            return [p for p in pods if p["metadata"]["ownerReferences"][0]["uid"] == uid]

        for ds in kube.list("daemonsets.apps", "fluxnode"):
            # the shipped DaemonSet's affinity keeps it off control planes; it runs on
            # cordoned nodes too (the controller tolerates node.kubernetes.io/unschedulable)
            owner = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                     "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"]}
            placed = {p["spec"]["nodeName"] for p in owned(owner["uid"])}
            for node in workers:
                if node["metadata"]["name"] not in placed:
                    _pod(kube, f"{owner['name']}-{self._suffix()}", node["metadata"]["name"],
                         ds["spec"]["template"], owner)
        for deploy in kube.list("deployments.apps", "fluxnode"):
            owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                     "name": f"{deploy['metadata']['name']}-6c9f7d8b5",
                     "uid": f"rs-{deploy['metadata']['uid']}"}
            mine = owned(owner["uid"])
            taken = {p["spec"]["nodeName"] for p in mine}
            # anti-affinity: replicas on different schedulable nodes
            free = [n["metadata"]["name"] for n in workers
                    if not (n.get("spec") or {}).get("unschedulable")
                    and n["metadata"]["name"] not in taken]
            for node in free[: max(0, deploy["spec"].get("replicas", 1) - len(mine))]:
                _pod(kube, f"{owner['name']}-{self._suffix()}", node,
                     deploy["spec"]["template"], owner)


def test_the_docs_have_kubectl_blocks():
    assert len(KUBECTL_BLOCKS) >= 1, "no kubectl example found: a renamed fence?"


@pytest.mark.parametrize("block", KUBECTL_BLOCKS, ids=[b.id for b in KUBECTL_BLOCKS])
def test_kubectl_block_runs_as_shown(block: Block, tmp_path: Path, monkeypatch):
    require_kubectl()
    kube = kind_cluster(tmp_path / "kube")
    try:
        for key, value in env_for(kube).items():
            if key in ("KUBECONFIG", "KUBECACHEDIR", "HOME"):
                monkeypatch.setenv(key, value)
        controllers = Controllers(kube)
        for step in block.steps:
            controllers()
            done = run_step(step, ROOT)
            where = f"{block.path.relative_to(ROOT)}:{step.line}: $ {step.command}"
            assert done.returncode == step.status, (
                f"{where}\nexit status {done.returncode}, expected {step.status}\n{done.stdout}")
            if step.expected:
                assert output_matches(step.expected, done.stdout.splitlines()), (
                    f"{where}\n--- expected\n" + "\n".join(step.expected)
                    + "\n--- got\n" + done.stdout)
    finally:
        kube.stop()
