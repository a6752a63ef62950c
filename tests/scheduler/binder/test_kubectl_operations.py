"""The operations page's cordon, drain and uncordon, typed as an operator types them: real
kubectl against the API emulator, with fluxnode's brokers (a real overlay) and binder.

What the docs say they show: a cordon drains the node in the leader's scheduler (what runs
there stays), `kubectl drain --ignore-daemonsets` evicts the node's pods but not the agent's
DaemonSet pod, an evicted pod's cores are freed once it is gone, the binder's
PodDisruptionBudget (minAvailable 1) makes a drain that would take the last binder replica
wait (429, kubectl retries) until another replica is Ready, and an uncordon undrains. The
emulator has no controllers and no kubelets: the test plays them (it creates the DaemonSet's
and the Deployment's pods, Ready, where those controllers and the kubelets would)."""

from __future__ import annotations

from support.binder_cluster import BinderCluster
from support.kubectl import kubectl, parse_table, rendered, start

from fluxnode.testing.waiting import wait_for

READY = [{"type": "Ready", "status": "True"}]


def drains(c: BinderCluster) -> dict[str, dict]:
    return {d["hostname"]: d for d in c.inst.rpc("sched.resource-status")["drain"]}


def _controlled_pod(c: BinderCluster, name: str, node: str, template: dict, owner: dict) -> dict:
    """A pod of `template` as its controller makes it and the kubelet reports it, Ready."""
    spec = {**template["spec"], "nodeName": node}
    containers = spec["containers"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "fluxnode",
                     "labels": dict(template["metadata"]["labels"]),
                     "ownerReferences": [{**owner, "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec,
        "status": {"phase": "Running", "conditions": READY, "podIP": "10.9.0.1",
                   "containerStatuses": [{"name": ct["name"], "ready": True, "restartCount": 0,
                                          "image": ct["image"], "state": {"running": {}}}
                                         for ct in containers]},
    }
    return c.kube.create("pods", pod, "fluxnode")


def test_cordon_drain_uncordon_as_the_operations_page_shows(tmp_path):
    docs = {d["kind"]: d for d in rendered("daemonset/")}
    with BinderCluster(tmp_path, {"node0": 4, "node1": 4, "node2": 4}) as c:
        kube = c.kube
        kubectl(kube, "apply", "-k", "daemonset/").check()
        ds = kube.get("daemonsets.apps", "fluxnode-agent", "fluxnode")
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "fluxnode-binder-5d8f",
              "uid": "0b6b1c3e-0000-4000-8000-00000000beef"}
        agent_owner = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                       "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"]}
        for node in ("node0", "node1", "node2"):
            _controlled_pod(c, f"fluxnode-agent-{node}", node,
                            docs["DaemonSet"]["spec"]["template"], agent_owner)
        c.start_binder()
        # a workload pod the binder places (owned by a Job, as kubectl drain wants a controller)
        work = c.pod("work", cpu="1")
        work["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "work", "uid": "job-uid",
             "controller": True}]
        kube.create("pods", work, "default")
        x = c.wait_bound(["work"])["work"]
        kube.patch("pods", "work", {"status": {"phase": "Running", "conditions": READY}}, "default",
                   "merge")
        work_uid = c.get_pod("work")["metadata"]["uid"]
        wait_for(lambda: work_uid in c.held_by_leader(), 20, what="the work pod's cores held")
        y, z = [n for n in ("node0", "node1", "node2") if n != x]
        template = docs["Deployment"]["spec"]["template"]
        _controlled_pod(c, "fluxnode-binder-5d8f-a", x, template, rs)
        _controlled_pod(c, "fluxnode-binder-5d8f-b", y, template, rs)

        # kubectl get nodes,pods -A -o wide: the binder's placement, as kubectl shows it
        nodes, pods = parse_table(
            kubectl(kube, "get", "nodes,pods", "-A", "-o", "wide").check().stdout)
        assert {n["NAME"]: n["STATUS"] for n in nodes} == {
            "node/node0": "Ready", "node/node1": "Ready", "node/node2": "Ready"}
        assert {p["NAME"]: (p["NAMESPACE"], p["STATUS"], p["NODE"]) for p in pods} == {
            "pod/work": ("default", "Running", x),
            **{f"pod/fluxnode-agent-{n}": ("fluxnode", "Running", n)
               for n in ("node0", "node1", "node2")},
            "pod/fluxnode-binder-5d8f-a": ("fluxnode", "Running", x),
            "pod/fluxnode-binder-5d8f-b": ("fluxnode", "Running", y)}

        # kubectl cordon: the binder drains the node; what runs there stays
        assert kubectl(kube, "cordon", x).check().stdout == f"node/{x} cordoned\n"
        d = wait_for(lambda: drains(c).get(x), 20, what=f"{x} drained in the scheduler")
        assert d["source"] == "kubernetes" and d["state"] == "draining", d
        assert c.node_of("work") == x and work_uid in c.held_by_leader()
        nodes = {n["NAME"]: n["STATUS"] for n in
                 parse_table(kubectl(kube, "get", "nodes").check().stdout)[0]}
        assert nodes == {x: "Ready,SchedulingDisabled", y: "Ready", z: "Ready"}

        # kubectl drain: the node's pods are evicted (the binder replica too: the budget
        # allows one of two), the agent's DaemonSet pod stays, the work's cores are freed
        drained = kubectl(kube, "drain", x, "--ignore-daemonsets", "--delete-emptydir-data",
                          "--timeout=60s").check()
        out = drained.stdout.splitlines()
        assert out[0] == f"node/{x} already cordoned" and out[-1] == f"node/{x} drained"
        assert {line for line in out if line.endswith(" evicted")} == {
            "pod/work evicted", "pod/fluxnode-binder-5d8f-a evicted"}
        assert f"Warning: ignoring DaemonSet-managed Pods: fluxnode/fluxnode-agent-{x}" in \
            drained.stderr
        on_x = {p["metadata"]["name"]
                for p in kube.list("pods", field_selector=f"spec.nodeName={x}")}
        assert on_x == {f"fluxnode-agent-{x}"}
        wait_for(lambda: work_uid not in c.held_by_leader(), 20, what="the work's cores freed")
        pdb = parse_table(kubectl(kube, "get", "pdb", "-n", "fluxnode").check().stdout)[0]
        assert [(r["NAME"], r["MIN AVAILABLE"], r["ALLOWED DISRUPTIONS"]) for r in pdb] == [
            ("fluxnode-binder", "1", "0")]

        # the last binder replica: the drain waits on the budget, as on a real cluster
        log = tmp_path / "drain-y.err"
        proc = start(kube, log, "drain", y, "--ignore-daemonsets", "--delete-emptydir-data",
                     "--timeout=90s")
        try:
            refused = ('error when evicting pods/"fluxnode-binder-5d8f-b" -n "fluxnode" '
                       "(will retry after 5s): Cannot evict pod as it would violate the pod's "
                       "disruption budget.")
            wait_for(lambda: refused in log.read_text(), 30, what="the eviction refused (429)")
            b = kube.get("pods", "fluxnode-binder-5d8f-b", "fluxnode")
            assert "deletionTimestamp" not in b["metadata"] and proc.poll() is None
            # the ReplicaSet controller's replacement, Ready on the third node: the budget
            # allows the eviction at kubectl's next try
            _controlled_pod(c, "fluxnode-binder-5d8f-c", z, template, rs)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, log.read_text()
        assert stdout.splitlines()[-1] == f"node/{y} drained"
        assert "pod/fluxnode-binder-5d8f-b evicted" in stdout.splitlines()
        binders = {p["metadata"]["name"] for p in kube.list("pods", "fluxnode",
                                                            "app.kubernetes.io/component=binder")}
        assert binders == {"fluxnode-binder-5d8f-c"}

        # kubectl uncordon: both undrained; new work goes there again
        assert kubectl(kube, "uncordon", x, y).check().stdout == \
            f"node/{x} uncordoned\nnode/{y} uncordoned\n"
        wait_for(lambda: not ({x, y} & set(drains(c))), 20, what="both nodes undrained")

        # kubectl delete: a bound pod terminates gracefully; its cores are freed once gone
        c.create_pod("later", cpu="1")
        c.wait_bound(["later"])
        later_uid = c.get_pod("later")["metadata"]["uid"]
        wait_for(lambda: later_uid in c.held_by_leader(), 20, what="later's cores held")
        assert (kubectl(kube, "delete", "pod", "later").check().stdout
                == 'pod "later" deleted from default namespace\n')
        assert kube.list("pods", "default", field_selector="metadata.name=later") == []
        wait_for(lambda: later_uid not in c.held_by_leader(), 20, what="later's cores freed")
        c.assert_no_overcommit()
