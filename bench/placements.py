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
taints and tolerations, a cordoned node, GPU and memory requests, pod groups. It prints
pod -> node and the cores and GPUs the binding names (its ``fluxnode.io/`` annotations).

Only the APIs of commit 8aab13a (the last main before issue 35) and later are used, so the
same file runs on both; tests/data/placements/ holds the record made there.
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


class Handle:
    """What the service asks of its broker (agent/broker/modules.BrokerHandle), in process:
    no overlay, the journal in a temporary folder, every rank up."""

    rank = 0
    attrs: dict = {}

    def __init__(self, R: dict, size: int, statedir: Path):
        self.R, self.size, self.statedir = R, size, statedir
        self.log = logging.getLogger("bench.placements")

    def resources(self) -> dict:
        return self.R

    def down_ranks(self) -> list[int]:
        return []

    def expected_ranks(self) -> list[int]:
        return list(range(self.size))

    def register(self, topic, handler) -> None:
        pass

    def on_resources_changed(self, callback) -> None:
        pass


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    svc = sub.add_parser("service", help="the scheduler service in process, every policy")
    svc.add_argument("--policy", action="append", choices=POLICIES,
                     help="only this policy (repeat for more; default: all)")
    svc.add_argument("--seed", type=int, default=SEED)
    svc.add_argument("--steps", type=int, default=100)
    args = ap.parse_args(argv)
    if args.what == "service":
        sys.stdout.write(dump(service_record(args.policy or list(POLICIES), args.seed,
                                             args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
