"""A binder replica serving the admission webhook, as deployed (issue 30): its own service
account with exactly the given manifests' RBAC against the API emulator, a standby while the
Lease is held by another replica, its /readyz read over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

from fluxnode.agent.kube.timestamps import micro_time_now
from fluxnode.scheduler.binder.binder import Binder
from fluxnode.scheduler.binder.config import BinderConfig

from fluxnode.testing.kube_rbac import RbacAuthorizer
from support.binder_cluster import BINDER_USER


def held_lease(kube) -> None:
    """The binder Lease, held by another replica for an hour: ours stays a standby."""
    now = micro_time_now()
    kube.create("leases.coordination.k8s.io", {
        "metadata": {"name": "fluxnode-binder", "namespace": "fluxnode"},
        "spec": {"holderIdentity": "other-replica", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now}}, "fluxnode")


def start(kube, manifests, tmp_path, **settings):
    """A standby binder replica serving the webhook, its certificates in tmp_path/certs;
    `settings` are more BinderConfig fields (e.g. short certificate lifetimes)."""
    denials = []
    rbac = RbacAuthorizer.from_manifests(manifests, "fluxnode", "fluxnode-binder")

    def authorize(request):
        verdict = rbac(request)
        if verdict is not None:
            denials.append(request)
        return verdict

    kubeconfig = kube.add_identity(BINDER_USER, authorize)
    config = BinderConfig(uri="tcp://127.0.0.1:9", lease_namespace="fluxnode",
                          lease_duration=3600.0, renew_deadline=10.0, retry_period=2.0,
                          http_host="127.0.0.1", http_port=0, webhook_host="127.0.0.1",
                          webhook_port=0, webhook_cert_dir=str(tmp_path / "certs"),
                          podgroup_discovery=0.5, **settings)
    return Binder(kube.api_client(kubeconfig), config).start(), denials


def readyz(b: Binder) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{b.health.port}/readyz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
