import pytest
from fluxnode.scheduler.service.journal import Journal, JournalEntry, JournalError


def entry(i, nodes=None):
    return JournalEntry(
        i, {"version": 1}, "first", {"version": 1}, nodes or [{"rank": 0}], {"group": "g"}, 1.0
    )


def test_entries_survive_reopen_and_ids_are_never_reused(tmp_path):
    j = Journal(tmp_path / "sched.db")
    a, b = j.next_id(), j.next_id()
    j.record(entry(a))
    j.record(entry(b, [{"rank": 0}, {"rank": 1}]))
    j.shrink(b, {"version": 1, "left": True}, [{"rank": 1}])
    j.remove(a)
    j.close()
    j = Journal(tmp_path / "sched.db")
    [live] = j.entries()
    assert (
        live.id == b
        and live.nodes == [{"rank": 1}]
        and live.R["left"]
        and live.labels == {"group": "g"}
    )
    assert j.next_id() > b
    j.close()


def test_unusable_path_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(JournalError, match="scheduler journal cannot be opened"):
        Journal(tmp_path / "f" / "sched.db")
