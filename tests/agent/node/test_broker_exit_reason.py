"""A broker that cannot start says why: /readyz and the BrokerExited Event carry its last
error line.

A real `fluxnode agent` against the Kubernetes API emulator runs a real leader broker whose
scheduler journal was replaced by garbage before it started (the fault is injected from
outside: bytes written over the file in the agent's state directory). The oracle is the
file's path and SQLite's own complaint, which only the broker's error line can carry.
"""

from __future__ import annotations

import hashlib

from support.kube_agents import AgentProcess, add_node

from fluxnode.testing.waiting import wait_for

JOURNAL = "sched-journal.sqlite"


def broker_exited_events(kube) -> list[dict]:
    events = kube.list("events.events.k8s.io", "default")
    return [e for e in events if e["reason"] == "BrokerExited"]


def test_damaged_journal_is_named_by_readyz_and_the_event_until_moved_aside(kube, tmp_path):
    add_node(kube, "w1")
    agent = AgentProcess(kube, "w1", tmp_path)
    journal = agent.state_dir / JOURNAL
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"not a journal\n" * 512)
    before = hashlib.sha256(journal.read_bytes()).hexdigest()
    agent.start()
    try:
        expected = f"broker exited with status 1: fluxnode-broker: module fluxnode.scheduler." \
                   f"service failed to load: {journal}: scheduler journal is damaged: file is " \
                   "not a database"

        def ready_text() -> str:
            try:
                return agent.http("/readyz")[1]
            except OSError:  # the health port is not written yet
                return ""

        wait_for(lambda: expected in ready_text(), timeout=30,
                 what="/readyz naming the journal")
        status, text = agent.http("/readyz")
        assert status == 503, (status, text)
        wait_for(lambda: broker_exited_events(kube), timeout=20, what="a BrokerExited Event")
        event = broker_exited_events(kube)[0]
        assert event["type"] == "Warning" and expected in event["note"], event["note"]
        assert hashlib.sha256(journal.read_bytes()).hexdigest() == before  # crash loop or not
        # What the operator does: move the damaged file aside. The next restart serves.
        journal.rename(journal.with_name(JOURNAL + ".damaged"))
        wait_for(lambda: agent.http("/readyz")[0] == 200, timeout=30,
                 what=f"ready once the journal is moved aside (agent log: {agent.log[-1500:]})")
        assert "rank 0" in agent.http("/readyz")[1]
    finally:
        agent.stop()
