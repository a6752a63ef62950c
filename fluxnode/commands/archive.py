"""`fluxnode archive create|list|extract|remove`: put files on every node, as flux-archive(1).

`create` reads the files here (below -C DIR), stores their content in the leader's content
store (``content.store``, large files in --chunksize blobs, small ones inline in the index)
and commits the index (``archive.create``). `extract` asks rank 0 to write the archive on
the target ranks' nodes (``archive.extract``, which travels down the tree; each broker
fetches blobs from its parent). The services are in fluxnode.agent.broker.archive_service;
this file holds the options, the walk of the local files and the output.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import sys
from collections import deque
from pathlib import Path

import click

from fluxnode.agent.broker.archive_format import (
    DEFAULT_NAME,
    ArchiveError,
    Chunk,
    Entry,
    check_name,
    check_path,
)
from fluxnode.agent.broker.client import Client, RPCError
from fluxnode.agent.broker.content_store import MAX_BLOB_SIZE, encode_blob, matches
from fluxnode.commands.common import connect, connection_options, prefixed, rpc, rpc_errstr

STORE_WINDOW = 8  # content.store requests in flight
EXTRACT_TIMEOUT = 7 * 24 * 3600.0  # extract waits for the tree's answer (Ctrl-C stops it)
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([kKMG]?)")
_UNITS = {"": 1, "k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str, option: str) -> int:
    """N with an optional k/K/M/G suffix (powers of 1024), as flux-archive(1) takes them."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise click.BadParameter(f"{text!r} is not a size (N with optional k, K, M or G)",
                                 param_hint=option)
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _name_option(command):
    return click.option("-n", "--name", default=DEFAULT_NAME, show_default=True, metavar="NAME",
                        help="archive name")(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def archive() -> None:
    """Store files on the leader and extract them on nodes.

    An archive is kept in the leader's content store; `extract` writes it on every node
    of the target ranks.
    """


def _check_name(name: str) -> str:
    try:
        return check_name(name)
    except ArchiveError as exc:
        raise click.BadParameter(str(exc), param_hint="--name") from None


# -- create ------------------------------------------------------------------------------
class _Walker:
    """The archive's entries for PATH arguments below `root`, contents stored on the way."""

    def __init__(self, client: Client, root: Path, chunksize: int, threshold: int,
                 verbose: bool) -> None:
        self.client = client
        self.root = root
        self.chunksize = chunksize
        self.threshold = threshold
        self.verbose = verbose
        self.entries: list[Entry] = []
        self.seen: set[str] = set()

    def add(self, arg: str) -> None:
        path = arg.rstrip("/") or arg
        while path.startswith("./"):
            path = path[2:]
        try:
            check_path(path)
        except ArchiveError as exc:
            raise click.ClickException(f"archive create: {exc}") from None
        self._add(path)

    def _add(self, path: str) -> None:
        if path in self.seen:
            return
        full = self.root / path
        try:
            st = full.lstat()
        except OSError as exc:
            raise click.ClickException(f"archive create: {full}: {exc.strerror}") from None
        self.seen.add(path)
        mode = stat.S_IMODE(st.st_mode)
        if self.verbose:
            click.echo(path, err=True)
        if stat.S_ISDIR(st.st_mode):
            self.entries.append(Entry(path, "d", mode))
            try:
                names = sorted(os.listdir(full))
            except OSError as exc:
                raise click.ClickException(f"archive create: {full}: {exc.strerror}") from None
            for name in names:
                self._add(f"{path}/{name}")
        elif stat.S_ISLNK(st.st_mode):
            self.entries.append(Entry(path, "l", mode, target=os.readlink(full)))
        elif stat.S_ISREG(st.st_mode):
            self.entries.append(self._file(path, full, mode))
        else:
            raise click.ClickException(f"archive create: {full}: not a regular file, directory "
                                       "or symbolic link")

    def _file(self, path: str, full: Path, mode: int) -> Entry:
        try:
            with open(full, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= self.threshold and self.threshold:
                    data = f.read()
                    return Entry(path, "f", mode, len(data), inline=data or None)
                return Entry(path, "f", mode, *self._store(f, full))
        except OSError as exc:
            raise click.ClickException(f"archive create: {full}: {exc.strerror}") from None

    def _store(self, f, full: Path) -> tuple[int, None, tuple[Chunk, ...]]:
        """Store the file in chunks, STORE_WINDOW requests in flight; check each blobref."""
        chunks: list[Chunk] = []
        pending: deque[tuple[int, int, bytes, int]] = deque()
        offset = 0

        def finish_one() -> None:
            off, size, data, tag = pending.popleft()
            msg = self.client.recv(tag)
            if msg.errnum:
                raise click.ClickException(prefixed("content.store", msg.errstr or "failed"))
            ref = (msg.decode_payload() or {}).get("blobref")
            if not isinstance(ref, str) or not matches(ref, data):
                raise click.ClickException(f"archive create: {full}: the leader answered "
                                           f"blobref {ref!r}, which does not match the data")
            chunks.append(Chunk(off, size, ref))

        while True:
            data = f.read(self.chunksize or MAX_BLOB_SIZE)
            if not data:
                break
            tag = self.client.send("content.store", {"data": encode_blob(data)}, nodeid=0)
            pending.append((offset, len(data), data, tag))
            offset += len(data)
            if len(pending) >= STORE_WINDOW:
                finish_one()
        while pending:
            finish_one()
        return offset, None, tuple(chunks)


@archive.command()
@_name_option
@click.option("-C", "--directory", "directory", default=".", metavar="DIR",
              help="read PATHs relative to DIR")
@click.option("--overwrite", is_flag=True, help="replace an archive of that name")
@click.option("--chunksize", default="1M", show_default=True, metavar="N",
              help="largest content blob (k, M, G suffixes; 0: the 32M maximum)")
@click.option("--small-file-threshold", "threshold", default="1K", show_default=True,
              metavar="N", help="files up to N bytes go into the index itself (0: never)")
@click.option("-v", "--verbose", is_flag=True, help="list files on stderr as they are archived")
@connection_options
@click.argument("paths", nargs=-1, required=True)
def create(name: str, directory: str, overwrite: bool, chunksize: str, threshold: str,
           verbose: bool, uri: str | None, curve_cert: str | None, paths: tuple[str, ...]) -> None:
    """Store PATHs on the leader as archive NAME.

    PATHs are relative to -C DIR; the files go to the leader's content store.
    """
    name = _check_name(name)
    size = parse_size(chunksize, "--chunksize")
    if size > MAX_BLOB_SIZE:
        raise click.BadParameter(f"{chunksize} exceeds the {MAX_BLOB_SIZE >> 20}M maximum",
                                 param_hint="--chunksize")
    root = Path(directory)
    if not root.is_dir():
        raise click.ClickException(f"archive create: {directory}: not a directory")
    with connect(uri, curve_cert, timeout=300.0) as client:
        walker = _Walker(client, root, size, parse_size(threshold, "--small-file-threshold"),
                         verbose)
        for path in paths:
            walker.add(path)
        rpc(client, "archive.create", {"name": name, "overwrite": overwrite,
                                       "archive": [e.to_json() for e in walker.entries]})


# -- list --------------------------------------------------------------------------------
@archive.command("list")
@_name_option
@click.option("-l", "--long", "long_", is_flag=True, help="show type, mode and size")
@click.option("--raw", is_flag=True, help="print the RFC 37 file objects as JSON")
@connection_options
@click.argument("pattern", required=False)
def list_(name: str, long_: bool, raw: bool, uri: str | None, curve_cert: str | None,
          pattern: str | None) -> None:
    """List the files of archive NAME (those matching PATTERN)."""
    import json

    name = _check_name(name)
    with connect(uri, curve_cert) as client:
        objects = rpc(client, "archive.list", {"name": name})["archive"]
    for obj in objects:
        if pattern and not fnmatch.fnmatchcase(obj["path"], pattern):
            continue
        if raw:
            click.echo(json.dumps(obj, separators=(",", ":")))
        elif long_:
            link = f" -> {obj['data']}" if obj["type"] == "l" else ""
            click.echo(f"{obj['type']} {obj['mode']:04o} {obj['size']:>10} {obj['path']}{link}")
        else:
            click.echo(obj["path"])


# -- remove ------------------------------------------------------------------------------
@archive.command()
@_name_option
@click.option("-f", "--force", is_flag=True, help="do not fail if the archive does not exist")
@connection_options
def remove(name: str, force: bool, uri: str | None, curve_cert: str | None) -> None:
    """Remove archive NAME and the blobs no other archive uses."""
    name = _check_name(name)
    with connect(uri, curve_cert) as client:
        rpc(client, "archive.remove", {"name": name, "force": force})


# -- extract -----------------------------------------------------------------------------
@archive.command()
@_name_option
@click.option("-C", "--directory", "directory", default=".", metavar="DIR",
              help="write below DIR on each node ({{rank}} becomes the broker's rank)")
@click.option("-r", "--rank", "ranks", default="all", show_default=True, metavar="IDSET",
              help="ranks whose nodes get the files (RFC 22 idset or 'all')")
@click.option("--overwrite", is_flag=True, help="replace files that exist with other content")
@click.option("-v", "--verbose", is_flag=True, help="per-rank counts on stderr")
@connection_options
def extract(name: str, directory: str, ranks: str, overwrite: bool, verbose: bool,
            uri: str | None, curve_cert: str | None) -> None:
    """Write archive NAME below -C DIR on the target ranks' nodes."""
    name = _check_name(name)
    directory = os.path.abspath(directory)
    with connect(uri, curve_cert, timeout=EXTRACT_TIMEOUT) as client:
        try:
            answer = client.rpc("archive.extract", {"name": name, "directory": directory,
                                                    "targets": ranks, "overwrite": overwrite},
                                nodeid=0)
        except RPCError as exc:
            raise click.ClickException(prefixed("archive.extract", rpc_errstr(exc))) from None
        errors = answer.get("errors") or {}
        hosts = rpc(client, "overlay.topology", {})["hostnames"] if errors else []
    if verbose:
        for rank, s in sorted((answer.get("ranks") or {}).items(), key=lambda kv: int(kv[0])):
            click.echo(f"rank {rank}: {s['written']} written, {s['skipped']} skipped, "
                       f"{s['loaded']} blobs loaded, {s['bytes']} bytes", err=True)
    for rank, why in sorted(errors.items(), key=lambda kv: int(kv[0])):
        host = hosts[int(rank)] if int(rank) < len(hosts) else "?"
        click.echo(f"fluxnode-archive: {host} (rank {rank}): {why}", err=True)
    if errors:
        sys.exit(1)
