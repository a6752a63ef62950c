"""Hostile sched.* requests through a real leader (issue 11): each gets an errno and a
message naming what is wrong, and the leader goes on answering `broker.ping` meanwhile.

Before the fix: ``[`` x 30000 killed the leader (SIGSEGV), an alias bomb froze it 13.7 s,
``sched.cancel {"ranks": "0-16777215"}`` 14 s, a ``ranks`` constraint 7 s; ``.inf``
durations, scalar ``system`` and lone surrogates were internal errors.

Ping bound: the issue's goal is 50 ms p99 on a quiet machine; these tests run on 2 shared
cores beside other suites, so they assert the worst ping under 1 s: ten times the goal
plus scheduling noise, and still 7-14x below what each input cost before.
"""

from __future__ import annotations

import errno

import pytest
import yaml
from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec

from fluxnode.testing.instance import Instance
from fluxnode.testing.ping_probe import PingProbe
from fluxnode.testing.waiting import wait_for

PING_BOUND = 1.0
RESOURCES = {f"node{i}": {"cores": 4, "memory_mib": 1024} for i in range(2)}


def good() -> dict:
    return build_jobspec([SlotKind(1, 0, 0, 1)])


def edit_core(**changes) -> dict:
    spec = good()
    core = spec["resources"][0]["with"][0]
    assert core["type"] == "core"
    core.update(changes)
    return spec


def alias_bomb() -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def with_system(system) -> str:
    spec = good()
    spec["attributes"] = {"system": system}
    return yaml.safe_dump(spec)


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    with Instance(2, tmp_path_factory.mktemp("hostile"), modules=None,
                  resources=RESOURCES) as inst:
        wait_for(lambda: len(inst.rpc("sched.resource-status")["nodes"]) == 2, 20,
                 what="2 ranks in the graph")
        yield inst


def hostile(inst, topic: str, payload: dict) -> tuple[int, str, PingProbe]:
    """Send `payload` while pinging; (errnum, errstr, probe). errnum 0 for success."""
    with PingProbe(inst.uri) as probe, Client.connect(inst.uri, timeout=60) as c:
        wait_for(lambda: len(probe.latencies) >= 3, 10, what="pings before")
        before = len(probe.latencies)
        msg = c.recv(c.send(topic, payload), timeout=60)
        wait_for(lambda: len(probe.latencies) >= before + 3, 10, what="pings after")
    assert not probe.errors, probe.errors
    assert probe.worst < PING_BOUND, f"ping took {probe.worst:.3f}s during {topic}"
    return msg.errnum, msg.errstr or "", probe


CASES = [
    ("deep-brackets", "[" * 30000 + "]" * 30000, errno.E2BIG,
     "jobspec: jobspec nests too deeply: more than 64"),
    ("alias-bomb", alias_bomb(), errno.E2BIG, "jobspec has more than 4096 nodes"),
    ("inf-duration", with_system({"duration": float("inf")}), errno.EINVAL,
     "attributes.system.duration: duration '.inf' is not a finite number of seconds"),
    ("system-1", with_system(1), errno.EINVAL, '"system" in "attributes" is not a mapping'),
    ("system-1e9", with_system("1e9"), errno.EINVAL, '"system" in "attributes" is not a mapping'),
    ("surrogate", yaml.safe_dump(good()).replace("pod", "\ud800"), errno.EINVAL,
     "jobspec is not valid Unicode text: surrogates not allowed"),
    ("unknown-type", edit_core(type="fpga"), errno.ENODEV,
     "unsatisfiable: resources[0].with[0]: no resource of type 'fpga' in this instance"),
    ("count-0", edit_core(count=0), errno.ENODEV,
     "unsatisfiable: resources[0].with[0].count: asks for 0 of type 'core'; a count must be "
     "at least 1"),
    ("too-many", edit_core(count=99), errno.ENODEV,
     "unsatisfiable: asks for 99 of type 'core' in all; this instance has 8"),
    ("negative", edit_core(count=-1), errno.EINVAL,
     "resources[0].with[0].count: bad conversion ('-1' is not an integer from 0 to 4294967295)"),
]


@pytest.mark.parametrize(("jobspec", "want_errno", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_hostile_jobspec_is_an_error_and_the_leader_serves_on(inst, jobspec, want_errno, want):
    errnum, errstr, _ = hostile(inst, "sched.alloc", {"jobspec": jobspec})
    assert (errnum, errstr) == (want_errno, errstr) and want in errstr, errstr
    # the leader is the same process and still allocates
    a = inst.rpc("sched.alloc", {"jobspec": good()})
    inst.rpc("sched.cancel", {"id": a["id"]})


def test_huge_rank_constraint_is_quick_and_means_every_rank(inst):
    spec = good()
    spec["attributes"]["system"]["constraints"] = {"ranks": ["0-16777215"]}
    errnum, errstr, _ = hostile(inst, "sched.alloc", {"jobspec": spec})
    assert errnum == 0, errstr
    a = inst.rpc("sched.list", {})["allocations"][-1]
    inst.rpc("sched.cancel", {"id": a["id"]})


def test_huge_cancel_ranks_is_refused_before_expanding(inst):
    a = inst.rpc("sched.alloc", {"jobspec": build_jobspec([SlotKind(4, 0, 0, 2)])})
    try:
        errnum, errstr, _ = hostile(inst, "sched.cancel", {"id": a["id"], "ranks": "0-16777215"})
        assert errnum == errno.EINVAL
        assert "holds 16777216 ids, which exceeds 2" in errstr, errstr
        assert f"allocation {a['id']} holds 2 ranks: 0-1" in errstr
        with pytest.raises(RPCError) as exc:
            inst.rpc("sched.cancel", {"id": a["id"], "ranks": ["0"]})
        assert exc.value.errnum == errno.EINVAL and "must be an idset string" in exc.value.errstr
    finally:
        inst.rpc("sched.cancel", {"id": a["id"]})
