"""A real overlay instance + the Kubernetes API emulator + binders, for the binder's tests and bench.

    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        b = c.start_binder()
        c.create_pod("p", cpu="1")
        c.wait_bound(["p"])
        c.assert_no_overcommit()

Node names are broker hostnames (node0..), as in a real deployment where the broker
hostname is the Kubernetes node name. Binders run in this process with the real
kubernetes client (through the emulator's kubeconfig) and the real overlay client
(tcp:// with CURVE to rank 0).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from fluxnode.broker_conf import idset
from fluxnode.scheduler.binder.binder import Binder, BinderConfig
from fluxnode.scheduler.binder.pod_requests import pod_requests, resource_list

from fluxnode.testing.kube_emulator import KubeEmulator
from support.instance import Instance
from support.waiting import wait_for

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SIZE_LABEL = "fluence.flux-framework.org/group-size"


class BinderCluster:
    def __init__(self, tmp_path: Path, nodes: dict[str, int], *, gpus: dict[str, int] | None = None,
                 kube_only: dict[str, int] | None = None, emulator: KubeEmulator | None = None):
        self.tmp_path = Path(tmp_path)
        self.nodes = dict(nodes)
        self.gpus = dict(gpus or {})
        self.kube_only = dict(kube_only or {})
        self.inst: Instance | None = None
        self.kube = emulator
        self._own_kube = emulator is None
        self.binders: list[Binder] = []

    def __enter__(self) -> BinderCluster:
        try:
            names = sorted(self.nodes, key=lambda n: int(n.removeprefix("node")))
            assert names == [f"node{i}" for i in range(len(names))], "nodes must be node0..nodeN-1"
            resources = {n: {"cores": self.nodes[n], "gpus": self.gpus.get(n, 0), "memory_mib": 64 * 1024} for n in names}
            self.inst = Instance(size=len(names), tmp_path=self.tmp_path, modules=None, resources=resources,
                                 tbon={"torpid_min": "0.2s", "torpid_max": "1s"}).start()
            wait_for(lambda: len(self.inst.rpc("sched.resource-status")["nodes"]) == len(names), 30,
                     what="every rank in the scheduler graph")
            if self.kube is None:
                self.kube = KubeEmulator().start()
            for n in names:
                self.add_node(n, self.nodes[n], self.gpus.get(n, 0))
            for n, cores in self.kube_only.items():
                self.add_node(n, cores)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for b in self.binders:
            b.stop()
        if self.inst is not None:
            self.inst.stop()
        if self.kube is not None and self._own_kube:
            self.kube.stop()

    # -- parts ----------------------------------------------------------------------
    def add_node(self, name: str, cores: int, gpus: int = 0, **kw) -> dict:
        node = self.kube.add_node(name, cpu=str(cores), memory="64Gi", **kw)
        if gpus:
            node = self.kube.patch("nodes", name, {"status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                                                               "allocatable": {"nvidia.com/gpu": str(gpus)}}})
        return node

    def config(self, **overrides) -> BinderConfig:
        cfg = BinderConfig(uri=self.inst.tcp_uri(0), curve_cert=self.inst.cert_path, http_port=0,
                           http_host="127.0.0.1", leader_elect=False, resync=1.0, bind_workers=8)
        for k, v in overrides.items():
            setattr(cfg, k, v)
        return cfg

    def start_binder(self, **overrides) -> Binder:
        b = Binder(self.kube.api_client(), self.config(**overrides)).start()
        self.binders.append(b)
        return b

    def stop_binder(self, b: Binder) -> None:
        b.stop()
        self.binders.remove(b)

    # -- pods -----------------------------------------------------------------------
    def pod(self, name: str, cpu: str | None = "1", *, group: str | None = None, size: int | None = None,
            scheduler: str = "fluxnode", gpus: int = 0, memory: str | None = None, priority: int | None = None, node: str | None = None,
            labels: dict | None = None, namespace: str = "default") -> dict:
        labels = dict(labels or {})
        if group:
            labels[GROUP_LABEL] = group
        if size:
            labels[SIZE_LABEL] = str(size)
        requests: dict = {}
        if cpu:
            requests["cpu"] = cpu
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
        if memory:
            requests["memory"] = memory
        spec: dict = {"schedulerName": scheduler,
                      "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}]}
        if priority is not None:
            spec["priority"] = priority
        if node:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": spec, "status": {"phase": "Pending"}}

    def create_pod(self, name: str, cpu: str | None = "1", **kw) -> dict:
        obj = self.pod(name, cpu, **kw)
        return self.kube.create("pods", obj, obj["metadata"]["namespace"])

    def get_pod(self, name: str, namespace: str = "default") -> dict:
        return self.kube.get("pods", name, namespace)

    def node_of(self, name: str) -> str | None:
        return (self.get_pod(name).get("spec") or {}).get("nodeName")

    def wait_bound(self, names: list[str], timeout: float = 30.0) -> dict[str, str]:
        def all_bound():
            nodes = {n: self.node_of(n) for n in names}
            return nodes if all(nodes.values()) else None

        return wait_for(all_bound, timeout, what=f"{len(names)} pods bound")

    def condition(self, name: str) -> dict | None:
        conds = (self.get_pod(name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c.get("type") == "PodScheduled"), None)

    def wait_condition(self, name: str, reason: str, timeout: float = 20.0) -> dict:
        return wait_for(lambda: (c := self.condition(name)) and c.get("reason") == reason and c, timeout,
                        what=f"pod {name} PodScheduled reason {reason}")

    def events(self, name: str, reason: str) -> list[dict]:
        return [e for e in self.kube.list("events", "default")
                if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason]

    def finish(self, name: str, phase: str = "Succeeded") -> None:
        self.kube.set_pod_phase(name, phase)

    # -- invariants -----------------------------------------------------------------
    def assert_no_overcommit(self) -> dict[str, int]:
        """From the API objects alone: per node, the requests of running pods fit allocatable,
        fluxnode pods' whole cores fit the node, and no core id is given to two pods."""
        used_milli: dict[str, int] = defaultdict(int)
        used_mem: dict[str, int] = defaultdict(int)
        used_cores: dict[str, int] = defaultdict(int)
        core_owner: dict[tuple[str, int], str] = {}
        for pod in self.kube.list("pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node or phase in ("Succeeded", "Failed"):
                continue
            req = pod_requests(pod)
            used_milli[node] += req.millicpu
            used_mem[node] += req.memory_bytes
            ann = (pod["metadata"].get("annotations") or {})
            if "fluxnode.io/allocation" in ann:
                used_cores[node] += max(1, req.cores)
                for core in idset.decode(ann.get("fluxnode.io/cores") or ""):
                    other = core_owner.setdefault((node, core), pod["metadata"]["name"])
                    assert other == pod["metadata"]["name"], f"core {core} of {node} given to {other} and {pod['metadata']['name']}"
        for node in self.kube.list("nodes"):
            name = node["metadata"]["name"]
            alloc = resource_list(node["status"]["allocatable"], name)
            assert used_milli[name] <= alloc.millicpu, f"{name}: {used_milli[name]}m requested > {alloc.millicpu}m allocatable"
            assert used_cores[name] <= alloc.millicpu // 1000, f"{name}: {used_cores[name]} fluxnode cores > allocatable"
            assert used_mem[name] <= alloc.memory_bytes, f"{name}: {used_mem[name]} bytes of memory requested > allocatable"
        return dict(used_milli)
