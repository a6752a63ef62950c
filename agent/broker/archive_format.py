"""An archive's index: its file objects as Flux's RFC 37 (File Archive Format) spells them,
and the rules every path in it must follow.

A file object is ``{"path", "type", "mode", "size", "encoding", "data"}``: type ``f``
(regular file), ``d`` (directory) or ``l`` (symbolic link); a small file's content is
inline (encoding ``base64``), a larger one's is a ``blobvec``, a list of ``[offset, size,
blobref]`` chunks in the content store, and a symlink's target is its ``utf-8`` data. An
empty file has no data.

The index is checked where it is made (`fluxnode archive create`), where it is kept
(``archive.create`` on the leader) and where it is used (``archive.extract`` on each
broker): a path must be relative, normalised (no ``.``/``..``/empty components, no NUL),
unique, and never below a symlink or a regular file of the same archive, so that
extracting it can only ever write below the target directory. `ArchiveError` names the
path that breaks a rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluxnode.agent.broker.content_store import MAX_BLOB_SIZE, BlobrefError, check_blobref

TYPES = ("f", "d", "l")
MAX_PATH = 4096
DEFAULT_NAME = "main"  # flux-archive(1)'s default archive name
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class ArchiveError(ValueError):
    """An archive, or a path in it, that breaks a rule; the message names it."""


@dataclass(frozen=True)
class Chunk:
    offset: int
    size: int
    blobref: str


@dataclass(frozen=True)
class Entry:
    path: str
    type: str  # f, d or l
    mode: int
    size: int = 0
    inline: bytes | None = None  # a small file's content
    chunks: tuple[Chunk, ...] = ()  # a large file's content
    target: str | None = None  # a symlink's target

    def to_json(self) -> dict:
        import base64

        obj: dict = {"path": self.path, "type": self.type, "mode": self.mode, "size": self.size}
        if self.type == "l":
            obj.update(encoding="utf-8", data=self.target)
        elif self.chunks:
            obj.update(encoding="blobvec",
                       data=[[c.offset, c.size, c.blobref] for c in self.chunks])
        elif self.inline:
            obj.update(encoding="base64", data=base64.b64encode(self.inline).decode())
        return obj


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > 255 or not set(name) <= NAME_CHARS:
        raise ArchiveError(f"bad archive name {str(name)[:80]!r} (letters, digits, '.', '_', '-')")
    return name


def check_path(path: object) -> str:
    """`path` if it may be written below a target directory; ArchiveError naming it if not."""
    if not isinstance(path, str) or not path:
        raise ArchiveError(f"bad path {path!r}: must be a non-empty string")
    if len(path) > MAX_PATH or "\0" in path:
        raise ArchiveError(f"bad path {path[:80]!r}: too long or contains NUL")
    if path.startswith("/"):
        raise ArchiveError(f"{path}: absolute paths are not allowed (it would escape the "
                           "target directory)")
    parts = path.split("/")
    if ".." in parts:
        raise ArchiveError(f"{path}: '..' is not allowed (it would escape the target directory)")
    if any(p in ("", ".") for p in parts):
        raise ArchiveError(f"{path}: not a normalised path (empty or '.' component)")
    return path


def parse(objects: object) -> list[Entry]:
    """The entries of an RFC 37 file object list, every rule checked."""
    if not isinstance(objects, list):
        raise ArchiveError("archive must be a list of file objects")
    entries = [_entry(obj, i) for i, obj in enumerate(objects)]
    kinds: dict[str, str] = {}
    for e in entries:
        if e.path in kinds:
            raise ArchiveError(f"{e.path}: appears twice in the archive")
        kinds[e.path] = e.type
    for e in entries:
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            kind = kinds.get(prefix)
            if kind == "l":
                raise ArchiveError(f"{e.path}: below the archive's symlink {prefix} (writing it "
                                   "would follow the link)")
            if kind == "f":
                raise ArchiveError(f"{e.path}: below the archive's regular file {prefix}")
    return entries


def _entry(obj: object, index: int) -> Entry:
    if not isinstance(obj, dict):
        raise ArchiveError(f"file object {index} is not an object")
    path = check_path(obj.get("path"))
    kind, mode, size = obj.get("type"), obj.get("mode"), obj.get("size", 0)
    if kind not in TYPES:
        raise ArchiveError(f"{path}: unknown type {kind!r} (expected f, d or l)")
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise ArchiveError(f"{path}: bad mode {mode!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArchiveError(f"{path}: bad size {size!r}")
    encoding, data = obj.get("encoding"), obj.get("data")
    if kind == "d":
        return Entry(path, "d", mode)
    if kind == "l":
        if encoding != "utf-8" or not isinstance(data, str) or not data or "\0" in data:
            raise ArchiveError(f"{path}: a symlink needs a utf-8 target")
        return Entry(path, "l", mode, target=data)
    if data is None:
        if size:
            raise ArchiveError(f"{path}: {size} bytes but no data")
        return Entry(path, "f", mode)
    if encoding == "base64":
        import base64
        import binascii

        try:
            inline = base64.b64decode(data, validate=True) if isinstance(data, str) else None
        except (binascii.Error, ValueError):
            inline = None
        if inline is None or len(inline) != size:
            raise ArchiveError(f"{path}: inline data is not base64 of {size} bytes")
        return Entry(path, "f", mode, size, inline=inline)
    if encoding == "blobvec":
        return Entry(path, "f", mode, size, chunks=_chunks(path, data, size))
    raise ArchiveError(f"{path}: unknown encoding {encoding!r} (expected base64 or blobvec)")


def _chunks(path: str, data: object, size: int) -> tuple[Chunk, ...]:
    if not isinstance(data, list) or not data:
        raise ArchiveError(f"{path}: blobvec must be a non-empty list")
    chunks, offset = [], 0
    for item in data:
        if (not isinstance(item, list) or len(item) != 3 or item[0] != offset
                or not isinstance(item[1], int) or isinstance(item[1], bool)
                or not 0 < item[1] <= MAX_BLOB_SIZE):
            raise ArchiveError(f"{path}: bad blobvec entry {str(item)[:120]} (expected "
                               f"[{offset}, SIZE, BLOBREF])")
        try:
            ref = check_blobref(item[2])
        except BlobrefError as exc:
            raise ArchiveError(f"{path}: {exc}") from None
        chunks.append(Chunk(offset, item[1], ref))
        offset += item[1]
    if offset != size:
        raise ArchiveError(f"{path}: blobvec covers {offset} bytes, the file has {size}")
    return tuple(chunks)
