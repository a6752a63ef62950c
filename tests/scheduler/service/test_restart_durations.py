"""Walltimes survive a leader restart: an allocation asked with a duration is journaled with
its span, so after rank 0 is killed with SIGKILL and started again a reservation behind it
gets the same start as before (issue 30).

The oracle is the test's own clock: the allocation began between the two readings taken
around its request, so the reservation's start is that second plus the duration asked; no
value the service computes is trusted for it.
"""

import time

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

NODES, CORES = 2, 2
WALLTIME = 3600  # seconds the first allocation is asked for


def reserve_everything(inst: Instance) -> dict:
    """Every core for a minute, reserved when it cannot start now (the binder's head ask);
    the reservation is cancelled again, as the binder does at each pass."""
    answer = inst.rpc("sched.alloc", {"slots": [{"cores": CORES, "count": NODES}],
                                      "op": "allocate_orelse_reserve", "duration": 60,
                                      "with_R": False})
    inst.rpc("sched.cancel", {"id": answer["id"]})
    return answer


def test_a_reservation_keeps_its_start_across_a_leader_kill_9(tmp_path):
    with Instance(NODES, tmp_path, modules=None,
                  tbon={"torpid_min": "0.2s", "torpid_max": "1.5s"},
                  resources={f"node{i}": {"cores": CORES} for i in range(NODES)}) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == NODES, 30,
                 what=f"{NODES} ranks in the graph")
        before = int(time.time())
        first = inst.rpc("sched.alloc", {"slots": [{"cores": CORES, "count": 1}],
                                         "duration": WALLTIME})
        after = int(time.time())
        assert first["status"] == "ALLOCATED"
        head = reserve_everything(inst)
        assert head["status"] == "RESERVED"
        assert before + WALLTIME <= head["start"] <= after + WALLTIME, (before, head, after)

        inst.kill(0)
        inst.restart(0)
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == NODES, 30,
                 what=f"the restarted leader's graph with {NODES} ranks")
        [kept] = inst.rpc("sched.list")["allocations"]
        assert (kept["id"], kept["nodes"], kept["restored"]) == (first["id"], first["nodes"],
                                                                 True)
        again = reserve_everything(inst)
        assert (again["status"], again["start"]) == ("RESERVED", head["start"])
