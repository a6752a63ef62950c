"""Batched sched.alloc: answers without R on request, and a request the service fails on
mid-batch (the journal cannot be written) leaves every earlier answer standing."""

import errno

import pytest
from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf.rv1 import NodeResources, build_R
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.service.module import SchedService
from support.oracles import parse_idset
from support.sched_handle import SchedHandle as Handle

CORES = 4


def spec(cores, count=1):
    return build_jobspec([SlotKind(cores, 0, 0, count)], constraints={"hostlist": ["node[0-2]"]},
                         name=f"ns/pod/p{cores}-{count}")


def machine(n=3):
    return build_R([NodeResources(rank=i, hostname=f"node{i}", cores=list(range(CORES)))
                    for i in range(n)])


@pytest.fixture
def svc(tmp_path):
    s = SchedService(Handle(tmp_path, machine(), 3))
    yield s
    s.close()


def cores_held(answers):
    return sum(len(parse_idset(n["cores"])) for a in answers for n in a["nodes"])


def test_answers_without_R_on_request(svc):
    plain = svc.alloc({"jobspec": spec(1)})
    assert plain["R"]["execution"]["R_lite"]  # the default keeps R
    lean = svc.alloc({"jobspec": spec(1), "with_R": False})
    assert "R" not in lean and lean["nodes"] and lean["status"] == "ALLOCATED"
    out = svc.alloc({"requests": [{"jobspec": spec(1), "with_R": False},
                                  {"jobspec": spec(1), "with_R": "no"},
                                  {"jobspec": spec(1), "with_R": True}]})
    lean2, bad, full = out["answers"]
    assert "R" not in lean2 and "R" in full
    assert bad == {"errnum": errno.EINVAL, "errstr": "with_R: must be true or false"}
    for value in (0, None, "false", [False]):
        with pytest.raises(ServiceError) as info:
            svc.alloc({"jobspec": spec(1), "with_R": value})
        assert info.value.errnum == errno.EINVAL and "with_R" in info.value.errstr
    # nothing was allocated for a refused request
    assert len(svc.allocations) == 4


def test_a_failed_journal_write_mid_batch_keeps_the_answers_before_it(svc, tmp_path):
    record = svc.journal.record
    calls = []

    def failing(entry):
        calls.append(entry.id)
        if len(calls) == 2:
            raise OSError("disk full")
        record(entry)

    svc.journal.record = failing
    out = svc.alloc({"requests": [{"jobspec": spec(2)}, {"jobspec": spec(2)},
                                  {"jobspec": spec(2)}]})
    first, failed = out["answers"]  # the batch stops after the failure
    assert first["status"] == "ALLOCATED"
    assert failed["errnum"] == errno.EIO and "requests[1]" in failed["errstr"]
    assert "disk full" in failed["errstr"]
    # the failed one holds nothing (rolled back) and is not listed; the first is
    assert set(svc.allocations) == {first["id"]}
    svc.journal.record = record
    rest = svc.alloc({"jobspec": spec(1, 3 * CORES - 2), "with_R": False})
    assert cores_held([first, rest]) == 3 * CORES  # everything else was free
    # the first answer was journaled: a restarted leader holds it again, nothing else
    svc.close()
    again = SchedService(Handle(tmp_path, machine(), 3))
    try:
        assert set(again.allocations) == {first["id"], rest["id"]}
        with pytest.raises(ServiceError) as info:
            again.alloc({"jobspec": spec(1)})
        assert info.value.errnum == errno.EBUSY
    finally:
        again.close()


def test_a_failure_on_the_first_request_is_answered_too(svc):
    def failing(entry):
        raise OSError("read-only file system")

    svc.journal.record = failing
    out = svc.alloc({"requests": [{"jobspec": spec(1)}, {"jobspec": spec(1)}]})
    assert [a.get("errnum") for a in out["answers"]] == [errno.EIO]
    assert not svc.allocations
