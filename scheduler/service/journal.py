"""The leader's memory of what it handed out, kept in SQLite in the statedir.

A leader restart must neither lose an allocation (its pods keep running) nor
hand the same cores out twice, so every allocation, partial cancel and cancel
is committed before the RPC answers. On start the service replays the live
entries into a fresh graph. Ids come from a persistent counter so an id is
never reused across restarts. WAL with synchronous=NORMAL survives a process
crash (the failure a leader restart is); a power loss may drop the last commits.
Reservations are not journaled: they are recomputed every scheduling cycle.
A multi-kind allocation also keeps where each slot kind landed (``kinds``), so
after any restart its owner can still give each pod exactly its planned share;
journals written before that column existed are upgraded in place (their
entries have no ``kinds``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS allocation (
    id INTEGER PRIMARY KEY,
    jobspec TEXT NOT NULL,
    policy TEXT NOT NULL,
    R TEXT NOT NULL,
    nodes TEXT NOT NULL,
    labels TEXT NOT NULL,
    created REAL NOT NULL,
    kinds TEXT
);
CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


ID_BLOCK = 1000


class JournalError(RuntimeError):
    """The journal file cannot be opened or is not a fluxnode journal."""


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


class Journal:
    """Append-and-update record of live allocations; thread-safe."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._next_id = 0
        self._id_limit = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(allocation)")}
            if "kinds" not in columns:  # a journal from before per-kind placements were kept
                self._db.execute("ALTER TABLE allocation ADD COLUMN kinds TEXT")
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(f"{self.path}: cannot open scheduler journal: {exc}") from exc

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
                "kinds)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.id,
                    json.dumps(entry.jobspec),
                    entry.policy,
                    json.dumps(entry.R),
                    json.dumps(entry.nodes),
                    json.dumps(entry.labels),
                    entry.created,
                    None if entry.kinds is None else json.dumps(entry.kinds),
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

    def entries(self) -> list[JournalEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, jobspec, policy, R, nodes, labels, created, kinds FROM allocation "
                "ORDER BY id"
            ).fetchall()
        return [
            JournalEntry(
                row[0],
                json.loads(row[1]),
                row[2],
                json.loads(row[3]),
                json.loads(row[4]),
                json.loads(row[5]),
                row[6],
                None if row[7] is None else json.loads(row[7]),
            )
            for row in rows
        ]
