"""The content store: blobs named by their hash, on every broker (flux-core's content
service and content-sqlite, RFC 10).

A blob is a byte string; its blobref is ``HASH-HEXDIGEST`` as RFC 10 spells it, e.g.
``sha1-2ef7bde608ce5404e97d5f042f95f89f1c232871``. The hash is the ``content.hash``
attribute: ``sha1`` by default, as in Flux (flux-broker-attributes(7)), or ``sha256``.

* The leader keeps every blob in SQLite in its statedir (``content.sqlite``, table
  ``objects``), so blobs survive a leader restart; it is the only writer
  (``content.store`` is a leader service).
* Every other broker keeps a cache of blobs it fetched, bounded by the
  ``content.cache-size`` attribute (bytes, default 64M) and evicting the least recently
  used. ``content.load`` on a broker that misses asks its TBON parent (which asks its
  parent, ...), caches the answer and replies; loads of one blob that arrive while it is
  being fetched wait for that one fetch. So when every broker of a subtree wants a blob,
  each tree edge carries it about once: the leader sends it once per child, not once per
  node.

Every blob that arrives from the parent is hashed and compared with its blobref before it
is cached or handed on, so a damaged blob is refused where it is found. Blobs travel in
the JSON payload base64-encoded (``{"data": ...}``): the message format has one JSON
payload frame, and a 1 MiB blob costs 1.33 MiB on the wire.

``content.send-rate`` (bytes per second; unset: no limit) paces the blobs this broker sends
to its children as one link of that speed would: each answer leaves when the previous ones
have had their time on the link. It keeps an archive's fan-out from filling a node's network
link (other overlay traffic goes unpaced), and it lets `bench/archive.py` run many brokers
on one machine as if each had its own link.

``content.stats-get`` reports what this broker served and fetched (the benchmark and the
tests read the leader's ``load-bytes`` to see what it sent).
"""

from __future__ import annotations

import base64
import binascii
import errno
import importlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fluxnode.agent.broker import attributes
from fluxnode.agent.broker.boot import InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.connector import is_client_hop
from fluxnode.agent.broker.message import Message, MessageError, ServiceError
from fluxnode.agent.broker.reactor import Timer
from fluxnode.agent.broker.services import DEFERRED, Deferred, ServiceRegistry

if TYPE_CHECKING:
    import sqlite3

HASHES = {"sha1": 40, "sha256": 64}  # RFC 10 hash names -> hex digest length
DEFAULT_HASH = "sha1"  # flux-core's default content.hash
DEFAULT_CACHE_SIZE = 64 << 20
MAX_BLOB_SIZE = 32 << 20  # base64 of it stays well under the 64 MiB message limit
LOAD_TIMEOUT = 60.0  # seconds a load from the parent may take before it fails
ATTEMPT_TIMEOUT = 15.0  # an answer lost on the way (a hop dropped it) is asked for again
#: answers that mean "not now" (this broker is rejoining its parent, or the parent is away for
#: a moment): the load is asked again after RETRY_DELAY, doubling, until LOAD_TIMEOUT
RETRY_ERRNOS = (errno.EAGAIN, errno.EHOSTUNREACH)
RETRY_DELAY = 0.05
_BLOBREF = re.compile(r"(sha1|sha256)-([0-9a-f]+)")

#: the callback of `ContentStore.load`: (data, None) or (None, error text)
LoadCallback = Callable[["bytes | None", "str | None"], None]


class BlobrefError(ValueError):
    """A string that is not an RFC 10 blobref this store understands."""


def _hash(hash_name: str, data: bytes) -> str:
    """The hex digest, from CPython's own SHA modules when it has them (_sha1; _sha256 in
    3.11, _sha2 later): hashlib would load OpenSSL's libcrypto, 3.4 MiB resident, into
    every broker for two hash functions."""
    for module in ("_sha1",) if hash_name == "sha1" else ("_sha256", "_sha2"):
        try:
            return getattr(importlib.import_module(module), hash_name)(data).hexdigest()
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.new(hash_name, data).hexdigest()


def blobref(data: bytes, hash_name: str = DEFAULT_HASH) -> str:
    """The RFC 10 blobref of `data`."""
    return f"{hash_name}-{_hash(hash_name, data)}"


def check_blobref(ref: object) -> str:
    """`ref` if it is a well-formed blobref; BlobrefError naming it otherwise."""
    m = _BLOBREF.fullmatch(ref) if isinstance(ref, str) else None
    if m is None or len(m.group(2)) != HASHES[m.group(1)]:
        shown = ref if isinstance(ref, str) and len(ref) <= 80 else f"{str(ref)[:80]}..."
        raise BlobrefError(f"bad blobref {shown!r} (expected sha1-<40 hex> or sha256-<64 hex>)")
    return ref  # type: ignore[return-value]


def matches(ref: str, data: bytes) -> bool:
    """Whether `data` hashes to `ref`."""
    return blobref(data, ref.partition("-")[0]) == ref


def encode_blob(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decode_blob(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"{what}: 'data' must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: 'data' is not valid base64") from None


@dataclass
class ContentStats:
    """What one broker's content service did (``content.stats-get``)."""

    count: int = 0  # blobs held (stored on the leader, cached elsewhere)
    bytes: int = 0  # their size
    loads: int = 0  # content.load requests answered with a blob
    load_bytes: int = 0  # bytes of blobs sent in those answers (before base64)
    fetches: int = 0  # blobs fetched from the parent
    fetch_bytes: int = 0
    hits: int = 0  # loads answered from this broker's store or cache
    evictions: int = 0  # cached blobs dropped to stay under content.cache-size
    stores: int = 0  # content.store requests (leader)

    def to_dict(self) -> dict:
        return {k.replace("_", "-"): v for k, v in asdict(self).items()}


@dataclass
class _Fetch:
    """A load from the parent in flight and who waits for it."""

    waiters: list[LoadCallback]
    matchtag: int = 0
    timer: Timer | None = None
    retries: int = 0


class ContentStore:
    def __init__(
        self,
        state: InstanceState,
        services: ServiceRegistry,
        request: Callable[[Message, Callable[[Message], None] | None], int],
        respond: Callable[[Message], None],
        forget: Callable[[int], None],
        call_later: Callable[[float, Callable[[], None]], Timer],
        log: BrokerLog,
    ) -> None:
        self.state = state
        self.services = services
        self.request = request
        self.respond = respond
        self.forget = forget
        self.call_later = call_later
        self.log = log
        self.hash_name = state.attrs.get("content.hash") or DEFAULT_HASH
        if self.hash_name not in HASHES:
            raise ValueError(f"content.hash: {self.hash_name!r} is not sha1 or sha256")
        self.cache_limit = _size_attr(state, "content.cache-size", DEFAULT_CACHE_SIZE)
        self.send_rate = _size_attr(state, "content.send-rate", None)
        self._link_free_at = 0.0  # monotonic time the paced link has sent everything queued
        self.stats = ContentStats()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._fetching: dict[str, _Fetch] = {}
        self._db: sqlite3.Connection | None = None

    @property
    def leader(self) -> bool:
        return self.state.rank == 0

    # -- lifecycle -----------------------------------------------------------------------
    def open(self) -> None:
        """On the leader, open (or create) the backing database in the statedir."""
        if not self.leader:
            return
        import sqlite3  # the leader's only: a worker never loads it

        path = Path(self.state.statedir) / "content.sqlite"
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS objects (hash TEXT PRIMARY KEY, object BLOB)")
            row = db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(object)), 0) FROM objects")
            self.stats.count, self.stats.bytes = row.fetchone()
        except sqlite3.Error as exc:
            raise OSError(f"content store {path}: {exc}") from None
        self._db = db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def register(self) -> None:
        self.services.register("content.load", self._load_request)
        self.services.register("content.stats-get", lambda m: self.stats.to_dict())
        if self.leader:
            self.services.register("content.store", self._store_request)

    # -- the leader's store ----------------------------------------------------------------
    def store(self, data: bytes) -> str:
        """Store `data` on the leader; its blobref."""
        assert self._db is not None
        if len(data) > MAX_BLOB_SIZE:
            raise ServiceError(errno.EFBIG, f"content.store: blob of {len(data)} bytes exceeds "
                               f"the {MAX_BLOB_SIZE} byte limit")
        ref = blobref(data, self.hash_name)
        cur = self._db.execute("INSERT OR IGNORE INTO objects (hash, object) VALUES (?, ?)",
                               (ref, data))
        if cur.rowcount:
            self.stats.count += 1
            self.stats.bytes += len(data)
        self.stats.stores += 1
        return ref

    def has(self, ref: str) -> bool:
        if self._db is not None:
            return self._db.execute("SELECT 1 FROM objects WHERE hash = ?", (ref,)).fetchone() \
                is not None
        return ref in self._cache

    def remove(self, refs: set[str]) -> int:
        """Drop blobs from the leader's store (`archive remove` of blobs no archive uses)."""
        assert self._db is not None
        removed = 0
        for ref in refs:
            row = self._db.execute("SELECT LENGTH(object) FROM objects WHERE hash = ?",
                                   (ref,)).fetchone()
            if row is not None:
                self._db.execute("DELETE FROM objects WHERE hash = ?", (ref,))
                self.stats.count -= 1
                self.stats.bytes -= row[0]
                removed += 1
        return removed

    def _store_request(self, msg: Message) -> dict:
        try:
            data = decode_blob((msg.payload or {}).get("data"), "content.store")
        except ValueError as exc:
            raise ServiceError(errno.EPROTO, str(exc)) from None
        return {"blobref": self.store(data)}

    # -- loads -----------------------------------------------------------------------------
    def _local(self, ref: str) -> bytes | None:
        if self._db is not None:
            row = self._db.execute("SELECT object FROM objects WHERE hash = ?", (ref,)).fetchone()
            return None if row is None else bytes(row[0])
        data = self._cache.get(ref)
        if data is not None:
            self._cache.move_to_end(ref)
        return data

    def load(self, ref: str, callback: LoadCallback) -> None:
        """Get blob `ref`: from here if held, else from the parent (then cached). The callback
        may run before this returns (a hit) or later (a fetch)."""
        data = self._local(ref)
        if data is not None:
            self.stats.hits += 1
            callback(data, None)
            return
        if self.leader:
            callback(None, f"{ref}: no such blob")
            return
        fetch = self._fetching.get(ref)
        if fetch is not None:
            fetch.waiters.append(callback)
            return
        fetch = self._fetching[ref] = _Fetch([callback])
        fetch.timer = self.call_later(LOAD_TIMEOUT, lambda: self._fetched(
            ref, fetch, None, f"{ref}: no answer from the parent within {LOAD_TIMEOUT:g}s"))
        self._ask_parent(ref, fetch)
        self.call_later(ATTEMPT_TIMEOUT, lambda: self._unanswered(ref, fetch, fetch.matchtag))

    def _unanswered(self, ref: str, fetch: _Fetch, tag: int) -> None:
        """No answer to attempt `tag` yet: forget it and ask again (until LOAD_TIMEOUT)."""
        if self._fetching.get(ref) is not fetch or fetch.matchtag != tag:
            return
        self.log.info("content: load of %s unanswered for %gs; asking again", ref,
                      ATTEMPT_TIMEOUT)
        self.forget(tag)
        self._ask_parent(ref, fetch)
        self.call_later(ATTEMPT_TIMEOUT, lambda: self._unanswered(ref, fetch, fetch.matchtag))

    def _ask_parent(self, ref: str, fetch: _Fetch) -> None:
        if self._fetching.get(ref) is not fetch:
            return  # timed out while waiting to retry
        parent = self.state.topology.parent(self.state.rank)
        tag = self.request(Message.request("content.load", {"blobref": ref}, nodeid=parent),
                           lambda m: self._answer(ref, fetch, m))
        fetch.matchtag = tag

    def _answer(self, ref: str, fetch: _Fetch, msg: Message) -> None:
        if msg.errnum in RETRY_ERRNOS and self._fetching.get(ref) is fetch:
            fetch.retries += 1
            delay = min(5.0, RETRY_DELAY * 2 ** (fetch.retries - 1))
            self.log.info("content: load of %s: %s; asking again in %.2fs", ref, msg.errstr,
                          delay)
            self.call_later(delay, lambda: self._ask_parent(ref, fetch))
            return
        if msg.errnum:
            self._fetched(ref, fetch, None, msg.errstr or f"error {msg.errnum}")
            return
        try:
            data = decode_blob((msg.decode_payload() or {}).get("data"), "content.load")
        except (ValueError, MessageError) as exc:
            self._fetched(ref, fetch, None, f"{ref}: bad answer from the parent: {exc}")
            return
        if not matches(ref, data):
            self._fetched(ref, fetch, None, f"{ref}: the parent sent a blob that does not "
                          "match its hash")
            return
        self.stats.fetches += 1
        self.stats.fetch_bytes += len(data)
        self._cache_put(ref, data)
        self._fetched(ref, fetch, data, None)

    def _fetched(self, ref: str, fetch: _Fetch, data: bytes | None, error: str | None) -> None:
        if self._fetching.get(ref) is not fetch:
            return  # already finished (answered, then timed out, or the reverse)
        del self._fetching[ref]
        if fetch.timer is not None:
            fetch.timer.cancel()
        if data is None:
            self.forget(fetch.matchtag)
        for waiter in fetch.waiters:
            waiter(data, error)

    def _cache_put(self, ref: str, data: bytes) -> None:
        if len(data) > self.cache_limit or ref in self._cache:
            return
        self._cache[ref] = data
        self.stats.count += 1
        self.stats.bytes += len(data)
        while self.stats.bytes > self.cache_limit:
            _, old = self._cache.popitem(last=False)
            self.stats.count -= 1
            self.stats.bytes -= len(old)
            self.stats.evictions += 1

    def _load_request(self, msg: Message) -> Deferred:
        try:
            ref = check_blobref((msg.payload or {}).get("blobref"))
        except BlobrefError as exc:
            raise ServiceError(errno.EINVAL, f"content.load: {exc}") from None

        def answer(data: bytes | None, error: str | None) -> None:
            if data is None:
                text = error or "failed"
                self.respond(msg.error(errno.ENOENT, text if text.startswith("content.load:")
                                       else f"content.load: {text}"))
                return
            self.stats.loads += 1
            self.stats.load_bytes += len(data)
            response = msg.response({"data": encode_blob(data)})
            delay = self._pace(msg, len(data))
            if delay > 0:
                self.call_later(delay, lambda: self.respond(response))
            else:
                self.respond(response)

        self.load(ref, answer)
        return DEFERRED


    def _pace(self, msg: Message, size: int) -> float:
        """Seconds until an answer of `size` bytes to `msg` may leave (0 for local clients
        and without content.send-rate): the answers queue on one link of send_rate bytes/s."""
        hop = msg.route[-1] if msg.route else ""
        if self.send_rate is None or is_client_hop(hop):
            return 0.0
        now = time.monotonic()
        self._link_free_at = max(self._link_free_at, now) + size / self.send_rate
        return self._link_free_at - now


def _size_attr(state: InstanceState, name: str, default: int | None) -> int | None:
    """A size attribute (bytes, k/M/G allowed) of this broker, or `default` when unset."""
    value = state.attrs.get(name)
    return default if value is None else attributes.size(name, value)
