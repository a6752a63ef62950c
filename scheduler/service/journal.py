"""The leader's memory of what it handed out, kept in SQLite in the statedir.

A leader restart must neither lose an allocation (its pods keep running) nor
hand the same cores out twice, so every allocation, partial cancel and cancel
is committed before the RPC answers. On start the service replays the live
entries into a fresh graph. Ids come from a persistent counter so an id is
never reused across restarts. WAL with synchronous=NORMAL survives a process
crash (the failure a leader restart is); a power loss may drop the last commits.
Reservations are not journaled: they are recomputed every scheduling cycle. Drained
nodes are (table ``drain``, by hostname): a drain survives a restart, as in Flux.
A row is the `Allocation` record (allocation.py) in its wire form: per-node shares,
and for a request of slot kinds the kinds and where each slot landed, so after any
restart the owner still gives each pod its own slot. A row also keeps the planner span the
allocation holds (``began``, whole seconds since the Unix epoch, and ``duration``; both NULL
for one that lasts until cancelled), so a restarted leader books the same end and a
reservation behind it gets the same start. Those two columns came later: a journal written
before them is read as it is (its allocations last until cancelled, as they did then) and
gets the columns added when it is opened for writing.

A journal that cannot be trusted stops the leader instead of being worked around:
running on without it would hand out cores that are in use. So the file is checked
at open, before anything writes to it, through a read-only connection (which never
checkpoints a WAL into it): SQLite's quick_check, the schema (a database of something
else is refused, never created into), and every row read and its JSON parsed, so the
damage shows at start and not at the first allocation. `JournalError` names the file,
the problem and what to do; the damaged file is never overwritten, truncated or moved.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from fluxnode.scheduler.jobspec.builder import JobspecBuildError, SlotKind
from fluxnode.scheduler.service.allocation import Allocation, NodeShare, RecordError, SlotShare
from fluxnode.scheduler.service.drain import Drain

SCHEMA = """
CREATE TABLE IF NOT EXISTS allocation (
    id INTEGER PRIMARY KEY,
    jobspec TEXT NOT NULL,
    policy TEXT NOT NULL,
    nodes TEXT NOT NULL,
    labels TEXT NOT NULL,
    created REAL NOT NULL,
    kinds TEXT,
    slots TEXT,
    use_drained INTEGER NOT NULL,
    began INTEGER,
    duration INTEGER
);
CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS drain (
    hostname TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    timestamp REAL NOT NULL,
    source TEXT NOT NULL
);
"""


ID_BLOCK = 1000


COLUMNS = ("id", "jobspec", "policy", "nodes", "labels", "created", "kinds", "slots",
           "use_drained", "began", "duration")
# columns a journal written by an older version lacks (read as NULL, added at open)
LATER_COLUMNS = {"began": "INTEGER", "duration": "INTEGER"}
JSON_COLUMNS = {"jobspec": dict, "nodes": list, "labels": dict, "kinds": list, "slots": list}
REMEDY = (
    "the file is left as it is: to start with an empty journal, move it aside "
    "(the binder re-adopts the running pods)"
)


class JournalError(RuntimeError):
    """The journal file cannot be opened or is not a fluxnode journal.

    `file` and `problem` are what the one-line message is made of (with `REMEDY` when the
    file itself is damaged, as opposed to its directory being unusable)."""

    def __init__(self, file: Path, problem: str, *, damaged: bool = True) -> None:
        self.file = file
        self.problem = problem
        self.damaged = damaged
        message = f"{file}: scheduler journal {problem}"
        super().__init__(f"{message}; {REMEDY}" if damaged else message)


class Journal:
    """Append-and-update record of live allocations; thread-safe."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._next_id = 0
        self._id_limit = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(self.path, f"cannot be opened: {exc}", damaged=False) from exc
        if self.path.is_file() and self.path.stat().st_size > 0:
            check(self.path)
        try:
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None
            )
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(self.path, f"cannot be opened: {exc}", damaged=False) from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(allocation)")}
            for name, kind in LATER_COLUMNS.items():
                if name not in have:  # a journal from before the column: NULL in every row
                    self._db.execute(f"ALTER TABLE allocation ADD COLUMN {name} {kind}")
        except (sqlite3.Error, OSError) as exc:
            self._db.close()
            raise JournalError(self.path, f"cannot be opened: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def next_id(self) -> int:
        """A fresh allocation id, never handed out before in this statedir.

        Ids are reserved in blocks (one commit per ID_BLOCK ids) so a failed or
        reserved attempt that is never journaled still never reuses an id after
        a restart (a binder may hold such an id and cancel it later).
        """
        with self._lock:
            if self._next_id >= self._id_limit:
                self._db.execute("BEGIN IMMEDIATE")
                row = self._db.execute("SELECT value FROM counter WHERE name='alloc'").fetchone()
                start = (row[0] if row else 0) + 1
                self._id_limit = start + ID_BLOCK
                self._db.execute(
                    "INSERT OR REPLACE INTO counter(name, value) VALUES ('alloc', ?)",
                    (self._id_limit - 1,),
                )
                self._db.execute("COMMIT")
                self._next_id = start
            value = self._next_id
            self._next_id += 1
            return value

    def record(self, alloc: Allocation) -> None:
        """Write `alloc` as it is now (a new allocation, or what is left after a partial
        cancel)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO allocation(id, jobspec, policy, nodes, labels, created, "
                "kinds, slots, use_drained, began, duration) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    alloc.id,
                    json.dumps(alloc.jobspec),
                    alloc.policy,
                    json.dumps(alloc.wire()["nodes"]),
                    json.dumps(alloc.labels),
                    alloc.created,
                    None if alloc.kinds is None else json.dumps(
                        [k.to_wire() for k in alloc.kinds]),
                    None if alloc.slots is None else json.dumps(alloc.wire()["slots"]),
                    int(alloc.use_drained),
                    alloc.began,
                    alloc.duration,
                ),
            )

    def remove(self, alloc_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM allocation WHERE id=?", (alloc_id,))

    def drains(self) -> list[Drain]:
        with self._lock:
            try:
                rows = self._db.execute(SELECT_DRAINS).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(self.path, f"cannot be read: {exc}") from exc
        return [_drain(self.path, row) for row in rows]

    def save_drains(self, written: list[Drain], removed: list[str]) -> None:
        """Record drains written and hostnames undrained, in one transaction."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for d in written:
                    self._db.execute(
                        "INSERT OR REPLACE INTO drain(hostname, reason, timestamp, source) "
                        "VALUES (?, ?, ?, ?)",
                        (d.hostname, d.reason, d.timestamp, d.source),
                    )
                for host in removed:
                    self._db.execute("DELETE FROM drain WHERE hostname=?", (host,))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def entries(self) -> list[Allocation]:
        with self._lock:
            try:
                rows = self._db.execute(SELECT_ENTRIES).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(self.path, f"cannot be read: {exc}") from exc
        return [_entry(self.path, row) for row in rows]


def select_entries(have: set[str] | None = None) -> str:
    """The query of every allocation row; `have`: the table's columns, when some of
    LATER_COLUMNS may be missing (they are read as NULL)."""
    names = [c if have is None or c in have else f"NULL AS {c}" for c in COLUMNS]
    return f"SELECT {', '.join(names)} FROM allocation ORDER BY id"


SELECT_ENTRIES = select_entries()


SELECT_DRAINS = "SELECT hostname, reason, timestamp, source FROM drain ORDER BY hostname"


def _drain(path: Path, row: tuple) -> Drain:
    hostname, reason, timestamp, source = row
    if not (
        isinstance(hostname, str)
        and isinstance(reason, str)
        and isinstance(timestamp, int | float)
        and isinstance(source, str)
    ):
        raise JournalError(path, f"drain {hostname!r}: a column has a bad type")
    return Drain(hostname, reason, float(timestamp), source)


def _entry(path: Path, row: tuple) -> Allocation:
    """One allocation row as an ALLOCATED `Allocation`; a column that does not parse is a
    JournalError naming the row."""
    raw = dict(zip(COLUMNS, row, strict=True))
    values: dict[str, object] = {}
    for name, kind in JSON_COLUMNS.items():
        if raw[name] is None and name in ("kinds", "slots"):
            values[name] = None
            continue
        try:
            value = json.loads(raw[name])
        except (TypeError, ValueError) as exc:
            raise JournalError(
                path, f"allocation {row[0]!r}: column {name} is not valid JSON ({exc})"
            ) from None
        if not isinstance(value, kind):
            raise JournalError(
                path, f"allocation {row[0]!r}: column {name} is not a JSON "
                f"{'object' if kind is dict else 'array'}"
            )
        values[name] = value
    if not isinstance(row[0], int) or not isinstance(raw["policy"], str) or not isinstance(
        raw["created"], (int, float)
    ):
        raise JournalError(path, f"allocation {row[0]!r}: id, policy or created has a bad type")
    began, duration = raw["began"], raw["duration"]
    if (began is None) != (duration is None) or not all(
            v is None or (isinstance(v, int) and v >= 0) for v in (began, duration)):
        raise JournalError(path, f"allocation {row[0]!r}: began and duration must both be "
                           "whole seconds or both NULL")
    try:
        nodes = [NodeShare.from_wire(n, f"nodes[{i}]") for i, n in enumerate(values["nodes"])]
        kinds = None if values["kinds"] is None else tuple(
            SlotKind.from_wire(k, f"kinds[{i}]") for i, k in enumerate(values["kinds"]))
        slots = None if values["slots"] is None else tuple(
            SlotShare.from_wire(s, f"slots[{i}]") for i, s in enumerate(values["slots"]))
    except (RecordError, JobspecBuildError) as exc:
        raise JournalError(path, f"allocation {row[0]!r}: {exc}") from None
    return Allocation(row[0], "ALLOCATED", 0, raw["policy"], nodes, values["labels"],
                      raw["created"], values["jobspec"], kinds, slots, bool(raw["use_drained"]),
                      began=began, duration=duration)


def check(path: Path) -> None:
    """Check an existing journal without writing to it: raise JournalError on damage."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise JournalError(path, f"cannot be opened: {exc}", damaged=False) from exc
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise JournalError(path, f"is damaged: {'; '.join(problems[:3])}")
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return  # an empty database: a journal that was created and never written
        if not {"allocation", "counter"} <= tables:
            found = ", ".join(sorted(tables))
            raise JournalError(path, f"is not a fluxnode journal (its tables: {found})")
        columns = {row[1] for row in db.execute("PRAGMA table_info(allocation)")}
        missing = [c for c in COLUMNS if c not in columns and c not in LATER_COLUMNS]
        if missing:
            raise JournalError(
                path, f"has the wrong schema: table allocation lacks column(s) {', '.join(missing)}"
            )
        for row in db.execute(select_entries(columns)):
            _entry(path, row)
        if "drain" in tables:
            for row in db.execute(SELECT_DRAINS):
                _drain(path, row)
    except sqlite3.Error as exc:  # "file is not a database", "database disk image is malformed"
        raise JournalError(path, f"is damaged: {exc}") from exc
    finally:
        db.close()
