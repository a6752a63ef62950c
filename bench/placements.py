"""A deterministic record of where the scheduler service places things, to compare commits.

    .venv/bin/python bench/placements.py service [--policy NAME ...] [--seed 35] [--steps 60]
    .venv/bin/python bench/placements.py binder [--seed 35] [--pods 24]

Why: the graph scheduler under the leader's service (scheduler/service/) and the binder
(scheduler/binder/) was reworked to answer as Fluxion's resource-query does (issue 35);
their placements must be what they were before. A record is only worth comparing if two
runs of the same code give the same bytes, so nothing here depends on timing or threads:

``service`` drives `SchedService` in this process through its typed request/answer API
(`alloc`, `cancel`, `drain`, `undrain`: the payloads the binder and `fluxnode alloc` send),
on six nodes of unlike shapes (cores, GPUs, memory, sockets), with a stream drawn from a
fixed seed: single pods of varied shapes, gangs of one or several slot kinds, jobspecs
(some spread over whole nodes), requests limited to some ranks (the binder's left-out
nodes), allocate-or-reserve, whole and partial cancels, drains and undrains (and requests
that may use drained nodes), once per match policy. It prints one JSON object: per policy,
per step, what was asked and what was answered (node names with the cores, GPUs and
memory given, per slot where the request had slots, a reservation's planner time, or the
refusal's errno name). Nothing reads the clock: no request has a duration.

``binder`` runs the binder the way its tests do (a real broker instance, the Kubernetes API
emulator, the official client) and creates pods one at a time, each waited for before the
next, so its queue never orders two of them: node selectors, required node affinity,
taints and tolerations, a cordoned node, GPU and memory requests, pod groups and Indexed
Jobs. It prints pod -> node and the cores and GPUs the binding names (its ``fluxnode.io/``
annotations; a group's per pod shape, see `group_record`).

Only the APIs of commit 8aab13a (the last main before issue 35) and later are used, so the
same file runs on both. tests/data/placements/ holds the records the tests replay (its
README says on which commit each was made and how).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf import idset
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.module import SchedService
from service_alloc import Handle  # bench/: the broker handle the service asks, in process

#: The match policies the service accepts (scheduler/policies/policy.py NAMED, as at 8aab13a).
POLICIES = ("first", "firstnodex", "high", "low", "lonode", "hinode", "lonodex", "hinodex",
            "locality", "variation")
SEED = 35
#: name, cores, GPUs, memory (MiB), sockets: unlike shapes, two with GPUs on two sockets
SERVICE_NODES = (
    ("n0", 8, 0, 32768, 2),
    ("n1", 4, 2, 16384, 1),
    ("n2", 16, 4, 65536, 2),
    ("n3", 2, 0, 4096, 1),
    ("n4", 8, 1, 8192, 1),
    ("n5", 12, 0, 49152, 2),
)


def service_nodes() -> list[NodeResources]:
    return [NodeResources(rank=i, hostname=name, cores=list(range(cores)),
                          gpus=list(range(gpus)), memory_mib=memory, sockets=sockets)
            for i, (name, cores, gpus, memory, sockets) in enumerate(SERVICE_NODES)]


def pod_kind(rng: random.Random, count: int = 1) -> SlotKind:
    """One pod's shape: 1-4 cores, a GPU now and then, memory or none."""
    return SlotKind(rng.choice([1, 1, 1, 2, 2, 3, 4]), 1 if rng.random() < 0.25 else 0,
                    rng.choice([0, 0, 512, 1024, 2048, 6144]), count)


def draw_request(rng: random.Random, ranks: int) -> dict:
    """One sched.alloc payload: a pod, a gang of one or several kinds, or a jobspec."""
    x = rng.random()
    if x < 0.4:
        payload: dict = {"slots": [pod_kind(rng).to_wire()]}
    elif x < 0.7:
        kinds = sorted({pod_kind(rng, rng.randint(1, 4)) for _ in range(rng.randint(1, 3))})
        payload = {"slots": [k.to_wire() for k in kinds]}
    elif x < 0.88:
        payload = {"jobspec": build_jobspec([pod_kind(rng, rng.randint(1, 3))])}
    else:  # whole nodes, as `fluxnode alloc -N` asks
        nnodes = rng.randint(1, 2)
        payload = {"jobspec": build_jobspec([SlotKind(rng.randint(1, 2), 0, 0, nnodes)],
                                            nnodes=nnodes, exclusive_nodes=rng.random() < 0.5)}
    if "slots" in payload and rng.random() < 0.25:  # the binder's left-out nodes
        left_out = set(rng.sample(range(ranks), rng.randint(1, 2)))
        payload["ranks"] = idset.encode([r for r in range(ranks) if r not in left_out])
    if rng.random() < 0.3:
        payload["op"] = "allocate_orelse_reserve"
    if rng.random() < 0.1:
        payload["use_drained"] = True
    payload["with_R"] = False
    return payload


def share(node: dict) -> list:
    return [node["hostname"], node["cores"], node["gpus"], node["memory_mib"]]


def canonical(answer: dict) -> dict:
    """What an answer placed, without ids of the journal or times."""
    out: dict[str, Any] = {"status": answer["status"], "nodes": [share(n) for n in answer["nodes"]]}
    if answer["status"] == "RESERVED":
        out["at"] = answer["at"]
    if answer.get("slots") is not None:
        out["slots"] = [[s["kind"], *share(s)] for s in answer["slots"]]
    return out


def refusal(exc: ServiceError) -> dict:
    return {"refused": errno.errorcode.get(exc.errnum, str(exc.errnum))}


def service_stream(policy: str, seed: int, steps: int) -> list[dict]:
    """The record of one policy: every step's ask and answer."""
    rng = random.Random(f"{seed}:{policy}")
    nodes = service_nodes()
    names = [n.hostname for n in nodes]
    record: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-placements-") as tmp:
        svc = SchedService(Handle(build_R(nodes), len(nodes), Path(tmp)))
        live: list[tuple[int, list[int]]] = []  # allocated ids and their ranks, in order
        drained: set[str] = set()
        try:
            for _ in range(steps):
                x = rng.random()
                if x < 0.5 or not live:
                    ask = draw_request(rng, len(nodes))
                    ask["policy"] = policy
                    try:
                        answer = svc.alloc(dict(ask))
                    except ServiceError as exc:
                        got = refusal(exc)
                    else:
                        got = canonical(answer)
                        if answer["status"] == "ALLOCATED":
                            live.append((answer["id"], [n["rank"] for n in answer["nodes"]]))
                        else:  # a reservation is the caller's to drop, as the binder does
                            svc.cancel({"id": answer["id"]})
                    ask.pop("policy")
                    ask.pop("with_R")
                    record.append({"alloc": ask, "answer": got})
                elif x < 0.88:
                    alloc_id, ranks = live.pop(rng.randrange(len(live)))
                    ask = {"id": alloc_id}
                    if len(ranks) > 1 and rng.random() < 0.5:
                        part = rng.sample(ranks, rng.randint(1, len(ranks) - 1))
                        ask["ranks"] = idset.encode(sorted(part))
                        live.append((alloc_id, [r for r in ranks if r not in part]))
                    got = svc.cancel(dict(ask))
                    record.append({"cancel": ask, "answer": {k: got[k] for k in
                                                              ("freed", "remaining")}})
                else:
                    host = rng.choice(names)
                    if host in drained:
                        got = svc.undrain({"targets": host})
                        drained.discard(host)
                        record.append({"undrain": host, "answer": got["undrained"]})
                    else:
                        got = svc.drain({"targets": host, "reason": "bench"})
                        drained.add(host)
                        record.append({"drain": host, "answer": got["drained"]})
        finally:
            svc.close()
    return record


def service_record(policies: list[str], seed: int, steps: int) -> dict:
    return {"seed": seed, "steps": steps,
            "nodes": [dict(zip(("name", "cores", "gpus", "memory_mib", "sockets"), n,
                               strict=True)) for n in SERVICE_NODES],
            "policies": {p: service_stream(p, seed, steps) for p in policies}}


def dump(record: dict) -> str:
    """The canonical text: sorted keys, one step a line, so a diff names the step."""
    lines = ["{"]
    items = list(record.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "policies":
            lines.append(f"{json.dumps(key)}: {{")
            pols = list(value.items())
            for j, (policy, steps) in enumerate(pols):
                lines.append(f"{json.dumps(policy)}: [")
                lines += [json.dumps(s, sort_keys=True) + ("," if k < len(steps) - 1 else "")
                          for k, s in enumerate(steps)]
                lines.append("]" + ("," if j < len(pols) - 1 else ""))
            lines.append("}" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- the binder ---------------------------------------------------------------------------

#: name (the broker's hostname and the Kubernetes node's), cores, GPUs, memory (GiB), labels,
#: taints: a node for each of the binder's rules (a selector, NotIn affinity, a taint)
BINDER_NODES = (
    ("node0", 4, 0, 16, {"disk": "ssd", "rack": "r1"}, []),
    ("node1", 8, 2, 32, {"rack": "r2"},
     [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
    ("node2", 2, 0, 8, {"rack": "r1"}, []),
    ("node3", 6, 1, 24, {"rack": "r2", "disk": "ssd"}, []),
    ("node4", 4, 0, 16, {}, []),
)
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SIZE_LABEL = "fluence.flux-framework.org/group-size"
ANNOTATIONS = ("fluxnode.io/cores", "fluxnode.io/gpus")
#: the binder's default, and an exhaustive policy with the other tie order
BINDER_POLICIES = ("first", "lonode")
WAIT = 60.0  # seconds for any one thing the binder or the leader does


def pod_spec(rng: random.Random, gpus_ok: bool = True) -> dict:
    """A pod's spec as a user writes it: requests, now and then a selector, an affinity that
    keeps it off a rack, a toleration of node1's taint."""
    requests = {"cpu": rng.choice(["500m", "1", "1", "2", "3"])}
    if rng.random() < 0.4:
        requests["memory"] = rng.choice(["1Gi", "3Gi", "6Gi"])
    if gpus_ok and rng.random() < 0.2:
        requests["nvidia.com/gpu"] = "1"
    spec: dict = {"schedulerName": "fluxnode",
                  "containers": [{"name": "main", "image": "busybox",
                                  "resources": {"requests": requests}}]}
    x = rng.random()
    if x < 0.2:
        spec["nodeSelector"] = {rng.choice(["disk", "rack"]): rng.choice(["ssd", "r2"])}
    elif x < 0.35:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "rack", "operator": "NotIn", "values": [rng.choice(["r1", "r2"])]}]}]}}}
    if rng.random() < 0.3 or "nvidia.com/gpu" in requests:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                "effect": "NoSchedule"}]
    return spec


class BinderRun:
    """One binder against a real instance of BINDER_NODES' brokers and the API emulator,
    driven one step at a time: each step waits until the binder and the leader have done
    all it causes, so nothing the next step sees depends on timing."""

    def __init__(self, tmp: Path, policy: str):
        from fluxnode.scheduler.binder.binder import Binder
        from fluxnode.scheduler.binder.config import BinderConfig

        from fluxnode.testing.instance import Instance
        from fluxnode.testing.kube_emulator import KubeEmulator
        from fluxnode.testing.waiting import wait_for

        self.wait_for = wait_for
        self.inst = self.kube = self.binder = None
        try:
            self.inst = Instance(
                size=len(BINDER_NODES), tmp_path=tmp, modules=None,
                resources={n: {"cores": c, "gpus": g, "memory_mib": m * 1024}
                           for n, c, g, m, _, _ in BINDER_NODES},
                tbon={"torpid_min": "0.2s", "torpid_max": "1s"}).start()
            wait_for(lambda: len(self.inst.rpc("sched.resource-status")["nodes"])
                     == len(BINDER_NODES), WAIT, what="every rank in the scheduler graph")
            self.kube = KubeEmulator(namespaces=("default", "kube-system", "fluxnode")).start()
            for name, cores, gpus, memory, labels, taints in BINDER_NODES:
                self.kube.add_node(name, cpu=str(cores), memory=f"{memory}Gi", labels=labels,
                                   taints=taints)
                if gpus:
                    self.kube.patch("nodes", name, {"status": {
                        "capacity": {"nvidia.com/gpu": str(gpus)},
                        "allocatable": {"nvidia.com/gpu": str(gpus)}}})
            config = BinderConfig(uri=self.inst.tcp_uri(0), curve_cert=self.inst.cert_path,
                                  http_port=0, http_host="127.0.0.1", leader_elect=False,
                                  resync=1.0, policy=policy)
            self.binder = Binder(self.kube.api_client(), config).start()
            wait_for(lambda: len(self.binder.state.nodes) == len(BINDER_NODES)
                     and all(len(self.binder.state.nodes[n].traits.taints) == len(t)
                             for n, _, _, _, _, t in BINDER_NODES),
                     WAIT, what="the binder sees every node, with its taints")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.binder is not None:
            self.binder.stop()
        try:
            if self.inst is not None:
                self.inst.stop(check=False)
        finally:
            if self.kube is not None:
                self.kube.stop()

    def _held(self, status: str) -> list[dict]:
        return [a for a in self.inst.rpc("sched.list")["allocations"] if a["status"] == status]

    def place(self, pods: dict[str, dict]) -> dict[str, dict | str]:
        """Create `pods` (name -> the pod), wait until each is bound or says why not, and
        return where each went (node and annotations), or its PodScheduled reason; pods not
        bound are deleted (and forgotten by the binder, with any reservation made for them)."""
        uids = {name: self.kube.create("pods", pod, "default")["metadata"]["uid"]
                for name, pod in pods.items()}

        def outcome(name: str) -> dict | str | None:
            pod = self.kube.get("pods", name, "default")
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                notes = pod["metadata"].get("annotations") or {}
                return {"node": node, **{a.split("/")[1]: notes.get(a, "") for a in ANNOTATIONS}}
            conds = (pod.get("status") or {}).get("conditions") or []
            why = next((c.get("reason") for c in conds if c.get("type") == "PodScheduled"), None)
            return why if why in ("Unschedulable", "WaitingForResources") else None

        def all_decided():
            got = {name: outcome(name) for name in pods}
            return got if all(got.values()) else None

        got = self.wait_for(all_decided, WAIT, what=f"pods {', '.join(pods)} bound or refused")
        waiting = [name for name, where in got.items() if isinstance(where, str)]
        for name in waiting:
            self.kube.delete("pods", name, "default")
        if waiting:
            self.wait_for(lambda: not any(uids[n] in self.binder.state.pods for n in waiting)
                          and not self._held("RESERVED"), WAIT,
                          what="the binder forgets the pods not placed and their reservation")
        return got

    def finish(self, names: list[str]) -> None:
        """The pods end (Succeeded); wait until the leader no longer holds their allocation."""
        ids = {self.kube.get("pods", n, "default")["metadata"]["annotations"]
               ["fluxnode.io/allocation"] for n in names}
        for name in names:
            self.kube.patch("pods", name, {"status": {"phase": "Succeeded"}}, "default",
                            "merge")
        self.wait_for(lambda: not ids & {str(a["id"]) for a in self._held("ALLOCATED")}, WAIT,
                      what=f"the leader frees the allocation of {', '.join(names)}")

    def cordon(self, node: str, on: bool) -> None:
        """Cordon (or uncordon) `node`; wait until the leader has it drained (or not)."""
        self.kube.patch("nodes", node, {"spec": {"unschedulable": on}})

        def drained():
            drains = self.inst.rpc("sched.resource-status").get("drain") or []
            return (node in {d["hostname"] for d in drains}) == on

        self.wait_for(drained, WAIT, what=f"the leader's drain of {node} {on}")


def group_record(got: dict[str, dict | str], shapes: dict[str, int]) -> list[list]:
    """A group's placement per pod shape (its index in the group's specs), as a sorted list:
    which pod of a shape gets which of its slots follows the pods' uids on 8aab13a
    (slot_assignment.py), random in the emulator, so only the slots each shape got are
    compared (an Indexed Job's pods take them in index order since issue 30)."""
    out: dict[int, list] = {}
    for name, where in got.items():
        out.setdefault(shapes[name], []).append(where)
    return [sorted(w, key=json.dumps) for _, w in sorted(out.items())]


def pod(name: str, spec: dict, labels: dict | None = None, **meta: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}, **meta}}


def pod_group(run: BinderRun, rng: random.Random, name: str) -> tuple[dict, list[str]]:
    """A group of 2-4 pods of one or two shapes (the group label and size); its record entry
    and its pods."""
    size = rng.randint(2, 4)
    specs = [pod_spec(rng, gpus_ok=False) for _ in range(rng.randint(1, 2))]
    labels = {GROUP_LABEL: name, SIZE_LABEL: str(size)}
    pods = {f"{name}-{i}": pod(f"{name}-{i}", specs[i % len(specs)], labels)
            for i in range(size)}
    got = run.place(pods)
    shapes = {f"{name}-{i}": i % len(specs) for i in range(size)}
    return {"group": name, "size": size, "specs": specs,
            "answer": group_record(got, shapes)}, list(pods)


def indexed_job(run: BinderRun, rng: random.Random, name: str) -> tuple[dict, list[str]]:
    """An Indexed Job of 2-3 pods (its pods made here as its controller would: the Job's
    labels, the completion index, the Job as controller); its record entry and its pods."""
    size = rng.randint(2, 3)
    spec = {**pod_spec(rng, gpus_ok=False), "restartPolicy": "Never"}
    job = run.kube.create("jobs.batch", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"completionMode": "Indexed", "completions": size, "parallelism": size,
                 "template": {"spec": spec}}}, "default")
    uid = job["metadata"]["uid"]
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
              "controller": True}]
    pods = {f"{name}-{i}": pod(
        f"{name}-{i}", spec, {"batch.kubernetes.io/job-name": name,
                              "batch.kubernetes.io/controller-uid": uid,
                              "batch.kubernetes.io/job-completion-index": str(i)},
        annotations={"batch.kubernetes.io/job-completion-index": str(i)},
        ownerReferences=owner) for i in range(size)}
    got = run.place(pods)
    return {"job": name, "size": size, "spec": spec,
            "answer": group_record(got, dict.fromkeys(pods, 0))}, list(pods)


def binder_stream(policy: str, seed: int, steps: int) -> list[dict]:
    """The record of one binder run under `policy`: every step's pods and where they went,
    finished pods, cordons."""
    rng = random.Random(f"{seed}:binder:{policy}")
    record: list[dict] = []
    bound: list[list[str]] = []  # pods placed together (a pod, or a group), still running
    cordoned: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="bench-placements-") as tmp:
        run = BinderRun(Path(tmp), policy)
        try:
            for step in range(steps):
                x = rng.random()
                if x < 0.5 or not bound:
                    name, spec = f"p{step}", pod_spec(rng)
                    got = run.place({name: pod(name, spec)})[name]
                    entry, names = {"pod": name, "spec": spec, "answer": got}, [name]
                elif x < 0.7:
                    make = pod_group if x < 0.62 else indexed_job
                    entry, names = make(run, rng, f"{'g' if x < 0.62 else 'j'}{step}")
                elif x < 0.9:
                    names = bound.pop(rng.randrange(len(bound)))
                    run.finish(names)
                    record.append({"finish": names})
                    continue
                else:
                    node = rng.choice([n[0] for n in BINDER_NODES])
                    run.cordon(node, node not in cordoned)
                    cordoned ^= {node}
                    record.append({"cordon" if node in cordoned else "uncordon": node})
                    continue
                record.append(entry)
                if all(isinstance(w, dict) for w in (
                        [entry["answer"]] if "pod" in entry else sum(entry["answer"], []))):
                    bound.append(names)
        finally:
            run.close()
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    svc = sub.add_parser("service", help="the scheduler service in process, every policy")
    svc.add_argument("--policy", action="append", choices=POLICIES,
                     help="only this policy (repeat for more; default: all)")
    svc.add_argument("--seed", type=int, default=SEED)
    svc.add_argument("--steps", type=int, default=100)
    bnd = sub.add_parser("binder", help="the binder against a real instance and the API "
                         "emulator, pods one at a time")
    bnd.add_argument("--policy", action="append", choices=POLICIES,
                     help="the binder's match policy (repeat for more; default: "
                     f"{' and '.join(BINDER_POLICIES)})")
    bnd.add_argument("--seed", type=int, default=SEED)
    bnd.add_argument("--steps", type=int, default=40)
    args = ap.parse_args(argv)
    if args.what == "service":
        sys.stdout.write(dump(service_record(args.policy or list(POLICIES), args.seed,
                                             args.steps)))
    else:
        logging.basicConfig(level=logging.ERROR)  # not the missing resource-list ConfigMap
        record = {"seed": args.seed, "steps": args.steps, "nodes": [
            dict(zip(("name", "cores", "gpus", "memory_gib", "labels", "taints"), n,
                     strict=True)) for n in BINDER_NODES],
            "policies": {p: binder_stream(p, args.seed, args.steps)
                         for p in args.policy or BINDER_POLICIES}}
        sys.stdout.write(dump(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
