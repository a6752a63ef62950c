"""A real overlay instance + the Kubernetes API emulator + binders, for the binder's tests and
bench.

    with BinderCluster(tmp_path, {"node0": 4, "node1": 4}) as c:
        b = c.start_binder()
        c.create_pod("p", cpu="1")
        c.wait_bound(["p"])
        c.assert_no_overcommit()

Node names are broker hostnames (node0..), as in a real deployment where the broker
hostname is the Kubernetes node name. Binders run in this process with the real
kubernetes client (through the emulator's kubeconfig) and the real overlay client
(tcp:// with CURVE to rank 0). A binder talks to the API as the binder's service account,
authorized by exactly the RBAC rules of daemonset/binder.yaml (a missing rule is a 403 in
every binder test); the test's own calls keep the emulator's unrestricted identity.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import sys
import threading
from collections import defaultdict
from pathlib import Path

from fluxnode.agent.broker.client import ConnectError, RPCError
from fluxnode.scheduler.binder.binder import Binder
from fluxnode.scheduler.binder.config import BinderConfig
from kubernetes.utils import parse_quantity

from fluxnode.testing.instance import Instance
from fluxnode.testing.kube_emulator import KubeEmulator
from fluxnode.testing.kube_rbac import RbacAuthorizer
from fluxnode.testing.waiting import wait_for
from support.oracles import GPU, parse_idset, spec_requests
from support.paths import REPO

BINDER_MANIFEST = REPO / "daemonset" / "binder.yaml"
BINDER_USER = "system:serviceaccount:fluxnode:fluxnode-binder"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SIZE_LABEL = "fluence.flux-framework.org/group-size"


class ApiOutage:
    """A TCP hop between the binders and the API emulator that a test can take down: `cut()`
    resets every open connection (watches, pooled writes) and closes the listening socket,
    so new connections are refused, as when the API server restarts or its load balancer
    drops it; `restore()` listens on the same port again. Bytes pass unchanged: the client
    and the emulator are the real ones, only the network between them fails."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = 0
        self.down = False
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"  # the emulator's TLS passes through

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener, self.down = listener, False
        threading.Thread(target=self._accept, args=(listener,), daemon=True,
                         name="api-outage-accept").start()

    def cut(self) -> None:
        self.down = True
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown first: close() alone leaves the socket listening (and its port
            # taken) while the accept thread is blocked in accept() on it, until one more
            # connection arrives; shutdown wakes it and stops listening at once
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            try:  # linger 0: a reset; shutdown first wakes the pump blocked on it
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def stop(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self.down:
                    client.close()
                    server.close()
                    return
                self._conns.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True,
                                 name="api-outage-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            with self._lock:
                self._conns.discard(sock)


class BinderCluster:
    def __init__(self, tmp_path: Path, nodes: dict[str, int], *, gpus: dict[str, int] | None = None,
                 kube_only: dict[str, int] | None = None, emulator: KubeEmulator | None = None,
                 leader_module: str | None = None):
        self.tmp_path = Path(tmp_path)
        # the leader's scheduler: the installed service, or a module of tests/support (e.g.
        # an older service's answers: support.sched_service_before_cancel)
        self.leader_module = leader_module
        self.nodes = dict(nodes)
        self.gpus = dict(gpus or {})
        self.kube_only = dict(kube_only or {})
        self.inst: Instance | None = None
        self.kube = emulator
        self._own_kube = emulator is None
        self.binders: list[Binder] = []
        self.outage: ApiOutage | None = None
        self._through_outage: set[int] = set()  # id() of the binders behind `outage`
        self._unrestricted: set[int] = set()  # id() of the binders started with rbac=False
        self._binder_kubeconfig: Path | None = None

    def __enter__(self) -> BinderCluster:
        try:
            names = sorted(self.nodes, key=lambda n: int(n.removeprefix("node")))
            assert names == [f"node{i}" for i in range(len(names))], "nodes must be node0..nodeN-1"
            resources = {
                n: {"cores": self.nodes[n], "gpus": self.gpus.get(n, 0), "memory_mib": 64 * 1024}
                for n in names
            }
            self.inst = Instance(
                size=len(names),
                tmp_path=self.tmp_path,
                modules=self.leader_module,
                resources=resources,
                tbon={"torpid_min": "0.2s", "torpid_max": "1s"},
                env=None if self.leader_module is None else {"PYTHONPATH": os.pathsep.join(
                    [str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])},
            ).start()
            wait_for(lambda: len(self.inst.rpc("sched.resource-status")["nodes"]) == len(names), 30,
                     what="every rank in the scheduler graph")
            if self.kube is None:
                self.kube = KubeEmulator(
                    namespaces=("default", "kube-system", "fluxnode")
                ).start()
            for n in names:
                self.add_node(n, self.nodes[n], self.gpus.get(n, 0))
            for n, cores in self.kube_only.items():
                self.add_node(n, cores)
        except BaseException:
            self.__exit__(*sys.exc_info())  # the start-up error is the one to report
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for b in self.binders:
            b.stop()
        if self.outage is not None:
            self.outage.stop()
        try:
            if self.inst is not None:
                self.inst.stop(
                    check=not exc or exc[0] is None
                )  # a failing test keeps its own error
        finally:
            if self.kube is not None and self._own_kube:
                self.kube.stop()

    # -- parts ----------------------------------------------------------------------
    def add_node(self, name: str, cores: int, gpus: int = 0, **kw) -> dict:
        node = self.kube.add_node(name, cpu=str(cores), memory="64Gi", **kw)
        if gpus:
            node = self.kube.patch(
                "nodes",
                name,
                {
                    "status": {
                        "capacity": {"nvidia.com/gpu": str(gpus)},
                        "allocatable": {"nvidia.com/gpu": str(gpus)},
                    }
                },
            )
        return node

    def config(self, **overrides) -> BinderConfig:
        cfg = BinderConfig(uri=self.inst.tcp_uri(0), curve_cert=self.inst.cert_path, http_port=0,
                           http_host="127.0.0.1", leader_elect=False, resync=1.0, bind_workers=8)
        for k, v in overrides.items():
            setattr(cfg, k, v)
        return cfg

    def start_binder(self, *, through_outage: bool = False, rbac: bool = True,
                     **overrides) -> Binder:
        """A binder (in this process); `through_outage`: its API traffic goes through
        `self.outage` (an ApiOutage), which the test can cut; `rbac`: as the binder's service
        account with the manifest's RBAC (False: the emulator's unrestricted identity)."""
        if rbac and self._binder_kubeconfig is None:
            self._binder_kubeconfig = self.kube.add_identity(
                BINDER_USER,
                RbacAuthorizer.from_manifests([BINDER_MANIFEST], "fluxnode", "fluxnode-binder"),
            )
        api = self.kube.api_client(self._binder_kubeconfig if rbac else None)
        if through_outage:
            if self.outage is None:
                self.outage = ApiOutage(self.kube.port)
            api.configuration.host = self.outage.url
        b = Binder(api, self.config(**overrides)).start()
        if through_outage:
            self._through_outage.add(id(b))
        if not rbac:
            self._unrestricted.add(id(b))
        self.binders.append(b)
        return b

    def stop_binder(self, b: Binder) -> None:
        b.stop()
        self.binders.remove(b)

    def replace_binder(self, b: Binder, **overrides) -> Binder:
        """Stop `b` and start a new binder with its settings (and `overrides`): a restart of
        the binder's process; the new one rebuilds everything from the leader and the pods."""
        through_outage = id(b) in self._through_outage
        rbac = id(b) not in self._unrestricted
        config = {k: getattr(b.config, k) for k in vars(b.config)} | overrides
        self.stop_binder(b)
        return self.start_binder(through_outage=through_outage, rbac=rbac, **config)

    # -- faults ---------------------------------------------------------------------
    def kill_leader(self, *, lose_journal: bool = False) -> list[Path]:
        """kill -9 rank 0. `lose_journal`: move its scheduler journal aside as well (a new
        leader with an empty statedir, e.g. rank 0 moved to another node). Returns the files
        moved aside."""
        self.inst.kill(0)
        moved: list[Path] = []
        if lose_journal:
            statedir = Path(self.inst._broker_info(0)["attrs"]["statedir"])
            for f in sorted(statedir.glob("sched-journal.sqlite*")):
                aside = f.with_name(f.name + ".aside")
                f.rename(aside)
                moved.append(aside)
            assert moved, f"no scheduler journal in {statedir}"
        return moved

    def restart_leader(self, timeout: float = 30.0) -> None:
        """Start rank 0 again (same statedir and command line) and wait until its scheduler
        answers with every rank up."""
        self.inst.restart(0)
        self.wait_leader(timeout)

    def wait_leader(self, timeout: float = 30.0) -> dict:
        def answers():
            try:
                status = self.inst.rpc("sched.resource-status", timeout=2.0)
            except (ConnectError, RPCError, OSError) as exc:
                if isinstance(exc, RPCError) and exc.errnum not in (
                    errno.ENOSYS, errno.ETIMEDOUT, errno.ECONNRESET, errno.EHOSTUNREACH
                ):
                    raise
                return None
            up = [n for n in status["nodes"] if n.get("status", "up") == "up"]
            return status if len(up) == len(self.nodes) else None

        return wait_for(answers, timeout, what="the leader's scheduler with every rank up")

    def group_allocations(self) -> list[dict]:
        """The leader's live group allocations (what it holds for the binder's pods)."""
        return [
            a
            for a in self.inst.rpc("sched.list", {"labels": {"kind": "group"}})["allocations"]
            if a["status"] == "ALLOCATED"
        ]

    def held_by_leader(self) -> dict[str, set[tuple[int, int]]]:
        """Pod uid -> the (rank, core) pairs the leader holds for that pod's allocation (a
        group allocation's cores are shared among its pods, so each pod maps to all of them)."""
        held: dict[str, set[tuple[int, int]]] = {}
        for a in self.group_allocations():
            pairs = {(n["rank"], c) for n in a["nodes"] for c in parse_idset(n["cores"])}
            for uid in (a.get("labels") or {}).get("pods") or []:
                held.setdefault(uid, set()).update(pairs)
        return held

    # -- pods -----------------------------------------------------------------------
    def pod(
        self,
        name: str,
        cpu: str | None = "1",
        *,
        group: str | None = None,
        size: int | None = None,
        scheduler: str = "fluxnode",
        gpus: int = 0,
        memory: str | None = None,
        priority: int | None = None,
        node: str | None = None,
        labels: dict | None = None,
        namespace: str = "default",
    ) -> dict:
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
        spec: dict = {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests}}
            ],
        }
        if priority is not None:
            spec["priority"] = priority
        if node:
            spec["nodeName"] = node
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec,
            "status": {"phase": "Pending"},
        }

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
        return wait_for(
            lambda: (c := self.condition(name)) and c.get("reason") == reason and c,
            timeout,
            what=f"pod {name} PodScheduled reason {reason}",
        )

    def events(self, name: str, reason: str) -> list[dict]:
        return [
            e
            for e in self.kube.list("events", "default")
            if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
        ]

    def finish(self, name: str, phase: str = "Succeeded") -> None:
        self.kube.set_pod_phase(name, phase)

    # -- invariants -----------------------------------------------------------------
    def assert_no_overcommit(self) -> dict[str, int]:
        """From the API objects alone, never through the binder's own accounting: per node,
        what each running fluxnode pod was given (its Binding's fluxnode.io/cores and
        fluxnode.io/gpus annotations) is exactly what its spec asks for rounded up to whole
        cores, lies within the node this cluster gave that broker, is owned by no other pod,
        and together with other schedulers' pods fits the node's allocatable.

        Quantities are parsed with the official client's `parse_quantity` and idsets by
        `parse_idset` below, so a rounding or counting bug in the binder cannot hide here.
        Returns the CPU each node's running pods request, in millicores.
        """
        requested_milli: dict[str, int] = defaultdict(int)
        used_milli: dict[str, int] = defaultdict(int)  # a fluxnode pod uses its whole cores
        used_mem: dict[str, int] = defaultdict(int)
        used_gpus: dict[str, int] = defaultdict(int)
        owner: dict[tuple[str, str, int], str] = {}
        for pod in self.kube.list("pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node or phase in ("Succeeded", "Failed"):
                continue
            name = pod["metadata"]["name"]
            milli, mem, gpus = spec_requests(pod)
            requested_milli[node] += milli
            used_mem[node] += mem
            ann = pod["metadata"].get("annotations") or {}
            if "fluxnode.io/allocation" not in ann:
                used_milli[node] += milli
                used_gpus[node] += gpus
                continue
            assert node in self.nodes, f"{name}: bound by fluxnode to {node}, which runs no broker"
            assert ann.get("fluxnode.io/rank") == str(int(node.removeprefix("node"))), \
                f"{name} on {node}: fluxnode.io/rank is {ann.get('fluxnode.io/rank')!r}"
            cores = parse_idset(ann.get("fluxnode.io/cores") or "")
            given_gpus = parse_idset(ann.get("fluxnode.io/gpus") or "")
            want_cores = max(1, -(-milli // 1000))  # whole cores, at least one
            assert len(cores) == want_cores, (
                f"{name} asks for {milli}m CPU (= {want_cores} whole cores) but was given cores "
                f"{sorted(cores)}"
            )
            assert len(given_gpus) == gpus, (
                f"{name} asks for {gpus} GPUs but was given {sorted(given_gpus)}"
            )
            assert cores <= set(range(self.nodes[node])), (
                f"{name}: cores {sorted(cores)} not all on {node}"
            )
            assert given_gpus <= set(range(self.gpus.get(node, 0))), (
                f"{name}: GPUs {sorted(given_gpus)} not all on {node}"
            )
            for kind, ids in (("core", cores), ("gpu", given_gpus)):
                for i in ids:
                    other = owner.setdefault((node, kind, i), name)
                    assert other == name, f"{kind} {i} of {node} given to {other} and {name}"
            used_milli[node] += 1000 * len(cores)
            used_gpus[node] += len(given_gpus)
        for node in self.kube.list("nodes"):
            name = node["metadata"]["name"]
            alloc = node["status"]["allocatable"]
            cpu = math.floor(parse_quantity(alloc.get("cpu", "0")) * 1000)
            mem = math.floor(parse_quantity(alloc.get("memory", "0")))
            gpus = math.floor(parse_quantity(alloc.get(GPU, "0")))
            assert used_milli[name] <= cpu, (
                f"{name}: pods hold {used_milli[name]}m CPU > {cpu}m allocatable"
            )
            assert used_mem[name] <= mem, (
                f"{name}: {used_mem[name]} bytes of memory requested > {mem} allocatable"
            )
            assert used_gpus[name] <= gpus, (
                f"{name}: pods hold {used_gpus[name]} GPUs > {gpus} allocatable"
            )
        return dict(requested_milli)

