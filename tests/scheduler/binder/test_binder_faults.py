"""The binder under faults: the leader killed (-9) and restarted, with or without its journal.

Real brokers, the project's API emulator and the real kubernetes client
(support.binder_cluster). The oracles come from outside the binder: the pods'
Binding annotations (`assert_no_overcommit`), the leader's `sched.list`, and the
binder's own liveness probe over HTTP.
"""

import os
import signal
import time
import urllib.request

from support.binder_cluster import BinderCluster
from support.oracles import parse_idset

from fluxnode.testing.waiting import wait_for


def healthz(binder) -> bytes:
    url = f"http://127.0.0.1:{binder.health.port}/healthz"
    try:
        return urllib.request.urlopen(url, timeout=5).read()
    except urllib.error.HTTPError as exc:
        return exc.read()


def pod_cores(cluster, name: str) -> set[tuple[int, int]]:
    ann = cluster.get_pod(name)["metadata"]["annotations"]
    rank = int(ann["fluxnode.io/rank"])
    return {(rank, c) for c in parse_idset(ann["fluxnode.io/cores"])}


def assert_leader_holds_exactly(cluster, running: list[str]) -> None:
    """The leader's group allocations hold exactly the cores the running pods were given."""
    held = cluster.held_by_leader()
    given: set[tuple[int, int]] = set()
    for name in running:
        uid = cluster.get_pod(name)["metadata"]["uid"]
        cores = pod_cores(cluster, name)
        assert cores <= held.get(uid, set()), (
            f"{name} runs on cores {sorted(cores)} but the leader holds {sorted(held.get(uid, []))}"
            " for it"
        )
        given |= cores
    all_held = set().union(*held.values()) if held else set()
    assert all_held == given, f"leader holds {sorted(all_held - given)} for no running pod"


def test_leader_kill_9_and_restart_the_loop_lives_and_binds_again(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(rpc_timeout=2.0)
        c.create_pod("a-0")
        c.create_pod("a-1")
        c.wait_bound(["a-0", "a-1"])
        c.kill_leader()
        # every resync (1 s here) asks the leader for capacity: it cannot answer now
        wait_for(lambda: not b.ctx.sched_ok or not b._thread.is_alive(), 20,
                 what="the binder to notice the leader is gone")
        # a pod ends while the leader is down (its cancel cannot be delivered now) and new
        # pods arrive; they need exactly the core a-0 frees
        c.finish("a-0")
        for i in range(3):
            c.create_pod(f"b-{i}")
        stamp = b.last_loop
        wait_for(lambda: b.last_loop > stamp + 2.0 or not b._thread.is_alive(), 20,
                 what="the loop to go round with the leader down")
        assert b._thread.is_alive(), "the binder's scheduling loop died while the leader was down"
        assert b._live() is None
        assert healthz(b) == b"ok\n"
        c.restart_leader()
        c.wait_bound([f"b-{i}" for i in range(3)], timeout=60)
        c.assert_no_overcommit()
        wait_for(lambda: not [a for a in c.group_allocations()
                              if c.get_pod("a-0")["metadata"]["uid"] in a["labels"]["pods"]],
                 20, what="a-0's allocation to be cancelled")
        assert_leader_holds_exactly(c, ["a-1", "b-0", "b-1", "b-2"])
        assert b._thread.is_alive() and healthz(b) == b"ok\n"


def test_an_answer_lost_with_the_leader_is_not_waited_for(tmp_path):
    """The leader dies while a request of the binder is on the wire: ZeroMQ reconnects to the
    restarted leader by itself, but that answer never comes. The binder must not sit out its
    whole rpc timeout (here 60 s) before scheduling again."""
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(rpc_timeout=60.0, resync=0.3)
        c.create_pod("a-0")
        c.wait_bound(["a-0"])
        os.kill(c.inst.pids[0], signal.SIGSTOP)  # the next request waits for an answer
        wait_for(lambda: time.monotonic() - b.last_loop > 1.0, 20,
                 what="the binder waiting on the stopped leader")
        c.kill_leader()
        c.restart_leader()
        c.create_pod("b-0")
        c.wait_bound(["b-0"], timeout=20)
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, ["a-0", "b-0"])


def bind_then_free_the_low_cores(c) -> list[str]:
    """Four one-core pods on a 4-core node, the two on the lowest cores finished: the running
    ones hold cores a fresh leader would hand out last (a first-fit count would miss them)."""
    names = [f"a-{i}" for i in range(4)]
    for name in names:
        c.create_pod(name)
        c.wait_bound([name])  # one by one: a-i gets core i
    low = sorted(names, key=lambda n: min(c for _r, c in pod_cores(c, n)))[:2]
    for name in low:
        c.finish(name)
    wait_for(lambda: len(c.group_allocations()) == 2, 20, what="the finished pods' cores freed")
    return [n for n in names if n not in low]


def test_leader_back_without_its_journal_the_running_pods_are_adopted_first(tmp_path):
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(rpc_timeout=2.0)
        running = bind_then_free_the_low_cores(c)
        moved = c.kill_leader(lose_journal=True)
        wait_for(lambda: not b.ctx.sched_ok, 20, what="the binder to notice the leader is gone")
        c.restart_leader()
        # the binder may re-sync (adopt its running pods) before the leader answers us:
        # what the journal would have replayed carries the pods' own policy, never "adopt"
        kept = [a for a in c.group_allocations() if a["policy"] != "adopt"]
        assert not kept, f"the journal {moved} was not lost: {kept}"
        new = ["b-0", "b-1"]
        for name in new:
            c.create_pod(name)
        c.wait_bound(new, timeout=60)
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, running + new)
        assert b.reconciler.adopted == 2
        c.create_pod("c-0")  # the node is full: it waits, it is not put on an adopted core
        c.wait_condition("c-0", "WaitingForResources")
        assert c.node_of("c-0") is None


def test_leader_back_without_its_journal_unnoticed_the_first_alloc_gives_it_away(tmp_path):
    """No resync and nothing to do while the leader is away: the binder learns that it lost
    its journal only from the first sched.alloc answer, which names cores our running pods
    use. Nothing may be bound on them."""
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(rpc_timeout=2.0, resync=3600.0)
        running = bind_then_free_the_low_cores(c)
        c.kill_leader(lose_journal=True)
        c.restart_leader()
        new = ["b-0", "b-1"]
        for name in new:
            c.create_pod(name)
        c.wait_bound(new, timeout=60)
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, running + new)
        assert b.reconciler.adopted == 2


def test_an_allocation_the_leader_dropped_is_adopted_again_on_the_next_resync(tmp_path):
    """The leader answers all along but no longer holds a running pod's cores (a replay
    that dropped an allocation, an operator's cancel): the resync tick sees its allocated R
    does not cover the pod and re-syncs the leader before placing more."""
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder()
        c.create_pod("a-0")
        c.wait_bound(["a-0"])
        alloc_id = int(c.get_pod("a-0")["metadata"]["annotations"]["fluxnode.io/allocation"])
        c.inst.rpc("sched.cancel", {"id": alloc_id})
        assert not c.group_allocations()
        wait_for(lambda: b.reconciler.adopted == 1, 20, what="a-0 adopted again")
        assert_leader_holds_exactly(c, ["a-0"])
        for i in range(3):
            c.create_pod(f"b-{i}")
        c.wait_bound([f"b-{i}" for i in range(3)])
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, ["a-0", "b-0", "b-1", "b-2"])


def test_api_server_unreachable_the_loop_lives_and_catches_up(tmp_path):
    """The API server goes away (open connections reset, new ones refused) while pods end and
    new ones arrive; the binder's writes and watches fail meanwhile. When it is back, the
    binder frees what ended, binds the new pods, and nothing overcommits."""
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(through_outage=True)
        c.create_pod("a-0")
        c.create_pod("a-1")
        c.wait_bound(["a-0", "a-1"])
        c.outage.cut()
        # the emulator itself still answers the test: these changes wait for the binder
        c.finish("a-0")
        for i in range(3):
            c.create_pod(f"b-{i}")
        stamp = b.last_loop
        wait_for(lambda: b.last_loop > stamp + 3.0 or not b._thread.is_alive(), 20,
                 what="the loop to go round with the API server away")
        assert b._thread.is_alive() and b._live() is None and healthz(b) == b"ok\n"
        c.outage.restore()
        c.wait_bound([f"b-{i}" for i in range(3)], timeout=60)
        c.assert_no_overcommit()
        wait_for(lambda: len(c.group_allocations()) == 4, 20, what="a-0's allocation cancelled")
        assert_leader_holds_exactly(c, ["a-1", "b-0", "b-1", "b-2"])


def test_api_server_gone_mid_burst_every_pod_bound_once(tmp_path):
    """The API server is cut while a burst is being bound (bindings in flight fail with
    no answer: written or not), then restored: every pod ends bound, each on its own
    cores, and the leader holds exactly what runs."""
    with BinderCluster(tmp_path, {"node0": 16, "node1": 16}) as c:
        b = c.start_binder(through_outage=True, bind_workers=2)
        names = [f"p-{i}" for i in range(24)]
        for name in names:
            c.create_pod(name)
        wait_for(lambda: b.ctx.metrics.bindings.labels("bound")._value.get() >= 2, 20,
                 what="the burst to start binding")
        c.outage.cut()
        failed = b.ctx.metrics.bindings.labels("failed")._value.get()
        wait_for(lambda: b.ctx.metrics.bindings.labels("failed")._value.get() > failed
                 or all(c.node_of(n) for n in names), 20, what="a binding to fail")
        c.outage.restore()
        c.wait_bound(names, timeout=60)
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, names)
        assert b._thread.is_alive() and healthz(b) == b"ok\n"


def test_a_pod_condition_the_api_server_refused_is_written_again(tmp_path):
    """Writing PodScheduled=False fails (here a 403; a 5xx or no answer alike): the binder
    must not remember it as said, but write it once the API server takes it."""
    with BinderCluster(tmp_path, {"node0": 1}) as c:
        c.start_binder()
        c.create_pod("a-0")
        c.wait_bound(["a-0"])
        rule = c.kube.forbid("patch", "pods/status")
        c.create_pod("waits")
        wait_for(lambda: any(r.verb == "patch" and r.subresource == "status"
                             and r.name == "waits" for r in list(c.kube.requests)),
                 20, what="the binder to try writing the condition")
        c.kube.allow(rule)
        c.wait_condition("waits", "WaitingForResources")


def test_a_new_binder_and_a_new_leader_adopt_from_the_pods_alone(tmp_path):
    """Both lose their memory: the binder is replaced while the leader is down, and the leader
    comes back without its journal. What runs is known only from the pods' annotations."""
    with BinderCluster(tmp_path, {"node0": 4}) as c:
        b = c.start_binder(rpc_timeout=2.0)
        running = bind_then_free_the_low_cores(c)
        c.kill_leader(lose_journal=True)
        b = c.replace_binder(b)
        c.restart_leader()
        wait_for(lambda: b.reconciler.adopted == 2, 30, what="the running pods adopted")
        assert_leader_holds_exactly(c, running)
        new = ["b-0", "b-1"]
        for name in new:
            c.create_pod(name)
        c.wait_bound(new, timeout=60)
        c.assert_no_overcommit()
        assert_leader_holds_exactly(c, running + new)
