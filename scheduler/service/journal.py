"""The leader's memory of what it handed out, kept in SQLite in the statedir.

A leader restart must neither lose an allocation (its pods keep running) nor
hand the same cores out twice, so every allocation, partial cancel and cancel
is committed before the RPC answers. On start the service replays the live
entries into a fresh graph. Ids come from a persistent counter so an id is
never reused across restarts. WAL with synchronous=NORMAL survives a process
crash (the failure a leader restart is); a power loss may drop the last commits.
Reservations are not journaled: they are recomputed every scheduling cycle. Drained
nodes are (table ``drain``, by hostname): a drain survives a restart, as in Flux; journals
from before drains existed get the table when opened.
A multi-kind allocation also keeps where each slot kind landed (``kinds``), so
after any restart its owner can still give each pod exactly its planned share;
journals written before that column existed are upgraded in place (their
entries have no ``kinds``).

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
from dataclasses import dataclass
from pathlib import Path

from fluxnode.scheduler.service.drain import Drain

SCHEMA = """
CREATE TABLE IF NOT EXISTS allocation (
    id INTEGER PRIMARY KEY,
    jobspec TEXT NOT NULL,
    policy TEXT NOT NULL,
    R TEXT NOT NULL,
    nodes TEXT NOT NULL,
    labels TEXT NOT NULL,
    created REAL NOT NULL,
    kinds TEXT,
    use_drained INTEGER NOT NULL DEFAULT 0
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


COLUMNS = ("id", "jobspec", "policy", "R", "nodes", "labels", "created")  # kinds: optional
JSON_COLUMNS = {"jobspec": dict, "R": dict, "nodes": list, "labels": dict, "kinds": list}
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


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int
    jobspec: dict
    policy: str
    R: dict
    nodes: list[dict]
    labels: dict
    created: float
    kinds: list[dict] | None = (
        None  # several slot kinds: where each landed (service answer's "kinds")
    )
    use_drained: bool = False  # holds what already runs on drained nodes (not new work)


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
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(allocation)")}
            if "kinds" not in columns:  # a journal from before per-kind placements were kept
                self._db.execute("ALTER TABLE allocation ADD COLUMN kinds TEXT")
            if "use_drained" not in columns:  # a journal from before drains existed
                self._db.execute(
                    "ALTER TABLE allocation ADD COLUMN use_drained INTEGER NOT NULL DEFAULT 0"
                )
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

    def record(self, entry: JournalEntry) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO allocation(id, jobspec, policy, R, nodes, labels, created, "
                "kinds, use_drained)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.id,
                    json.dumps(entry.jobspec),
                    entry.policy,
                    json.dumps(entry.R),
                    json.dumps(entry.nodes),
                    json.dumps(entry.labels),
                    entry.created,
                    None if entry.kinds is None else json.dumps(entry.kinds),
                    int(entry.use_drained),
                ),
            )

    def shrink(
        self, alloc_id: int, R: dict, nodes: list[dict], kinds: list[dict] | None = None
    ) -> None:
        """Record what is left of an allocation after a partial cancel (or a replay that
        re-placed it); `kinds`, when given, replaces the per-kind placement too."""
        with self._lock:
            if kinds is None:
                self._db.execute(
                    "UPDATE allocation SET R=?, nodes=? WHERE id=?",
                    (json.dumps(R), json.dumps(nodes), alloc_id),
                )
            else:
                self._db.execute(
                    "UPDATE allocation SET R=?, nodes=?, kinds=? WHERE id=?",
                    (json.dumps(R), json.dumps(nodes), json.dumps(kinds), alloc_id),
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

    def entries(self) -> list[JournalEntry]:
        with self._lock:
            try:
                rows = self._db.execute(SELECT_ENTRIES).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(self.path, f"cannot be read: {exc}") from exc
        return [_entry(self.path, row) for row in rows]


SELECT_ENTRIES = (
    "SELECT id, jobspec, policy, R, nodes, labels, created, kinds, use_drained FROM allocation "
    "ORDER BY id"
)


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


def _entry(path: Path, row: tuple) -> JournalEntry:
    """One allocation row as a JournalEntry; a column that does not parse is a JournalError
    naming the row."""
    values: dict[str, object] = {}
    for name, index in (("jobspec", 1), ("R", 3), ("nodes", 4), ("labels", 5), ("kinds", 7)):
        raw = row[index]
        if raw is None and name == "kinds":
            values[name] = None
            continue
        try:
            value = json.loads(raw)
        except (TypeError, ValueError) as exc:
            raise JournalError(
                path, f"allocation {row[0]!r}: column {name} is not valid JSON ({exc})"
            ) from None
        if not isinstance(value, JSON_COLUMNS[name]):
            raise JournalError(
                path, f"allocation {row[0]!r}: column {name} is not a JSON "
                f"{'object' if JSON_COLUMNS[name] is dict else 'array'}"
            )
        values[name] = value
    if not isinstance(row[0], int) or not isinstance(row[2], str) or not isinstance(
        row[6], (int, float)
    ):
        raise JournalError(path, f"allocation {row[0]!r}: id, policy or created has a bad type")
    return JournalEntry(row[0], values["jobspec"], row[2], values["R"], values["nodes"],
                        values["labels"], row[6], values["kinds"], bool(row[8]))


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
        missing = [c for c in COLUMNS if c not in columns]
        if missing:
            raise JournalError(
                path, f"has the wrong schema: table allocation lacks column(s) {', '.join(missing)}"
            )
        select = SELECT_ENTRIES
        if "kinds" not in columns:
            select = select.replace("kinds,", "NULL,")
        if "use_drained" not in columns:
            select = select.replace("use_drained", "0")
        for row in db.execute(select):
            _entry(path, row)
        if "drain" in tables:
            for row in db.execute(SELECT_DRAINS):
                _drain(path, row)
    except sqlite3.Error as exc:  # "file is not a database", "database disk image is malformed"
        raise JournalError(path, f"is damaged: {exc}") from exc
    finally:
        db.close()
