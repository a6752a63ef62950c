"""An Indexed Job's completion index i is bound into slot i of its allocation (issue 30),
whatever order the pods' uids sort in: real brokers, the binder, the API emulator. The
oracle is the leader's own record of the allocation (``sched.list``: its slots in the
service's order), not the binder's assignment."""

from __future__ import annotations

from support.binder_cluster import BinderCluster

PODS = 8  # uid order equals index order by chance once in 8! = 40,320 runs


def test_index_i_lands_in_slot_i(tmp_path):
    with BinderCluster(tmp_path, {f"node{i}": 2 for i in range(4)}) as c:
        c.start_binder()
        job = c.kube.create("jobs.batch", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "sweep", "namespace": "default"},
            "spec": {"completions": PODS, "parallelism": PODS, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "x"}]}}},
        }, "default")
        names = [f"sweep-{i}" for i in range(PODS)]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "sweep",
                 "uid": job["metadata"]["uid"], "controller": True}  # as the Job controller's
        for i in reversed(range(PODS)):
            obj = c.pod(names[i], cpu="1", labels={
                "batch.kubernetes.io/job-completion-index": str(i), "job-name": "sweep",
                "controller-uid": job["metadata"]["uid"]})
            obj["metadata"]["ownerReferences"] = [owner]
            c.kube.create("pods", obj, "default")
        c.wait_bound(names)
        (listed,) = c.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
        slots = listed["slots"]
        assert len(slots) == PODS
        uids = sorted(c.get_pod(n)["metadata"]["uid"] for n in names)
        assert uids != [c.get_pod(n)["metadata"]["uid"] for n in names]  # the test can fail
        for i, name in enumerate(names):
            pod = c.get_pod(name)
            assert pod["spec"]["nodeName"] == slots[i]["hostname"], (name, slots[i])
            assert pod["metadata"]["annotations"]["fluxnode.io/cores"] == slots[i]["cores"]
        c.assert_no_overcommit()
