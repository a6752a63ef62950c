"""Named archives of files (flux-archive(1)): the index on the leader, extraction down the
tree.

The leader keeps each archive's index (its RFC 37 file objects, `archive_format`) in
``archive.sqlite`` in its statedir; the file contents are blobs in the content store
(`content_store`), stored there by `fluxnode archive create` before it commits the index
with ``archive.create``. ``archive.list`` and ``archive.remove`` read and drop an index
(remove also drops the blobs no remaining archive uses).

``archive.extract`` travels down the tree: the leader looks the archive up and sends its
index to each child whose subtree holds a target rank, restricted to that subtree's
targets; each broker does the same for its children and, if it is a target, writes the
files below the directory (`archive_extract.Extraction`, blobs from its cache or its
parent). So one request goes down each tree edge, and each broker answers once with its
subtree's results: ``{"ranks": {RANK: stats}, "errors": {RANK: "why"}}``. A child that
is unreachable, or lost while its subtree works, is reported as an error for every target
rank below it, by name.

``{{rank}}`` in the directory is replaced by the broker's rank, so that brokers sharing
one machine (`fluxnode start --test-size`) extract into directories of their own.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.content_store import ContentStore
from fluxnode.agent.broker.fanout import SubtreeSplit, target_ranks
from fluxnode.agent.broker.message import Message, MessageError, ServiceError
from fluxnode.agent.broker.reactor import Timer
from fluxnode.agent.broker.services import DEFERRED, Deferred, ServiceRegistry
from fluxnode.broker_conf import idset

if TYPE_CHECKING:
    import sqlite3

    from fluxnode.agent.broker.archive_extract import ExtractStats

WATCH_PERIOD = 1.0  # how often a broker waiting for children checks they are still there


@dataclass(frozen=True)
class ArchiveServiceContext:
    """What the archive service needs of the broker that runs it."""

    state: InstanceState
    services: ServiceRegistry
    content: ContentStore
    request: Callable[[Message, Callable[[Message], None] | None], int]
    respond: Callable[[Message], None]
    forget: Callable[[int], None]
    child_connected: Callable[[int], bool]
    call_later: Callable[[float, Callable[[], None]], Timer]
    log: BrokerLog


@dataclass
class _Job:
    """One archive.extract on this broker: its own extraction and its children's answers."""

    msg: Message
    targets: list[int]
    waiting: dict[int, int] = field(default_factory=dict)  # child rank -> matchtag
    local: bool = False  # this broker's own extraction is running
    ranks: dict[str, dict] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    ready: bool = False  # every part started (do not answer before)
    answered: bool = False
    watch: Timer | None = None


class ArchiveService:
    def __init__(self, context: ArchiveServiceContext) -> None:
        self.context = context
        self.split = SubtreeSplit(context.state)
        self._db: sqlite3.Connection | None = None

    @property
    def _state(self) -> InstanceState:
        return self.context.state

    def open(self) -> None:
        if self._state.rank != 0:
            return
        import sqlite3  # the leader's only: a worker never loads it

        path = Path(self._state.statedir) / "archive.sqlite"
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("CREATE TABLE IF NOT EXISTS archives (name TEXT PRIMARY KEY, "
                       "objects TEXT NOT NULL)")
        except sqlite3.Error as exc:
            raise OSError(f"archive index {path}: {exc}") from None
        self._db = db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def register(self) -> None:
        register = self.context.services.register
        register("archive.extract", self._extract)
        if self._state.rank == 0:
            register("archive.create", self._create)
            register("archive.list", self._list)
            register("archive.remove", self._remove)

    # -- the index (leader) ----------------------------------------------------------------
    def _objects(self, topic: str, name: str) -> list:
        assert self._db is not None
        row = self._db.execute("SELECT objects FROM archives WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise ServiceError(errno.ENOENT, f"{topic}: no archive named {name!r}")
        return json.loads(row[0])

    def _create(self, msg: Message) -> dict:
        from fluxnode.agent.broker.archive_format import ArchiveError, parse

        p = msg.payload or {}
        name = _name("archive.create", p)
        try:
            entries = parse(p.get("archive"))
        except ArchiveError as exc:
            raise ServiceError(errno.EINVAL, f"archive.create: {exc}") from None
        for e in entries:
            for c in e.chunks:
                if not self.context.content.has(c.blobref):
                    raise ServiceError(errno.ENOENT, f"archive.create: {e.path}: blob "
                                       f"{c.blobref} is not in the content store")
        assert self._db is not None
        exists = self._db.execute("SELECT 1 FROM archives WHERE name = ?", (name,)).fetchone()
        if exists and not p.get("overwrite"):
            raise ServiceError(errno.EEXIST, f"archive.create: archive {name!r} exists "
                               "(use --overwrite)")
        old = self._refs(name) if exists else set()
        objects = [e.to_json() for e in entries]
        self._db.execute("INSERT OR REPLACE INTO archives (name, objects) VALUES (?, ?)",
                         (name, json.dumps(objects, separators=(",", ":"))))
        self._drop_unused(old)
        return {"name": name, "files": len(entries)}

    def _list(self, msg: Message) -> dict:
        p = msg.payload or {}
        if p.get("name") is None and p.get("all"):
            assert self._db is not None
            return {"names": [r[0] for r in self._db.execute(
                "SELECT name FROM archives ORDER BY name")]}
        name = _name("archive.list", p)
        return {"name": name, "archive": self._objects("archive.list", name)}

    def _remove(self, msg: Message) -> dict:
        p = msg.payload or {}
        name = _name("archive.remove", p)
        assert self._db is not None
        try:
            refs = self._refs(name)
        except ServiceError:
            if p.get("force"):
                return {"removed": False}
            raise
        self._db.execute("DELETE FROM archives WHERE name = ?", (name,))
        return {"removed": True, "blobs": self._drop_unused(refs)}

    def _refs(self, name: str) -> set[str]:
        objects = self._objects("archive.remove", name)
        return {c[2] for o in objects if o.get("encoding") == "blobvec" for c in o["data"]}

    def _drop_unused(self, refs: set[str]) -> int:
        """Drop from the content store the blobs among `refs` no archive uses now."""
        assert self._db is not None
        if not refs:
            return 0
        used: set[str] = set()
        for (text,) in self._db.execute("SELECT objects FROM archives"):
            used |= {c[2] for o in json.loads(text) if o.get("encoding") == "blobvec"
                     for c in o["data"]}
        return self.context.content.remove(refs - used)

    # -- extract (every broker) ------------------------------------------------------------
    def _extract(self, msg: Message) -> Deferred:
        state = self._state
        p = msg.payload or {}
        objects = p.get("archive")
        if objects is None:
            if state.rank != 0:
                raise ServiceError(errno.EINVAL, "archive.extract: no archive given (send "
                                   "the request to rank 0 with a name)")
            objects = self._objects("archive.extract", _name("archive.extract", p))
        # the format and the extraction are loaded by the first archive a broker sees: a
        # worker that never extracts one does not carry them (issue 32, a worker's memory)
        from fluxnode.agent.broker.archive_extract import Extraction
        from fluxnode.agent.broker.archive_format import ArchiveError, parse

        try:
            entries = parse(objects)
        except ArchiveError as exc:
            raise ServiceError(errno.EINVAL, f"archive.extract: {exc}") from None
        directory = p.get("directory")
        if not isinstance(directory, str) or not directory.startswith("/"):
            raise ServiceError(errno.EINVAL, "archive.extract: 'directory' must be an "
                               f"absolute path, not {directory!r}")
        wanted = target_ranks(p.get("targets", "all"), state.size, "archive.extract",
                              option="targets")
        job = _Job(msg, sorted(wanted))
        forward = {"archive": objects, "directory": directory,
                   "overwrite": bool(p.get("overwrite"))}
        for child, subtree_targets in self.split.by_child(wanted):
            below = sorted(subtree_targets)
            job.waiting[child] = -1  # set before sending: an unreachable one answers now
            tag = self.context.request(
                Message.request("archive.extract", {**forward, "targets": idset.encode(below)},
                                nodeid=child),
                lambda m, c=child, b=below: self._child_answered(job, c, b, m))
            if child in job.waiting:
                job.waiting[child] = tag
        if state.rank in wanted:
            job.local = True
            where = Path(directory.replace("{{rank}}", str(state.rank)))
            Extraction(entries, where, overwrite=bool(p.get("overwrite")),
                       load=self.context.content.load,
                       on_done=lambda stats, err: self._local_done(job, stats, err)).start()
        job.ready = True
        if job.waiting:
            job.watch = self.context.call_later(WATCH_PERIOD, lambda: self._watch(job))
        self._maybe_answer(job)
        return DEFERRED

    def _local_done(self, job: _Job, stats: ExtractStats | None, error: str | None) -> None:
        rank = self._state.rank
        job.local = False
        if stats is not None:
            job.ranks[str(rank)] = stats.to_dict()
        else:
            job.errors[str(rank)] = error or "failed"
            self.context.log.error("archive.extract: %s", error)
        self._maybe_answer(job)

    def _child_answered(self, job: _Job, child: int, below: list[int], msg: Message) -> None:
        if job.waiting.pop(child, None) is None:
            return  # given up on already
        if msg.errnum:
            self._subtree_failed(job, below, msg.errstr or f"error {msg.errnum}")
        else:
            try:
                body = msg.decode_payload() or {}
                job.ranks.update(body.get("ranks") or {})
                job.errors.update(body.get("errors") or {})
            except (MessageError, AttributeError, TypeError) as exc:
                self._subtree_failed(job, below, f"bad answer: {exc}")
        self._maybe_answer(job)

    def _subtree_failed(self, job: _Job, below: list[int], why: str) -> None:
        for r in below:
            job.errors[str(r)] = why

    def _watch(self, job: _Job) -> None:
        job.watch = None
        if job.answered:
            return
        for child in list(job.waiting):
            if not self.context.child_connected(child):
                self.context.forget(job.waiting.pop(child))
                host = self._state.hostnames[child]
                below = sorted(self.split.subtree(child).intersection(job.targets))
                self._subtree_failed(job, below, f"{host} (rank {child}) was lost during the "
                                     "extract")
        if job.waiting:
            job.watch = self.context.call_later(WATCH_PERIOD, lambda: self._watch(job))
        self._maybe_answer(job)

    def _maybe_answer(self, job: _Job) -> None:
        if job.answered or not job.ready or job.local or job.waiting:
            return
        job.answered = True
        if job.watch is not None:
            job.watch.cancel()
        self.context.respond(job.msg.response({"ranks": job.ranks, "errors": job.errors}))


def _name(topic: str, payload: dict) -> str:
    from fluxnode.agent.broker.archive_format import ArchiveError, check_name

    try:
        return check_name(payload.get("name", "main"))
    except ArchiveError as exc:
        raise ServiceError(errno.EINVAL, f"{topic}: {exc}") from None
