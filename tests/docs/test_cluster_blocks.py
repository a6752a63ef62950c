"""The docs' fluxnode-cluster walks run as shown: real kubectl, real brokers, the real binder.

A block fenced ```console title="kubectl against a test cluster with the binder" is a transcript
like the other console blocks (same parser and matcher as tests/docs/test_console_blocks.py:
`...` for what varies, AGE and times; a last line `[N]` for a non-zero exit), run with
KUBECONFIG set to a cluster made of real things: four brokers of 2 cores each (node0 ..
node3), the binder with exactly daemonset/binder.yaml's RBAC serving its admission webhook,
and the API emulator with daemonset/workloads/ applied (the FluxJob CRD and the webhook's
configuration) and its Job controller (tests/support/fluxjob_cluster.py, as the binder's
own tests set it up). The blocks of one page are one walk: they run in the page's order on
one cluster, so a page reads as a user's session. Commands run from the checkout's root, with
the virtualenv's bin first on PATH (its kubectl, and the `kubectl-fluxnode` plugin).

The emulator runs no containers; between commands this test plays the kubelet, as simply as
a reader can predict it: before each command, a pod bound to a node and still Pending is
started (Running, its containers ready); and a command that waits for a Job to complete
(`kubectl wait --for=condition=complete job/NAME`) is where time passes for that Job: its
running pods succeed first (the Job controller then completes it). Nothing else is played;
the FluxJob records, the bindings, the Job's suspension and the tables are the binder's,
the Job controller's and kubectl's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from docs.test_console_blocks import (
    DOC_FILES,
    Block,
    Step,
    output_matches,
    run_step,
    titled_blocks,
)
from support.fluxjob_cluster import fluxjob_cluster
from support.kubectl import env_for, require_kubectl
from support.paths import REPO as ROOT

from fluxnode.testing.kube_emulator import KubeEmulator

FENCE = '```console title="kubectl against a test cluster with the binder"'
NODES = {f"node{i}": 2 for i in range(4)}
COMPLETE = re.compile(r"kubectl wait\b.*--for=condition=complete\b.*\bjob/([a-z0-9.-]+)", re.I)
JOB_NAME = "batch.kubernetes.io/job-name"


PAGES = {path: blocks for path in DOC_FILES if (blocks := titled_blocks(path, FENCE))}


def _running(pod: dict) -> dict:
    ready = [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized",
                                                      "ContainersReady", "Ready")]
    return {"status": {"phase": "Running", "conditions": ready, "containerStatuses": [
        {"name": c["name"], "image": c.get("image", ""), "ready": True, "restartCount": 0,
         "started": True, "state": {"running": {}}} for c in pod["spec"]["containers"]]}}


def _succeeded(pod: dict) -> dict:
    return {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": c["name"], "image": c.get("image", ""), "ready": False, "restartCount": 0,
         "started": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        for c in pod["spec"]["containers"]]}}


def kubelet(kube: KubeEmulator, command: str) -> None:
    """The kubelet's part before `command` (the module's docstring says what it is)."""
    live = [p for p in kube.list("pods")
            if (p.get("spec") or {}).get("nodeName")
            and not p["metadata"].get("deletionTimestamp")]
    for pod in live:
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            kube.store.patch("pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                             _running(pod), "merge")
    waited = COMPLETE.search(command)
    if waited is None:
        return
    for pod in live:
        if (pod["metadata"].get("labels") or {}).get(JOB_NAME) == waited[1]:
            kube.store.patch("pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                             _succeeded(pod), "merge")


def run_walk(blocks: list[Block], kube: KubeEmulator) -> Iterator[tuple[Block, Step, str]]:
    """Each step of the page's blocks in order, after the kubelet's part: (block, step,
    why it failed or "")."""
    for block in blocks:
        for step in block.steps:
            kubelet(kube, step.command)
            done = run_step(step, ROOT)
            where = f"{block.path.relative_to(ROOT)}:{step.line}: $ {step.command}"
            if done.returncode != step.status:
                yield block, step, (f"{where}\nexit status {done.returncode}, expected "
                                    f"{step.status}\n{done.stdout}")
                return
            if step.expected and not output_matches(step.expected, done.stdout.splitlines()):
                yield block, step, (f"{where}\n--- expected\n" + "\n".join(step.expected)
                                    + "\n--- got\n" + done.stdout)
                return
            yield block, step, ""


def test_the_docs_have_cluster_blocks():
    """docs/workloads.md's walk is found (a renamed fence would otherwise skip it)."""
    assert ROOT / "docs" / "workloads.md" in PAGES, "no cluster walk in docs/workloads.md"


@pytest.mark.parametrize("path", list(PAGES), ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_cluster_walk_runs_as_shown(path: Path, tmp_path: Path, monkeypatch):
    require_kubectl()
    with fluxjob_cluster(tmp_path, NODES) as c:
        for key, value in env_for(c.kube).items():
            if key in ("KUBECONFIG", "KUBECACHEDIR", "HOME"):
                monkeypatch.setenv(key, value)
        for _block, _step, failure in run_walk(PAGES[path], c.kube):
            assert not failure, failure
        c.assert_no_overcommit()
