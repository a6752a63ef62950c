import json
import sqlite3

import pytest
from fluxnode.scheduler.jobspec.builder import SlotKind
from fluxnode.scheduler.service.allocation import Allocation, NodeShare, SlotShare
from fluxnode.scheduler.service.journal import Journal, JournalError


def alloc(i, ranks=(0,)):
    nodes = [NodeShare(r, f"n{r}", (0, 1), (), 64) for r in ranks]
    return Allocation(i, "ALLOCATED", 0, "first", nodes, {"group": "g"}, 1.0,
                      kinds=(SlotKind(1, 0, 32, 2 * len(ranks)),),
                      slots=tuple(SlotShare(0, NodeShare(r, f"n{r}", (c,), (), 32))
                                  for r in ranks for c in (0, 1)))


def test_entries_survive_reopen_and_ids_are_never_reused(tmp_path):
    j = Journal(tmp_path / "sched.db")
    a, b = j.next_id(), j.next_id()
    j.record(alloc(a))
    kept = alloc(b, (0, 1))
    j.record(kept)
    kept.without({0})  # a partial cancel: what is left is written again
    j.record(kept)
    j.remove(a)
    j.close()
    # read the file with sqlite3 itself: one row, in the wire form, and no R column
    db = sqlite3.connect(tmp_path / "sched.db")
    columns = [r[1] for r in db.execute("PRAGMA table_info(allocation)")]
    rows = db.execute("SELECT id, nodes, slots FROM allocation").fetchall()
    db.close()
    assert "R" not in columns
    assert [(r[0], json.loads(r[1]), json.loads(r[2])) for r in rows] == [
        (b, [{"rank": 1, "hostname": "n1", "cores": "0-1", "gpus": "", "memory_mib": 64}],
         [{"kind": 0, "rank": 1, "hostname": "n1", "cores": "0", "gpus": "", "memory_mib": 32},
          {"kind": 0, "rank": 1, "hostname": "n1", "cores": "1", "gpus": "", "memory_mib": 32}])
    ]
    j = Journal(tmp_path / "sched.db")
    [live] = j.entries()
    assert live == kept
    assert j.next_id() > b
    j.close()


def test_unusable_path_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(JournalError, match="scheduler journal cannot be opened"):
        Journal(tmp_path / "f" / "sched.db")


def test_a_span_is_kept_and_a_journal_from_before_spans_still_loads(tmp_path):
    """began/duration round trip; a journal written before those columns (its table as main
    had it at 002b689, created here with sqlite3 itself) loads, its allocations lasting
    until cancelled, and takes new ones with a span."""
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE allocation (id INTEGER PRIMARY KEY, jobspec TEXT NOT NULL,
            policy TEXT NOT NULL, nodes TEXT NOT NULL, labels TEXT NOT NULL,
            created REAL NOT NULL, kinds TEXT, slots TEXT, use_drained INTEGER NOT NULL);
        CREATE TABLE counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        INSERT INTO counter VALUES ('alloc', 1000);
    """)
    db.execute("INSERT INTO allocation VALUES (7, '{}', 'first', ?, '{}', 1.5, NULL, NULL, 0)",
               (json.dumps([{"rank": 0, "hostname": "n0", "cores": "0-1"}]),))
    db.commit()
    db.close()
    j = Journal(path)
    [old] = j.entries()
    assert (old.id, old.nodes, old.began, old.duration) == (
        7, [NodeShare(0, "n0", (0, 1))], None, None)
    new = alloc(j.next_id(), (1,))
    new.began, new.duration = 1_800_000_000, 3600
    j.record(new)
    j.close()
    j = Journal(path)
    assert [(a.id, a.began, a.duration) for a in j.entries()] == [
        (7, None, None), (new.id, 1_800_000_000, 3600)]
    j.close()


def test_a_span_with_half_its_columns_is_refused(tmp_path):
    j = Journal(tmp_path / "sched.db")
    j.record(alloc(j.next_id()))
    j.close()
    db = sqlite3.connect(tmp_path / "sched.db")
    db.execute("UPDATE allocation SET began = 5")
    db.commit()
    db.close()
    with pytest.raises(JournalError, match="began and duration must both be"):
        Journal(tmp_path / "sched.db")
