"""Restarting the lead broker in scheduler-service tests."""

from __future__ import annotations

from fluxnode.testing.waiting import wait_for


def restart_leader(inst, nodes: int, timeout: float = 30.0) -> list[dict]:
    """Kill rank 0 and start it again; wait until its scheduler service has replayed the
    journal and sees all ``nodes`` ranks, then return ``sched.list``'s allocations."""
    inst.kill(0)
    inst.restart(0)

    def replayed():
        # every rank in the graph first, then the list: a list read before the last rank
        # joined shows its part still pending (the service grows the graph and holds the
        # pending parts in one step, under its lock)
        if len(inst.rpc("sched.resource-status")["nodes"]) != nodes:
            return None
        return inst.rpc("sched.list", {})["allocations"]

    return wait_for(replayed, timeout, what=f"restarted leader with {nodes} ranks")
