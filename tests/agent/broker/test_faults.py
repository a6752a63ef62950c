"""Health under failure: kill -9 of an interior broker, lost/degraded states, rejoin."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fluxnode.agent.broker.client import RPCError

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

MODULE_ENV = {
    "PYTHONPATH": str(Path(__file__).parent / "modules")
    + os.pathsep
    + os.environ.get("PYTHONPATH", "")
}
FAST_TBON = {"torpid_min": "0.2s", "torpid_max": "1.5s"}
TORPID_MAX = 1.5
# One heartbeat, as README.md documents it: children send keepalives every
# min(torpid_min, torpid_max / 4), and a kill -9 is seen within torpid_max.
HEARTBEAT = min(0.2, TORPID_MAX / 4)


def test_killed_interior_broker_is_lost_and_its_subtree_rejoins_after_restart(tmp_path):
    # kary:2 with 8 brokers: 0 -> 1 -> 3 -> 7; kill rank 3 (interior, child 7)
    with Instance(8, tmp_path, tbon=FAST_TBON, modules="overlay_testmod", env=MODULE_ENV) as inst:
        killed_at = time.monotonic()
        inst.kill(3)
        # A generous wait for a loaded machine, but the detection itself must be on time: the
        # time from the kill to the first answer saying "lost" (polled every 20 ms; an upper
        # bound on when rank 1 decided) is at most torpid_max plus one heartbeat.
        wait_for(
            lambda: inst.child_status(1, 3) == "lost", timeout=10, what="rank 1 to see rank 3 lost"
        )
        detected = time.monotonic() - killed_at
        assert detected <= TORPID_MAX + HEARTBEAT, (
            f"rank 3 seen lost {detected:.2f}s after the kill: later than torpid_max {TORPID_MAX}s"
            f" + one heartbeat {HEARTBEAT}s")
        assert inst.health(1)["status"] == "degraded"
        wait_for(lambda: inst.health(0)["status"] == "degraded", timeout=10, what="rank 0 degraded")
        wait_for(
            lambda: inst.online() == "0-2,4-6",
            timeout=10,
            what="ranks 3 and 7 offline at the leader",
        )
        assert "node3 (rank 3) has been unresponsive" in inst.log(1)
        env = {**os.environ, "FLUXNODE_URI": inst.uri}
        out = subprocess.run(
            [sys.executable, "-m", "fluxnode", "overlay", "status", "-t", "10"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.splitlines()
        assert out == [
            "0 node0: degraded",
            "├─ 1 node1: degraded",
            "│  ├─ 3 node3: lost",
            "│  │  └─ 7 node7: lost",
            "│  └─ 4 node4: full",
            "└─ 2 node2: full",
            "   ├─ 5 node5: full",
            "   └─ 6 node6: full",
        ]
        down = subprocess.run(
            [sys.executable, "-m", "fluxnode", "overlay", "status", "-t", "10", "--down"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.splitlines()
        assert down == [
            "0 node0: degraded",
            "└─ 1 node1: degraded",
            "   └─ 3 node3: lost",
            "      └─ 7 node7: lost",
        ]
        errs = subprocess.run(
            [sys.executable, "-m", "fluxnode", "overlay", "errors", "-t", "10"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.splitlines()
        assert errs == ["node3: lost connection", "node7: lost parent"]
        # requests to the lost subtree fail fast instead of hanging
        with pytest.raises(RPCError) as exc:
            inst.rpc("broker.ping", {}, nodeid=7, timeout=5)
        assert exc.value.errnum == errno.EHOSTUNREACH
        assert "node3 (rank 3) is lost" in exc.value.errstr
        listing = inst.rpc("resource.list")
        assert sorted(e["rank"] for e in listing["down"]) == [3, 7]
        # the leader's modules are told (on_resources_changed) and see down_ranks()
        wait_for(
            lambda: inst.rpc("testmod.info")["changes"][-1] == {"nnodes": 8, "down": [3, 7]},
            timeout=5,
            what="module notified of ranks 3 and 7 down",
        )
        assert inst.rpc("testmod.info")["down"] == [3, 7]

        inst.restart(3)
        wait_for(lambda: inst.online() == "0-7", timeout=20, what="ranks 3 and 7 back online")
        wait_for(lambda: inst.health(0)["status"] == "full", timeout=10, what="rank 0 full again")
        assert inst.child_status(3, 7) == "full"
        wait_for(
            lambda: inst.rpc("testmod.info")["changes"][-1] == {"nnodes": 8, "down": []},
            timeout=5,
            what="module notified of the rejoin",
        )
        assert inst.rpc("broker.ping", {}, nodeid=7)["route"].endswith("!0!1!3!7")
        # the other brokers were never restarted
        assert all(
            inst.rpc("attr.get", {"name": "broker.pid"}, nodeid=r)["value"] == str(inst.pids[r])
            for r in (0, 1, 7)
        )


def test_cleanly_stopped_leaf_is_offline_and_parent_partial(tmp_path):
    with Instance(4, tmp_path, tbon=FAST_TBON) as inst:
        inst.kill(3, signal.SIGTERM)  # clean shutdown: says goodbye to its parent
        wait_for(
            lambda: inst.child_status(1, 3) == "offline",
            timeout=10,
            what="rank 3 offline at rank 1",
        )
        assert inst.health(1)["status"] == "partial"
        wait_for(lambda: inst.health(0)["status"] == "partial", timeout=10, what="rank 0 partial")
        inst.restart(3)
        wait_for(lambda: inst.health(0)["status"] == "full", timeout=20, what="rank 0 full again")


def test_parent_restart_children_reconnect(tmp_path):
    with Instance(4, tmp_path, tbon=FAST_TBON) as inst:
        inst.kill(1)  # rank 1 has child 3
        wait_for(lambda: inst.online() == "0,2", timeout=10, what="leader sees 1 and 3 gone")
        inst.restart(1)
        wait_for(
            lambda: inst.online() == "0-3", timeout=20, what="rank 3 re-hellos to the new rank 1"
        )
        assert inst.rpc("broker.ping", {}, nodeid=3)["route"].endswith("!0!1!3")
