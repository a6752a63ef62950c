"""A damaged scheduler journal stops the leader loudly and is never written to.

Each fault is made from the outside (random bytes over the file, a journal cut short as a
half-written copy would be, a row edited with the sqlite3 module, another program's
database) and the oracle is the file's own bytes (hashed before and after) and the
broker's exit code and stderr. A journal left by a kill -9 (WAL not checkpointed) must
still open: that is the restart the journal exists for.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fluxnode.scheduler.service.allocation import Allocation, NodeShare
from fluxnode.scheduler.service.journal import Journal, JournalError

from fluxnode.testing.instance import Instance
from fluxnode.testing.waiting import wait_for

JOURNAL = "sched-journal.sqlite"
EXIT_BOUND = 15.0  # a leader with a damaged journal exits within this (measured 0.4-1.2 s)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_journal(path: Path, count: int = 200) -> None:
    """A real journal with `count` allocations, big enough to span many pages."""
    j = Journal(path)
    for i in range(count):
        j.record(Allocation(j.next_id(), "ALLOCATED", 0, "first",
                            [NodeShare(i % 4, f"n{i % 4}", (0, 1))], {"group": f"g{i}"}, 1.0,
                            {"pad": "x" * 400}))
    j.close()


def garbage(path: Path) -> str:
    path.write_bytes(bytes(range(256)) * 32)
    return "file is not a database"


def truncated(path: Path) -> str:
    write_journal(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "database disk image is malformed"


def bad_row(path: Path) -> str:
    write_journal(path, count=3)
    db = sqlite3.connect(path)
    db.execute("UPDATE allocation SET nodes = '[{\"rank\": 0,' WHERE id = 2")
    db.commit()
    db.close()
    return "allocation 2: column nodes is not valid JSON"


def foreign(path: Path) -> str:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE photos (id INTEGER, data BLOB)")
    db.commit()
    db.close()
    return "is not a fluxnode journal (its tables: photos)"


def wrong_schema(path: Path) -> str:
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE allocation (id INTEGER PRIMARY KEY, jobspec TEXT);"
                     "CREATE TABLE counter (name TEXT PRIMARY KEY, value INTEGER);")
    db.close()
    return ("table allocation lacks column(s) policy, nodes, labels, created, kinds, slots, "
            "use_drained")


DAMAGE = [garbage, truncated, bad_row, foreign, wrong_schema]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__)
def test_damage_is_a_journal_error_at_open_and_the_file_is_untouched(tmp_path, damage):
    path = tmp_path / JOURNAL
    problem = damage(path)
    before = digest(path)
    with pytest.raises(JournalError) as info:
        Journal(path)
    message = str(info.value)
    assert message.startswith(f"{path}: scheduler journal ") and problem in message
    assert "move it aside" in message and "\n" not in message
    assert digest(path) == before


def test_journal_left_by_a_kill_is_not_damage(tmp_path):
    """Commits still in the WAL (the writer died before any checkpoint) are read back."""
    path = tmp_path / JOURNAL
    code = (
        "import os, sys; from fluxnode.scheduler.service.journal import Journal\n"
        "from fluxnode.scheduler.service.allocation import Allocation, NodeShare\n"
        "j = Journal(sys.argv[1])\n"
        "for i in range(5):\n"
        "    j.record(Allocation(j.next_id(), 'ALLOCATED', 0, 'first', [NodeShare(i, 'n')]))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=30)
    assert Path(f"{path}-wal").exists()
    j = Journal(path)
    assert [[n.rank for n in e.nodes] for e in j.entries()] == [[i] for i in range(5)]
    j.close()


def test_empty_file_is_a_fresh_journal(tmp_path):
    path = tmp_path / JOURNAL
    path.touch()
    j = Journal(path)
    assert j.entries() == [] and j.next_id() == 1
    j.close()


# -- the broker -------------------------------------------------------------------------------


def lone_broker(tmp_path: Path) -> tuple[list[str], Path]:
    cfg = tmp_path / "broker.toml"
    cfg.write_text("[bootstrap]\n")
    state = tmp_path / "state"
    state.mkdir()
    argv = [sys.executable, "-m", "fluxnode", "broker", "--config-path", str(cfg),
            "--hostname", "solo", "-S", f"rundir={tmp_path / 'run'}", "-S", f"statedir={state}",
            "-S", f"log-filename={tmp_path / 'broker.log'}"]
    return argv, state


@pytest.mark.parametrize("damage", [garbage, truncated, bad_row], ids=lambda f: f.__name__)
def test_leader_with_a_damaged_journal_exits_1_with_one_line(tmp_path, damage):
    argv, state = lone_broker(tmp_path)
    path = state / JOURNAL
    problem = damage(path)
    before = digest(path)
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=EXIT_BOUND + 30)
    took = time.monotonic() - t0
    print(f"{damage.__name__}: exited {p.returncode} after {took:.2f}s")
    assert p.returncode == 1 and took < EXIT_BOUND
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(path) in lines[0] and problem in lines[0] and "move it aside" in lines[0]
    assert "Traceback" not in p.stderr
    logged = [ln for ln in (tmp_path / "broker.log").read_text().splitlines() if str(path) in ln]
    assert logged == [lines[0]]
    assert digest(path) == before
    assert not (tmp_path / "run" / "local").exists()  # it never served anything


def test_a_default_module_that_is_not_installed_is_still_skipped(tmp_path):
    """Only a failure to load is fatal: a lone broker without the scheduler still serves."""
    argv, _ = lone_broker(tmp_path)
    code = ("import sys, runpy; sys.modules['fluxnode.scheduler.service'] = None; "
            "sys.argv = ['fluxnode'] + sys.argv[1:]; runpy.run_module('fluxnode', "
            "run_name='__main__')")
    p = subprocess.Popen([sys.executable, "-c", code, *argv[3:]], stderr=subprocess.PIPE,
                         text=True)
    try:
        wait_for((tmp_path / "run" / "local").exists, timeout=20, what="the broker serves")
    finally:
        p.terminate()
        assert p.wait(timeout=20) == 0, p.stderr.read() if p.stderr else ""


def test_restarted_leader_with_a_damaged_journal_stops_and_moving_it_aside_recovers():
    with Instance(4, modules=None, tbon={"torpid_min": "0.2s", "torpid_max": "1.5s"}) as inst:
        alloc = inst.rpc("sched.alloc", {"jobspec": jobspec(), "labels": {"owner": "test"}})
        assert alloc["status"] == "ALLOCATED"
        leader = next(b for b in inst.info["brokers"] if b["rank"] == 0)
        path = Path(leader["attrs"]["statedir"]) / JOURNAL
        inst.kill(0)
        # The file replaced by garbage, as a bad copy or a bad disk leaves it. Without its WAL:
        # a kill -9 leaves the last commits there, and SQLite would read pages from it.
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        garbage(path)
        before = digest(path)
        stderr_before = len(inst.stderr().splitlines())
        t0 = time.monotonic()
        failed = inst.restart(0)
        inst.killed_by_test.add(failed.pid)  # its exit status is what this test checks
        assert failed.wait(timeout=EXIT_BOUND + 30) == 1
        took = time.monotonic() - t0
        print(f"restarted rank 0 with a damaged journal exited 1 after {took:.2f}s")
        assert took < EXIT_BOUND
        new = inst.stderr().splitlines()[stderr_before:]
        assert len([ln for ln in new if str(path) in ln]) == 1, new
        assert digest(path) == before
        # What the README tells the operator: move the file aside, start the leader again.
        path.rename(path.with_name(JOURNAL + ".damaged"))
        inst.restart(0)
        wait_for(lambda: _answers(inst), timeout=30, what="the new leader's scheduler answers")
        assert digest(path.with_name(JOURNAL + ".damaged")) == before


def jobspec() -> dict:
    from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec

    return build_jobspec([SlotKind(count=1, cores=1)])


def _answers(inst: Instance) -> bool:
    try:
        return "all" in inst.rpc("sched.resource-status", timeout=2)
    except Exception:
        return False


def test_json_of_a_row_is_checked_by_shape_too(tmp_path):
    path = tmp_path / JOURNAL
    write_journal(path, count=2)
    db = sqlite3.connect(path)
    db.execute("UPDATE allocation SET labels = ? WHERE id = 1", (json.dumps([1, 2]),))
    db.commit()
    db.close()
    with pytest.raises(JournalError, match="allocation 1: column labels is not a JSON object"):
        Journal(path)
