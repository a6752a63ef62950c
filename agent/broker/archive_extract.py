"""Writing an archive's files below a directory on this broker's node (the local half of
``archive.extract``).

Nothing is ever written outside the target directory: every path is opened one
component at a time from a descriptor of the directory with ``O_NOFOLLOW`` (a symlink
anywhere on the way, made by the archive or already on disk, is refused, never followed),
and the archive's paths were checked by `archive_format.parse` (no absolute paths, no
``..``). Before anything is written, every path is looked at once, so an extract that
would be refused is refused before it changes anything.

A large file is written into ``.NAME.archive-partial`` beside it, chunk by chunk as its
blobs arrive, and renamed into place when complete. Each blob is hashed and compared with
its blobref before it is written. That makes a re-run after an interruption (a killed
broker, a lost parent) cheap: a file already in place with the right content is skipped,
and of a partial file only the chunks whose bytes do not hash to their blobref are fetched.
A file in place with other content is an error unless `overwrite`.

Blobs are fetched through `load` (the content store: this broker's cache, else the
parent) with at most `WINDOW` in flight; the event loop keeps serving meanwhile.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fluxnode.agent.broker.archive_format import Chunk, Entry
from fluxnode.agent.broker.content_store import LoadCallback, matches

WINDOW = 8  # blob loads in flight per extract
PARTIAL = ".{}.archive-partial"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Load = Callable[[str, LoadCallback], None]


class ExtractError(Exception):
    """Why an extract stopped; names the path."""


@dataclass
class ExtractStats:
    files: int = 0  # entries in the archive
    written: int = 0  # entries written (created or replaced)
    skipped: int = 0  # entries already in place with the right content
    bytes: int = 0  # bytes of file content written
    loaded: int = 0  # blobs loaded (from the store, the cache or the parent)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _File:
    entry: Entry
    missing: int  # chunks still to write
    fd: int | None = None


@dataclass
class _Plan:
    files: list[_File] = field(default_factory=list)
    fetch: deque[tuple[_File, Chunk]] = field(default_factory=deque)


class Extraction:
    def __init__(self, entries: list[Entry], directory: Path, *, overwrite: bool, load: Load,
                 on_done: Callable[[ExtractStats | None, str | None], None]) -> None:
        self.entries = sorted(entries, key=lambda e: e.path.split("/"))
        self.directory = directory
        self.overwrite = overwrite
        self.load = load
        self.on_done = on_done
        self.stats = ExtractStats(files=len(entries))
        self._root: int | None = None
        self._plan = _Plan()
        self._in_flight = 0
        self._pumping = False
        self._finished = False

    # -- the walk below the directory ------------------------------------------------------
    def _show(self, path: str) -> str:
        return str(self.directory / path)

    def _parent(self, path: str, create: bool) -> int | None:
        """A descriptor of `path`'s parent directory, walked without following symlinks;
        None if a component is missing and not `create`."""
        assert self._root is not None
        fd = os.dup(self._root)
        parts = path.split("/")[:-1]
        try:
            for i, part in enumerate(parts):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    where = "/".join(parts[: i + 1])
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        kind = "a symlink" if _is_link(fd, part) else "not a directory"
                        raise ExtractError(f"{self._show(path)}: refused: {self._show(where)} "
                                           f"is {kind} (extract never writes through one)") \
                            from None
                    raise
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    # -- start: check and plan everything, write what needs no blob ------------------------
    def start(self) -> None:
        try:
            self._open_root()
            self._check_all()
            self._write_local()
        except ExtractError as exc:
            self._finish(str(exc))
            return
        except OSError as exc:
            self._finish(f"{exc.filename or self.directory}: {exc.strerror or exc}")
            return
        self._pump()

    def _open_root(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._root = os.open(self.directory, _DIR_FLAGS)
        except OSError as exc:
            raise ExtractError(f"{self.directory}: {exc.strerror}") from None

    def _check_all(self) -> None:
        """Refuse before writing anything: a path through a symlink or a non-directory, or
        onto something that is in the way."""
        for e in self.entries:
            fd = self._parent(e.path, create=False)
            if fd is None:
                continue
            try:
                st = _lstat(fd, _base(e.path))
            finally:
                os.close(fd)
            if st is None:
                continue
            if e.type == "d":
                if stat.S_ISLNK(st.st_mode):
                    raise ExtractError(f"{self._show(e.path)}: refused: is a symlink on disk, "
                                       "the archive has a directory there")
                if not stat.S_ISDIR(st.st_mode) and not self.overwrite:
                    raise ExtractError(f"{self._show(e.path)}: exists and is not a directory "
                                       "(use --overwrite)")

    def _write_local(self) -> None:
        for e in self.entries:
            if e.type == "d":
                self._mkdir(e)
            elif e.type == "l":
                self._symlink(e)
            elif e.chunks:
                self._plan_chunks(e)
            else:
                self._small_file(e, e.inline or b"")

    @contextmanager
    def _at(self, e: Entry) -> Iterator[tuple[int, str, os.stat_result | None]]:
        """(its directory's fd, its name, what is there now) for `e`, the parents made; the
        directory is closed after."""
        fd = self._parent(e.path, create=True)
        assert fd is not None
        try:
            base = _base(e.path)
            yield fd, base, _lstat(fd, base)
        finally:
            os.close(fd)

    def _mkdir(self, e: Entry) -> None:
        with self._at(e) as (fd, base, st):
            if st is not None and not stat.S_ISDIR(st.st_mode):
                _unlink(fd, base)  # only reached with overwrite (checked above)
                st = None
            if st is None:
                os.mkdir(base, 0o700, dir_fd=fd)
                self.stats.written += 1
            else:
                self.stats.skipped += 1

    def _symlink(self, e: Entry) -> None:
        with self._at(e) as (fd, base, st):
            if st is not None:
                if stat.S_ISLNK(st.st_mode) and os.readlink(base, dir_fd=fd) == e.target:
                    self.stats.skipped += 1
                    return
                self._in_the_way(fd, e, st)
            os.symlink(e.target or "", base, dir_fd=fd)
            self.stats.written += 1

    def _in_the_way(self, fd: int, e: Entry, st: os.stat_result) -> None:
        """Something else is at `e`'s path: replaced with --overwrite, an error otherwise."""
        if not self.overwrite:
            raise ExtractError(f"{self._show(e.path)}: exists with other content "
                               "(use --overwrite)")
        if stat.S_ISDIR(st.st_mode):
            raise ExtractError(f"{self._show(e.path)}: is a directory on disk")
        _unlink(fd, _base(e.path))

    def _small_file(self, e: Entry, data: bytes) -> None:
        with self._at(e) as (fd, base, st):
            if st is not None:
                if stat.S_ISREG(st.st_mode) and st.st_size == len(data) \
                        and _read_all(fd, base, len(data)) == data:
                    _fchmod_at(fd, base, e.mode)
                    self.stats.skipped += 1
                    return
                self._in_the_way(fd, e, st)
            partial = PARTIAL.format(base)
            out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fchmod(out, e.mode)
            finally:
                os.close(out)
            os.rename(partial, base, src_dir_fd=fd, dst_dir_fd=fd)
            self.stats.written += 1
            self.stats.bytes += len(data)

    def _plan_chunks(self, e: Entry) -> None:
        with self._at(e) as (fd, base, st):
            if st is not None:
                if stat.S_ISREG(st.st_mode) and st.st_size == e.size \
                        and not self._wrong_chunks(fd, base, e):
                    _fchmod_at(fd, base, e.mode)
                    self.stats.skipped += 1
                    return
                self._in_the_way(fd, e, st)
            partial = PARTIAL.format(base)
            pst = _lstat(fd, partial)
            if pst is not None and not stat.S_ISREG(pst.st_mode):
                raise ExtractError(f"{self._show(e.path)}: refused: {partial} beside it is not "
                                   "a regular file")
            wrong = self._wrong_chunks(fd, partial, e) if pst is not None else list(e.chunks)
        f = _File(e, len(wrong))
        self._plan.files.append(f)
        for chunk in wrong:
            self._plan.fetch.append((f, chunk))
        if not wrong:
            self._complete(f)

    def _wrong_chunks(self, dirfd: int, name: str, e: Entry) -> list[Chunk]:
        """The chunks of file `name` whose bytes do not hash to their blobref."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        try:
            return [c for c in e.chunks if not matches(c.blobref, os.pread(fd, c.size, c.offset))]
        finally:
            os.close(fd)

    # -- fetching --------------------------------------------------------------------------
    def _pump(self) -> None:
        """Start loads up to the window. A load answered from the cache calls back at once;
        the guard turns that recursion into this loop."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while not self._finished and self._plan.fetch and self._in_flight < WINDOW:
                f, chunk = self._plan.fetch.popleft()
                self._in_flight += 1
                self.load(chunk.blobref, lambda d, err, f=f, c=chunk: self._arrived(f, c, d, err))
        finally:
            self._pumping = False
        if not self._finished and not self._in_flight and not self._plan.fetch:
            self._finish(None)

    def _arrived(self, f: _File, chunk: Chunk, data: bytes | None, error: str | None) -> None:
        self._in_flight -= 1
        if self._finished:
            return
        try:
            if data is None:
                raise ExtractError(f"{self._show(f.entry.path)}: {error}")
            if len(data) != chunk.size or not matches(chunk.blobref, data):
                raise ExtractError(f"{self._show(f.entry.path)}: blob {chunk.blobref} failed "
                                   "its hash check")
            self.stats.loaded += 1
            self._write_chunk(f, chunk, data)
        except ExtractError as exc:
            self._finish(str(exc))
            return
        except OSError as exc:
            self._finish(f"{self._show(f.entry.path)}: {exc.strerror or exc}")
            return
        self._pump()

    def _write_chunk(self, f: _File, chunk: Chunk, data: bytes) -> None:
        if f.fd is None:
            fd = self._parent(f.entry.path, create=True)
            assert fd is not None
            try:
                f.fd = os.open(PARTIAL.format(_base(f.entry.path)), os.O_RDWR | os.O_CREAT
                               | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            finally:
                os.close(fd)
        view, offset = memoryview(data), chunk.offset
        while view:
            n = os.pwrite(f.fd, view, offset)
            view, offset = view[n:], offset + n
        self.stats.bytes += len(data)
        f.missing -= 1
        if f.missing == 0:
            self._complete(f)

    def _complete(self, f: _File) -> None:
        """All chunks in place: size, mode, and rename the partial file onto the name."""
        fd = self._parent(f.entry.path, create=True)
        assert fd is not None
        base = _base(f.entry.path)
        partial = PARTIAL.format(base)
        try:
            out = f.fd if f.fd is not None else os.open(
                partial, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                os.ftruncate(out, f.entry.size)
                os.fchmod(out, f.entry.mode)
            finally:
                os.close(out)
                f.fd = None
            os.rename(partial, base, src_dir_fd=fd, dst_dir_fd=fd)
            self.stats.written += 1
        finally:
            os.close(fd)

    def _finish(self, error: str | None) -> None:
        if self._finished:
            return
        self._finished = True
        for f in self._plan.files:
            if f.fd is not None:
                os.close(f.fd)
                f.fd = None
        if error is None:
            try:
                self._chmod_dirs()
            except OSError as exc:
                error = f"{exc.filename or self.directory}: {exc.strerror or exc}"
        if self._root is not None:
            os.close(self._root)
            self._root = None
        self.on_done(None if error else self.stats, error)

    def _chmod_dirs(self) -> None:
        """Directories get their mode last, deepest first (a read-only one was writable
        while its contents were written)."""
        for e in reversed(self.entries):
            if e.type == "d":
                fd = self._parent(e.path, create=False)
                if fd is not None:
                    try:
                        _fchmod_at(fd, _base(e.path), e.mode)
                    finally:
                        os.close(fd)


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _lstat(dirfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _is_link(dirfd: int, name: str) -> bool:
    st = _lstat(dirfd, name)
    return st is not None and stat.S_ISLNK(st.st_mode)


def _unlink(dirfd: int, name: str) -> None:
    os.unlink(name, dir_fd=dirfd)


def _read_all(dirfd: int, name: str, size: int) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        return os.pread(fd, size + 1, 0)
    finally:
        os.close(fd)


def _fchmod_at(dirfd: int, name: str, mode: int) -> None:
    """chmod of a regular file or directory `name`, never through a symlink (Linux has no
    fchmodat without following: the name is checked first, in a directory opened without
    following any link)."""
    st = _lstat(dirfd, name)
    if st is not None and not stat.S_ISLNK(st.st_mode):
        os.chmod(name, mode, dir_fd=dirfd)
