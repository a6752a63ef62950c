"""`kubectl fluxnode resources` end to end: real brokers, the binder with exactly
daemonset/binder.yaml's RBAC publishing the leader's resource list, the API emulator, the
real kubectl finding the plugin on PATH, as a user bound to the manifest's
fluxnode-resources-reader Role only.

The oracle is outside the binder and the plugin: `fluxnode resource list` run against the
leader itself (the command a user with a shell on a node runs), and counts written here
from the cluster this test built (4 nodes of 2 cores; a pod of 2 cores; a broker killed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from kubernetes import client
from support.binder_cluster import BINDER_MANIFEST, BinderCluster
from support.kubectl import plugin

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for

HEADER = "     STATE NNODES   NCORES    NGPUS NODELIST"


def manifest(kind: str, name: str) -> dict:
    return next(d for d in yaml.safe_load_all(BINDER_MANIFEST.read_text())
                if d and d["kind"] == kind and d["metadata"]["name"] == name)


def direct(c: BinderCluster) -> str:
    """`fluxnode resource list` from the leader directly."""
    out = subprocess.run([sys.executable, "-m", "fluxnode", "resource", "list"],
                         env={**os.environ, "FLUXNODE_URI": c.inst.uri}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def cluster(tmp_path):
    kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode")).start()
    try:
        with BinderCluster(tmp_path, {f"node{i}": 2 for i in range(4)}, emulator=kube) as c:
            yield c
    finally:
        kube.stop()


def reader(c: BinderCluster, tmp_path) -> dict[str, str]:
    """kubectl's environment for a user granted only the manifest's reader Role (bound as
    an operator would, to a ServiceAccount here: the emulator's RBAC names those)."""
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice-resources", "namespace": "fluxnode"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "fluxnode-resources-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "alice",
                             "namespace": "default"}]}
    path = tmp_path / "alice-rbac.yaml"
    path.write_text(yaml.safe_dump_all([manifest("Role", "fluxnode-resources-reader"),
                                        binding]))
    kubeconfig = c.kube.add_identity("system:serviceaccount:default:alice",
                                     RbacAuthorizer.from_manifests([path], "default", "alice"))
    return {"KUBECONFIG": str(kubeconfig)}


def test_resources_prints_the_leaders_list_and_its_age(cluster, tmp_path):
    c = cluster
    alice = reader(c, tmp_path)
    # no ConfigMap (manifests not applied): said, with what to do
    r = plugin(c.kube, "resources", env=alice)
    assert r.returncode == 1 and "no ConfigMap fluxnode/fluxnode-resources" in r.stderr, r
    client.CoreV1Api(c.kube.api_client()).create_namespaced_config_map(
        "fluxnode", manifest("ConfigMap", "fluxnode-resources"))
    # the ConfigMap as shipped, nothing published: the binder is what to check
    r = plugin(c.kube, "resources", env=alice)
    assert r.returncode == 1 and "no resource list in ConfigMap fluxnode/fluxnode-resources" \
        in r.stderr and "get lease fluxnode-binder" in r.stderr, r
    b = c.start_binder(resources_interval=0.2, resources_refresh=1.0)

    def same() -> str | None:
        got = plugin(c.kube, "resources", env=alice)
        want = direct(c)
        return got if got.returncode == 0 and got.stdout == want else None

    r = wait_for(same, 60, what="the plugin printing what `fluxnode resource list` prints")
    assert r.stdout.splitlines() == [HEADER,
                                     "      free      4        8        0 node[0-3]",
                                     " allocated      0        0        0",
                                     "      down      0        0        0"]
    assert r.stderr.startswith("as the leader listed it ") and f"by {b.identity})" in r.stderr
    # a pod of 2 cores bound: one node allocated
    c.create_pod("p", cpu="2")
    node = c.wait_bound(["p"])["p"]
    r = wait_for(lambda: (x := same()) and " allocated      1" in x.stdout and x, 60,
                 what="the allocation published")
    assert f" allocated      1        2        0 {node}" in r.stdout.splitlines()
    # a broker down: node3 in the down row, as the leader says
    c.inst.kill(3)
    r = wait_for(lambda: (x := same()) and "down      1" in x.stdout and x, 60,
                 what="node3 down published")
    assert r.stdout.splitlines()[-1] == "      down      1        2        0 node3"
    assert plugin(c.kube, "resources", "-s", "up", "--no-header", env=alice).check() \
        .stdout.split()[:3] == ["up", "3", "6"]
    # nobody publishes any more: the list is still printed, said to be stale and why
    c.stop_binder(b)
    r = wait_for(lambda: "stale" in (x := plugin(c.kube, "resources", env=alice)).stderr and x,
                 60, what="the list said to be stale")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == HEADER
    assert "refreshes it every 1s" in r.stderr and "get lease fluxnode-binder" in r.stderr


def test_a_user_without_the_reader_role_is_told_which_role_grants_it(cluster, tmp_path):
    c = cluster
    client.CoreV1Api(c.kube.api_client()).create_namespaced_config_map(
        "fluxnode", manifest("ConfigMap", "fluxnode-resources"))
    nobody = c.kube.add_identity("system:serviceaccount:default:bob",
                                 RbacAuthorizer.from_manifests([], "default", "bob"))
    r = plugin(c.kube, "resources", env={"KUBECONFIG": str(nobody)})
    assert r.returncode == 1 and "forbidden" in r.stderr.lower(), r
    assert "fluxnode-resources-reader" in r.stderr


def test_unknown_state_is_an_error(capsys):
    from fluxnode.commands.kubectl_plugin import main

    assert main(["resources", "-s", "free,busy"]) == 1
    assert capsys.readouterr().err == (
        "error: --states: unknown state 'busy' (known: free, allocated, down, up, all)\n")


def test_ages_in_short_words():
    from fluxnode.commands.kubectl_plugin import age_text

    assert [age_text(s) for s in (0, 45.9, 119, 120, 192, 599, 600, 2520, 3600, 7500,
                                  86399, 86400, 273600)] == [
        "0s", "45s", "119s", "2m0s", "3m12s", "9m59s", "10m", "42m", "1h0m", "2h5m",
        "23h59m", "1d0h", "3d4h"]
