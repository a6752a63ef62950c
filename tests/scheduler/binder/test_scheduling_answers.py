"""How the scheduling cycle reads a sched.alloc refusal: the service failing (EIO: e.g. its
journal could not be written, answered for one request of a batch) is a wait and a retry,
never `Unschedulable`; unsatisfiable and invalid requests are."""

import errno
from concurrent.futures import ThreadPoolExecutor

import pytest
from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.binder.binding_cycle import BindingCycle
from fluxnode.scheduler.binder.cluster_state import ClusterState
from fluxnode.scheduler.binder.config import BinderConfig
from fluxnode.scheduler.binder.context import BinderContext
from fluxnode.scheduler.binder.metrics import BinderMetrics
from fluxnode.scheduler.binder.queue import Reservations
from fluxnode.scheduler.binder.scheduling_cycle import Attempt, SchedulingCycle
from fluxnode.scheduler.jobspec.builder import SlotKind


class Writer:
    def __init__(self):
        self.reports = []

    def not_scheduled(self, pod, reason, message, event=True):
        self.reports.append((pod.name, reason, message))


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "fluxnode", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Pending"}}


@pytest.fixture
def cycle():
    pool = ThreadPoolExecutor(1)
    ctx = BinderContext(config=BinderConfig(http_port=None), owner="binder:fluxnode",
                        state=ClusterState(), sched=None, writer=Writer(), pool=pool,
                        metrics=BinderMetrics(), reservations=Reservations(1))
    ctx.state.apply_pod("ADDED", pod("p"))
    yield SchedulingCycle(ctx, BindingCycle(ctx, None))
    pool.shutdown(wait=True)


def attempt(cycle):
    group = next(iter(cycle.ctx.state.groups.values()))
    pods = list(group.pending.values())
    return Attempt(group, pods, {p.uid: SlotKind(1) for p in pods}, [], {})


@pytest.mark.parametrize("errnum,reason,kind", [
    (errno.EIO, "WaitingForResources", "busy"),
    (errno.EPROTO, "WaitingForResources", "busy"),
    (errno.EBUSY, "WaitingForResources", "busy"),
    (errno.ENODEV, "Unschedulable", "unschedulable"),
    (errno.EINVAL, "Unschedulable", "unschedulable"),
])
def test_only_the_services_refusals_make_a_group_unschedulable(cycle, errnum, reason, kind):
    a = attempt(cycle)
    binds = []
    out = cycle._finish(a, RPCError(errnum, f"requests[0]: errno {errnum}"), set(), binds)
    assert out == kind and not binds
    assert cycle.ctx.reported[a.pods[0].uid][0] == reason
    assert bool(a.group.unsatisfiable) == (kind == "unschedulable")
