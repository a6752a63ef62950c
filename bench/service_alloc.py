"""The scheduler service's CPU per pod for a binder's requests, without RPC or a binder.

    .venv/bin/python bench/service_alloc.py [--nodes 5000] [--group 16] [--left-out 0]
        [--left-out-usable] [--policy first] [--form slots|jobspec] [--pods 4000]

Why: bench/binder.py measures the whole path on a shared 2-core machine, where the
service's share moves with the load; this one times only `SchedService.alloc` (batches
of 64, as the binder sends them) on simulated nodes of 8 cores and 64 GiB, in this
process (a broker handle of its own: no overlay, the journal in a temporary folder).
`--form slots` sends what the binder sends (slot kinds and the ranks it may use);
`--form jobspec` the same request as an RFC 14 jobspec with a hostlist constraint (what
`fluxnode alloc` sends). `--left-out N` leaves N nodes, spread over the ranks, out of
every request: NotReady or cordoned nodes, which the binder drains in the service (so
they are drained here first), or with `--left-out-usable` nodes the service may use but
the request may not (reserved for a blocked group, or outside a pod's node affinity),
which only a constraint keeps out. Prints CPU ms per pod placed.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from fluxnode.broker_conf import hostlist, idset
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.module import SchedService


class Handle:
    """What the service asks of its broker (modules.BrokerHandle), for one process."""

    rank = 0
    attrs: dict = {}

    def __init__(self, R: dict, size: int, statedir: Path | None = None):
        """`statedir`: where the journal goes (default: a new temporary folder, kept)."""
        self.R, self.size = R, size
        self.statedir = statedir or Path(tempfile.mkdtemp(prefix="bench-service-"))
        self.log = logging.getLogger("bench.service")

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--group", type=int, default=16, help="pods (1-core slots) a request")
    ap.add_argument("--left-out", type=int, default=0)
    ap.add_argument("--left-out-usable", action="store_true",
                    help="the left-out nodes are not drained in the service")
    ap.add_argument("--policy", default="first")
    ap.add_argument("--form", choices=("slots", "jobspec"), default="slots")
    ap.add_argument("--pods", type=int, default=4000)
    args = ap.parse_args()
    R = build_R([NodeResources(rank=i, hostname=f"sim{i}", cores=list(range(8)),
                               memory_mib=65536) for i in range(args.nodes)])
    svc = SchedService(Handle(R, args.nodes))
    step = args.nodes // args.left_out if args.left_out else 0
    usable = [i for i in range(args.nodes) if not step or i % step]
    if step and not args.left_out_usable:
        svc.drain({"targets": idset.encode(sorted(set(range(args.nodes)) - set(usable))),
                   "reason": "NotReady in Kubernetes", "source": "kubernetes"})
    if args.form == "slots":
        ask = {"slots": [SlotKind(1, 0, 0, args.group).to_wire()], "ranks": idset.encode(usable)}
    else:
        ask = {"jobspec": build_jobspec([SlotKind(1, 0, 0, args.group)], constraints={
            "hostlist": [hostlist.encode(f"sim{i}" for i in usable)]})}
    n = args.pods // args.group
    requests = [{**ask, "policy": args.policy, "with_R": False,
                 "labels": {"kind": "group", "group": f"g{i}",
                            "pods": [f"uid-{i}-{k}" for k in range(args.group)]}}
                for i in range(n)]
    t0 = time.process_time()
    for k in range(0, n, 64):
        answers = svc.alloc({"requests": requests[k:k + 64]})["answers"]
        assert all(a.get("status") == "ALLOCATED" for a in answers), answers[0]
    cpu = time.process_time() - t0
    print(f"{args.form}, policy {args.policy}, {args.nodes} nodes ({args.left_out} left out"
          f"{', usable' if args.left_out_usable else ', drained' if step else ''}), "
          f"groups of {args.group}: service {1000 * cpu / (n * args.group):.3f} ms CPU a pod",
          flush=True)
    svc.close()


if __name__ == "__main__":
    main()
