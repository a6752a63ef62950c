"""`kubectl fluxnode queue` through real kubectl (its plugin lookup on PATH) against the API
emulator with the FluxJob CRD installed (daemonset/workloads/fluxjob-crd.yaml).

The FluxJobs are written here through the official client, statuses through the status
subresource as the binder writes them; the expected order is written out by hand from the
binder's rules (docs/workloads.md: waiting ones by position, then priority and creation
time; then Admitted/Running; then Finished/Failed), not computed by the plugin's code.
tests/scheduler/binder/test_fluxjob_loop.py checks the same table against FluxJobs the real
binder loop wrote."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from support.kubectl import parse_table, plugin
from support.paths import REPO

from fluxnode.testing.kube_emulator import KubeEmulator

CRD = REPO / "daemonset" / "workloads" / "fluxjob-crd.yaml"
GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
HEADER = ["POSITION", "NAMESPACE/NAME", "QUEUE", "PHASE", "PRIORITY", "PODS", "NODES",
          "START", "REASON"]
BUSY = "busy: not enough free resources now; will retry when resources free up"

# (namespace, name, priority, status or None); created in this order
FLUXJOBS = [
    ("default", "a-done", 1000, {"phase": "Finished", "pods": "0/2"}),
    ("team", "b-second", 100, {"phase": "Reserved", "position": 2, "pods": "0/4",
                               "start": "2026-11-28T16:00:00Z", "reason": "reserved"}),
    ("default", "c-head", 0, {"phase": "Queued", "position": 1, "pods": "0/4",
                              "reason": BUSY}),
    ("default", "d-unwritten", 50, None),
    ("team", "e-failed", 0, {"phase": "Failed", "pods": "0/1"}),
    ("default", "f-running", 10, {"phase": "Running", "pods": "2/2", "nodes": "node[0-1]"}),
    ("team", "g-admitted", 20, {"phase": "Admitted", "pods": "1/2", "nodes": "node2"}),
]
# waiting by position, then the unpositioned by priority; holding by priority; ended last
ORDER = ["default/c-head", "team/b-second", "default/d-unwritten", "team/g-admitted",
         "default/f-running", "default/a-done", "team/e-failed"]


def fluxjob(namespace: str, name: str, priority: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "FluxJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"queue": "batch", "pods": 2, "priority": priority,
                     "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": name}}}


@pytest.fixture(scope="module")
def kube():
    kube = KubeEmulator(namespaces=("default", "team")).start()
    try:
        api = kube.api_client()
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load(CRD.read_text()))
        custom = client.CustomObjectsApi(api)
        for namespace, name, priority, status in FLUXJOBS:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                   fluxjob(namespace, name, priority))
            if status is not None:
                custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL,
                                                             name, {"status": status})
        yield kube
    finally:
        kube.stop()


def rows(kube: KubeEmulator, *args: str, env: dict | None = None) -> list[dict]:
    out = plugin(kube, "queue", *args, env=env).check().stdout
    [table] = parse_table(out)
    assert list(table[0]) == HEADER
    return table


def test_all_namespaces_in_the_binders_order(kube):
    table = rows(kube, "-A")
    assert [r["NAMESPACE/NAME"] for r in table] == ORDER
    assert table[0] == {"POSITION": "1", "NAMESPACE/NAME": "default/c-head", "QUEUE": "batch",
                        "PHASE": "Queued", "PRIORITY": "0", "PODS": "0/4", "NODES": "-",
                        "START": "-", "REASON": BUSY}
    assert table[1]["START"] == "2026-11-28T16:00:00Z"
    assert (table[2]["POSITION"], table[2]["PHASE"], table[2]["PODS"]) == ("-", "Queued", "0/2")
    assert (table[4]["PHASE"], table[4]["PODS"], table[4]["NODES"]) == (
        "Running", "2/2", "node[0-1]")


def test_one_namespace_from_n_or_the_context(kube, tmp_path):
    assert [r["NAMESPACE/NAME"] for r in rows(kube, "-n", "team")] == [
        "team/b-second", "team/g-admitted", "team/e-failed"]
    # kubectl's flags may come before the command too
    [table] = parse_table(plugin(kube, "-n", "team", "queue").check().stdout)
    assert [r["NAMESPACE/NAME"] for r in table] == [
        "team/b-second", "team/g-admitted", "team/e-failed"]
    # no -n: the context's namespace, else default
    assert [r["NAMESPACE/NAME"] for r in rows(kube)] == [
        n for n in ORDER if n.startswith("default/")]
    config = yaml.safe_load(kube.kubeconfig_path.read_text())
    config["contexts"].append({"name": "team-ctx", "context": {
        "cluster": "emulator", "user": "emulator", "namespace": "team"}})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    # --kubeconfig wins over $KUBECONFIG (a file that is not there), --context picks the
    # context and with it the namespace
    table = rows(kube, "--kubeconfig", str(path), "--context", "team-ctx",
                 env={"KUBECONFIG": str(tmp_path / "missing")})
    assert [r["NAMESPACE/NAME"] for r in table] == [
        "team/b-second", "team/g-admitted", "team/e-failed"]


def test_an_empty_namespace_and_a_bad_kubeconfig_say_so(kube, tmp_path):
    out = plugin(kube, "queue", "-n", "nothing-here").check().stdout
    assert out.strip() == "no FluxJobs in namespace nothing-here"
    bad = plugin(kube, "queue", env={"KUBECONFIG": str(tmp_path / "missing")})
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: cannot load the kubeconfig: ")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_without_the_crd_it_says_what_to_install(tmp_path):
    kube = KubeEmulator(directory=tmp_path / "kube").start()
    try:
        out = plugin(kube, "queue", "-A")
    finally:
        kube.stop()
    assert out.returncode == 1
    assert out.stderr.strip() == ("error: the FluxJob CRD (fluxjobs.fluxnode.io) is not "
                                  "installed: kubectl apply -k daemonset/workloads/")
