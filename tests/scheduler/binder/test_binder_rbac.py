"""The binder with exactly the permissions daemonset/binder.yaml grants, finding the leader
through the agents' rank map (as in a cluster), with leader election on."""

import json
from urllib.parse import urlparse

from support.binder_cluster import BinderCluster
from support.paths import REPO

from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for

MANIFEST = REPO / "daemonset" / "binder.yaml"


def test_least_privilege_manifest_is_enough(tmp_path):
    with KubeEmulator(namespaces=("default", "kube-system", "fluxnode")) as kube:
        with BinderCluster(tmp_path, {"node0": 4, "node1": 4}, emulator=kube) as c:
            port = urlparse(c.inst.tcp_uri(0)).port
            kube.patch(
                "nodes",
                "node0",
                {"metadata": {"annotations": {"fluxnode.io/broker-port": str(port)}}},
            )
            kube.create(
                "configmaps",
                {
                    "metadata": {"name": "fluxnode-ranks", "namespace": "fluxnode"},
                    "data": {"ranks.json": json.dumps({"hosts": ["node0", "node1"], "vacant": []})},
                },
                "fluxnode",
            )
            kube.authorizer = RbacAuthorizer.from_manifests(
                [MANIFEST], "fluxnode", "fluxnode-binder"
            )
            b = c.start_binder(
                uri=None,
                leader_elect=True,
                lease_namespace="fluxnode",
                lease_duration=3.0,
                renew_deadline=2.0,
                retry_period=0.2,
            )
            wait_for(b.leading.is_set, 10, what="leadership")
            for i in range(2):
                c.create_pod(f"r-{i}", cpu="2", group="r", size=2)
            c.create_pod("too-big", cpu="9")
            c.wait_bound(["r-0", "r-1"])
            c.wait_condition("too-big", "Unschedulable")
            wait_for(lambda: c.events("r-0", "Scheduled"), 10, what="Scheduled event")
            denied = [r for r in kube.requests if getattr(r, "verb", None) and kube.authorizer(r)]
            assert not denied, denied
