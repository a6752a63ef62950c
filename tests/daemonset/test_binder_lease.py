"""The binder's Lease names its pod: the Deployment passes POD_NAME and `fluxnode binder`
(the real command, against the API emulator with exactly binder.yaml's RBAC) holds the Lease
under that name; without POD_NAME it falls back to hostname-pid."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from support.binder_log import HEALTH, served_port
from support.paths import REPO

from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.kube_store import ApiError
from fluxnode.testing.ports import refused_port
from fluxnode.testing.waiting import wait_for


def lease_args(deployment: dict) -> dict[str, str]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"] if "=" in a)
    return {"namespace": args["lease-namespace"], "name": args["lease-name"]}


def test_the_deployment_passes_its_pod_name(binder_deployment):
    (c,) = binder_deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env.get("POD_NAME") == "metadata.name"
    assert "--identity" not in " ".join(c["args"])  # the identity comes from POD_NAME


@pytest.fixture
def run_binder(kube, tmp_path, binder_deployment):
    lease = lease_args(binder_deployment)
    kube.authorizer = RbacAuthorizer.from_manifests(
        [REPO / "daemonset" / "binder.yaml"], "fluxnode", "fluxnode-binder"
    )
    procs: list[subprocess.Popen] = []

    def start(pod_name: str | None) -> subprocess.Popen:
        """A binder serving /metrics on a port of its own choosing (--http-port 0: it logs
        which)."""
        env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "KUBECONFIG")}
        if pod_name is not None:
            env["POD_NAME"] = pod_name
        log = open(tmp_path / f"binder-{len(procs)}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "fluxnode", "binder", "--kubeconfig", str(kube.kubeconfig_path),
             "--uri", f"tcp://127.0.0.1:{no_broker_port}",
             "--lease-namespace", lease["namespace"], "--lease-name", lease["name"],
             "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.2",
             "--http-host", "127.0.0.1", "--http-port", "0"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        procs.append(proc)
        return proc

    def holder() -> str | None:
        try:
            obj = kube.get("leases.coordination.k8s.io", lease["name"], lease["namespace"])
        except ApiError as exc:
            assert exc.code == 404, exc
            return None
        return (obj.get("spec") or {}).get("holderIdentity")

    # no broker: the Lease is taken before the scheduler is ever asked, and the port the
    # binder is pointed at is held, not listening, so that no broker of another test is there
    with refused_port() as no_broker_port:
        yield start, holder
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    denied = [r for r in kube.requests if getattr(r, "verb", None) and kube.authorizer(r)]
    assert not denied, denied


def test_lease_holder_is_the_pod_name(run_binder, tmp_path):
    start, holder = run_binder
    start("fluxnode-binder-5d8c7b9f4-x2k7q")  # --http-port 0: the port it got, it logs
    wait_for(holder, 20, what="the binder to take the Lease")
    assert holder() == "fluxnode-binder-5d8c7b9f4-x2k7q"
    port = wait_for(lambda: served_port(tmp_path / "binder-0.log",
                                        "fluxnode-binder-5d8c7b9f4-x2k7q", HEALTH), 20,
                    what="the binder to log its --http-port")
    # what the metrics Service points at: /metrics on the --http-port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200 and b"# TYPE" in resp.read()


def test_without_pod_name_the_holder_is_hostname_pid(run_binder):
    start, holder = run_binder
    proc = start(None)
    expected = f"{socket.gethostname()}-{proc.pid}"
    wait_for(holder, 20, what="the binder to take the Lease")
    assert holder() == expected
