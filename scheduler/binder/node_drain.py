"""A node Kubernetes will not schedule on is a drain: the binder keeps the leader's
Kubernetes drains equal to the cordoned and NotReady nodes.

`kubectl cordon` (Node ``spec.unschedulable``) means "place nothing new here, leave what
runs": Flux's drain. A NotReady node means the same to Kubernetes: its node lifecycle
controller taints it ``node.kubernetes.io/not-ready:NoSchedule``, so nothing new lands
there while what runs stays until the NoExecute eviction. Either node keeps its broker
and rank (the agent no longer removes it); the binder drains it in the scheduler service
(``sched.drain`` with source "kubernetes" and a reason naming which it is), so the service
itself refuses new placements there, whoever asks (the binder, `fluxnode alloc`), and
`fluxnode resource status` shows it draining or drained. Uncordon, or the node Ready
again, undrains it (``sched.undrain`` with that source), never lifting an operator's own
drain.

The drains are also what keeps the binder's requests off the constrained match: a
request's ``ranks`` leave out the nodes Kubernetes will not schedule on, and when every
rank they leave out is drained or down the service needs no constraint and matches on the
whole graph (``LiveGraph._exclusion``).

Level-triggered, as a controller: the leader's drains with source "kubernetes" (from
``sched.resource-status``, read on every resync and reconcile) are compared with the
nodes Kubernetes will not schedule on that the leader knows, and only the difference is
sent. A new leader (rank 0 moved, journal lost) therefore gets its drains back from the
Nodes within one resync.
"""

from __future__ import annotations

import logging

from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import hostlist

log = logging.getLogger("fluxnode.binder.drain")

SOURCE = "kubernetes"
# why Kubernetes will not schedule on a node (cluster_state.node_info's reason) -> the
# drain's reason in the leader
REASONS = {
    "cordoned": "cordoned in Kubernetes (spec.unschedulable)",
    "NotReady": "NotReady in Kubernetes (node.kubernetes.io/not-ready taint)",
}


class NodeDrains:
    def __init__(self) -> None:
        # the leader's Kubernetes drains, hostname -> reason; None: not read (or a call
        # failed since)
        self.drained: dict[str, str] | None = None
        self.known: set[str] = set()  # hostnames in the leader's graph (up or down)

    def observe(self, status: dict) -> None:
        """What the leader holds, from a ``sched.resource-status`` answer (its nodes as the
        last answer that listed them said: one asked with ``nodes_since`` may not)."""
        if "nodes" in status:
            self.known = {n["hostname"] for n in status["nodes"] or [] if "hostname" in n}
        self.drained = {
            d["hostname"]: d.get("reason") or ""
            for d in status.get("drain") or []
            if isinstance(d, dict) and d.get("source") == SOURCE and "hostname" in d
        }

    def sync(self, sched, unschedulable: dict[str, str]) -> None:
        """Drain the nodes Kubernetes will not schedule on (hostname -> why: "cordoned" or
        "NotReady") that the leader knows, with the reason of each, and undrain the others.
        A refused call is logged and retried after the next read of the leader's state; an
        unreachable leader (SchedUnavailable) goes up to the loop like any other call."""
        if self.drained is None:
            return
        want = {h: REASONS[why] for h, why in unschedulable.items() if h in self.known}
        # new drains ("update": a node an operator drained keeps the operator's drain) and
        # ours whose reason changed ("overwrite": already ours)
        todo: dict[tuple[str, str], list[str]] = {}
        for host, reason in sorted(want.items()):
            held = self.drained.get(host)
            if held != reason:
                todo.setdefault((reason, "update" if held is None else "overwrite"),
                                []).append(host)
        lift = sorted((set(self.drained) - set(want)) & self.known)
        try:
            for (reason, mode), hosts in sorted(todo.items()):
                sched.rpc("sched.drain", {"targets": hostlist.encode(hosts), "reason": reason,
                                          "mode": mode, "source": SOURCE})
                log.info("drained node(s) %s: %s", hostlist.encode(hosts), reason)
                self.drained.update(dict.fromkeys(hosts, reason))
            if lift:
                sched.rpc("sched.undrain", {"targets": hostlist.encode(lift), "source": SOURCE,
                                            "mode": "force"})
                log.info("undrained node(s) %s: schedulable in Kubernetes again",
                         hostlist.encode(lift))
                for host in lift:
                    del self.drained[host]
        except RPCError as exc:
            log.warning("node drains not applied (%s); retried after the next resync",
                        exc.errstr)
            self.drained = None
