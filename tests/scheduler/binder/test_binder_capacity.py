"""Capacity is what Kubernetes allows: per node, min(discovered, allocatable) minus what pods
fluxnode did not place request, kept current as those pods come and go, and shown by
`fluxnode resource list`. The oracles are the API objects (assert_no_overcommit parses
quantities with the official client) and the real CLI's output."""

from __future__ import annotations

import subprocess
import sys

from support.binder_cluster import BinderCluster

from fluxnode.testing.waiting import wait_for


def free_cores(c: BinderCluster, host: str) -> int:
    """Free cores of `host` as `fluxnode resource list -i HOST -s free` prints them."""
    out = subprocess.run(
        [sys.executable, "-m", "fluxnode", "resource", "list", "-s", "free", "-n",
         "-o", "{ncores}", "-i", host, "--uri", c.inst.tcp_uri(0), "--curve-cert",
         str(c.inst.cert_path)],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


def foreign_pod(c: BinderCluster, name: str, node: str, cpu: str, *, daemon: bool = False) -> None:
    """A running pod another scheduler (or the DaemonSet controller) put on `node`."""
    pod = c.pod(name, cpu, scheduler="default-scheduler", node=node)
    if daemon:
        pod["metadata"]["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-exporter",
            "uid": "0b9c8f0e-0000-4000-8000-000000000001", "controller": True}]
    c.kube.create("pods", pod, "default")
    c.kube.set_pod_phase(name, "Running")


def test_allocatable_and_other_schedulers_pods_bound_what_fluxnode_places(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        c.kube.patch("nodes", "node0", {"status": {"allocatable": {"cpu": "3500m"}}})
        foreign_pod(c, "kube-scheduled", "node0", "1")
        c.start_binder()
        # 4 discovered cores, 3.5 allocatable, 1 requested by another scheduler's pod: 2 left.
        wait_for(lambda: free_cores(c, "node0") == 2, 20, what="resource list: 2 free cores")
        for i in range(3):
            c.create_pod(f"f{i}", cpu="1")
        c.wait_bound(["f0", "f1"])
        c.wait_condition("f2", "WaitingForResources")
        assert not c.node_of("f2") and free_cores(c, "node0") == 0
        c.assert_no_overcommit()
        # A DaemonSet pod arrives and one of ours ends: its core does not come back.
        foreign_pod(c, "exporter", "node0", "1", daemon=True)
        c.kube.delete("pods", "f0", "default")
        wait_for(lambda: free_cores(c, "node0") == 0 and len(c.group_allocations()) == 1, 20,
                 what="f0's core taken by the DaemonSet pod's request")
        c.create_pod("after-exporter", cpu="1")
        c.wait_condition("after-exporter", "WaitingForResources")
        assert not c.node_of("f2") and not c.node_of("after-exporter")
        c.assert_no_overcommit()
        # The other scheduler's pod finishes: its core comes back; one waiting pod binds.
        c.kube.set_pod_phase("kube-scheduled", "Succeeded")
        wait_for(lambda: sum(1 for n in ("f2", "after-exporter") if c.node_of(n)) == 1, 20,
                 what="one waiting pod bound")
        c.assert_no_overcommit()
        assert free_cores(c, "node0") == 0


def test_gpus_and_memory_are_bounded_by_allocatable(tmp_path):
    with BinderCluster(tmp_path, {"node0": 8}, gpus={"node0": 2}) as c:
        # 2 GPUs and 64 GiB discovered; Kubernetes lets pods use 1 GPU and 8 GiB.
        c.kube.patch("nodes", "node0", {"status": {"allocatable": {
            "nvidia.com/gpu": "1", "memory": "8Gi"}}})
        c.start_binder()
        c.create_pod("g0", cpu="1", gpus=1)
        c.create_pod("g1", cpu="1", gpus=1)
        wait_for(lambda: sum(1 for n in ("g0", "g1") if c.node_of(n)) == 1, 20,
                 what="one GPU pod bound")
        (waiting,) = [n for n in ("g0", "g1") if not c.node_of(n)]
        c.wait_condition(waiting, "WaitingForResources")
        c.assert_no_overcommit()
        # (the waiting GPU pod holds a reservation on the node, which keeps later pods off it:
        # it goes before the memory pods are tried)
        c.kube.delete("pods", waiting, "default")
        c.create_pod("m0", cpu="1", memory="5Gi")
        c.create_pod("m1", cpu="1", memory="5Gi")
        wait_for(lambda: sum(1 for n in ("m0", "m1") if c.node_of(n)) == 1, 20,
                 what="one 5Gi pod bound")
        (waiting,) = [n for n in ("m0", "m1") if not c.node_of(n)]
        c.wait_condition(waiting, "WaitingForResources")
        c.assert_no_overcommit()


def test_a_node_advertising_more_than_discovered_lends_nothing_others_use(tmp_path):
    """Allocatable above what the broker found (8 GPUs advertised, 4 discovered) with a
    kube-scheduler pod on 2 of them: fluxnode may place min(4, 8) - 2 = 2 GPUs, not 4."""
    with BinderCluster(tmp_path, {"node0": 8}, gpus={"node0": 4}) as c:
        c.kube.patch("nodes", "node0", {"status": {
            "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}})
        pod = c.pod("kube-gpu", "1", scheduler="default-scheduler", node="node0", gpus=2)
        c.kube.create("pods", pod, "default")
        c.kube.set_pod_phase("kube-gpu", "Running")
        c.start_binder()
        names = [f"g{i}" for i in range(3)]
        for name in names:
            c.create_pod(name, cpu="1", gpus=1)
        wait_for(lambda: sum(1 for n in names if c.node_of(n)) == 2, 20, what="two GPU pods")
        (waiting,) = [n for n in names if not c.node_of(n)]
        c.wait_condition(waiting, "WaitingForResources")
        assert not c.node_of(waiting)
