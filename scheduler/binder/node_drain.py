"""A cordon is a drain: the binder keeps the leader's Kubernetes drains equal to the cordoned
nodes.

`kubectl cordon` (Node ``spec.unschedulable``) means "place nothing new here, leave what
runs": Flux's drain. The node keeps its broker and rank (the agent no longer removes it);
the binder drains it in the scheduler service (``sched.drain`` with source "kubernetes"),
so the service itself refuses new placements there, whoever asks (the binder,
`fluxnode alloc`), and `fluxnode resource status` shows it draining or drained. Uncordon
undrains it (``sched.undrain`` with that source), never lifting an operator's own drain.

Level-triggered, as a controller: the leader's drains with source "kubernetes" (from
``sched.resource-status``, read on every resync and reconcile) are compared with the
cordoned nodes the leader knows, and only the difference is sent. A new leader (rank 0
moved, journal lost) therefore gets its drains back from the Nodes within one resync.
"""

from __future__ import annotations

import logging

from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import hostlist

log = logging.getLogger("fluxnode.binder.drain")

SOURCE = "kubernetes"
REASON = "cordoned in Kubernetes (spec.unschedulable)"


class CordonDrains:
    def __init__(self) -> None:
        self.drained: set[str] | None = None  # the leader's Kubernetes drains; None: not read
        self.known: set[str] = set()  # hostnames in the leader's graph (up or down)

    def observe(self, status: dict) -> None:
        """What the leader holds, from a ``sched.resource-status`` answer."""
        self.known = {n["hostname"] for n in status.get("nodes") or [] if "hostname" in n}
        self.drained = {
            d["hostname"]
            for d in status.get("drain") or []
            if isinstance(d, dict) and d.get("source") == SOURCE and "hostname" in d
        }

    def sync(self, sched, cordoned: set[str]) -> None:
        """Drain the cordoned nodes the leader knows, undrain the ones no longer cordoned.
        A refused call is logged and retried after the next read of the leader's state;
        an unreachable leader (SchedUnavailable) goes up to the loop like any other call."""
        if self.drained is None:
            return
        add = sorted((cordoned & self.known) - self.drained)
        lift = sorted((self.drained - cordoned) & self.known)
        try:
            if add:
                sched.rpc("sched.drain", {"targets": hostlist.encode(add), "reason": REASON,
                                          "mode": "update", "source": SOURCE})
                log.info("drained cordoned node(s) %s", hostlist.encode(add))
                self.drained |= set(add)
            if lift:
                sched.rpc("sched.undrain", {"targets": hostlist.encode(lift), "source": SOURCE,
                                            "mode": "force"})
                log.info("undrained uncordoned node(s) %s", hostlist.encode(lift))
                self.drained -= set(lift)
        except RPCError as exc:
            log.warning("cordon drains not applied (%s); retried after the next resync",
                        exc.errstr)
            self.drained = None
