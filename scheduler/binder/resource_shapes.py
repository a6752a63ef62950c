"""The leader's resource list in a form that fits one ConfigMap at any cluster size.

Why: ``resource.list`` answers one entry per node and state (rank, hostname, core and GPU
counts and ids). Written as it is, 20,000 nodes are about 2 MB of JSON, and the API server
refuses a ConfigMap whose values add up to more than 1 MiB (pkg/apis/core/validation,
ValidateConfigMap: data plus binaryData, decoded). So the publisher writes *shapes*: in each
state, the nodes whose entries are the same but for rank and hostname make one group, their
ranks an RFC 22 idset and their hostnames an RFC 29 hostlist in the same order (a cluster
of a few machine types and allocation patterns is a few dozen groups). A document still
larger than `INLINE_MAX` (nodes all different) goes gzip'd into ``binaryData``, where even
20,000 nodes of distinct shapes stay well under the limit (measured in
tests/scheduler/binder/test_resource_shapes.py). Small documents stay readable text in
``data``, which ``kubectl get configmap -o yaml`` shows as it is. Should even that not fit
(far more nodes, each unlike the others), the groups keep the counts and leave out the core
and GPU ids (`fitting`): what ``resource list`` prints needs only the counts.

Reading is bounded, as the object may be anyone's: at most `MAX_JSON` bytes are
decompressed, an idset or hostlist is expanded up to `MAX_NODES` ids, and a group whose
ranks and hosts differ in number is an error naming it. Version 1 of the document (the
per-node entries as resource.list gives them, before shapes) is still read.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib

from fluxnode.broker_conf import hostlist, idset

VERSION = 2
STATES = ("free", "allocated", "down")
SHAPE_FIELDS = ("ncores", "ngpus", "cores", "gpus")  # what a group's nodes share
COUNT_FIELDS = ("ncores", "ngpus")  # ... when the ids do not fit (see `fitting`)
INLINE_MAX = 256 * 1024  # bytes of JSON kept as text in data; above, gzip'd in binaryData
MAX_JSON = 64 * 1024 * 1024  # bytes a reader decompresses at most
MAX_NODES = hostlist.MAX_HOSTS  # nodes a reader expands at most (every state together)
MAX_OBJECT = 1024 * 1024  # what the API server accepts in one ConfigMap's values


class ShapesError(ValueError):
    """A document that is not a resource listing this version reads; names what is wrong."""


def group(listing: dict, fields: tuple[str, ...] = SHAPE_FIELDS) -> dict:
    """The shapes document of `listing` (per state, per-node entries with rank, hostname and
    SHAPE_FIELDS), nodes grouped by `fields`: per state, groups in the order of their lowest
    rank."""
    doc: dict = {"version": VERSION}
    for state in STATES:
        groups: dict[tuple, tuple[list[int], list[str]]] = {}
        for e in sorted(listing.get(state) or [], key=lambda e: e["rank"]):
            ranks, hosts = groups.setdefault(tuple(e.get(k) for k in fields), ([], []))
            ranks.append(e["rank"])
            hosts.append(e["hostname"])
        doc[state] = [
            {"ranks": idset.encode(ranks), "hosts": hostlist.encode(hosts),
             **{k: v for k, v in zip(fields, shape, strict=True) if v is not None}}
            for shape, (ranks, hosts) in groups.items()]
    return doc


def ungroup(doc: dict) -> dict:
    """The per-node listing (entries in rank order per state) of a shapes document; a version
    1 document is the listing itself. Raises ShapesError naming what is wrong."""
    if not isinstance(doc, dict) or not all(isinstance(doc.get(s, []), list) for s in STATES):
        raise ShapesError("not a free/allocated/down listing")
    if doc.get("version", 1) == 1:
        return {s: doc.get(s, []) for s in STATES}
    if doc["version"] != VERSION:
        raise ShapesError(f"version {doc['version']!r} (this plugin reads 1 and {VERSION}: "
                          "a newer binder? update the plugin)")
    left = MAX_NODES
    out: dict[str, list[dict]] = {}
    for state in STATES:
        entries = []
        for i, g in enumerate(doc.get(state, [])):
            where = f"{state}[{i}]"
            if not isinstance(g, dict) or not isinstance(g.get("ranks"), str) \
                    or not isinstance(g.get("hosts"), str):
                raise ShapesError(f"{where}: needs ranks (an idset) and hosts (a hostlist)")
            try:
                ranks = idset.decode(g["ranks"], limit=left)
                hosts = hostlist.decode(g["hosts"], limit=left)
            except ValueError as exc:  # IdsetError, HostlistError
                raise ShapesError(f"{where}: {exc}") from None
            if len(ranks) != len(hosts):
                raise ShapesError(f"{where}: {len(ranks)} ranks but {len(hosts)} hosts")
            left -= len(ranks)
            shape = {k: g[k] for k in SHAPE_FIELDS if k in g}
            for k in ("ncores", "ngpus"):
                if not isinstance(shape.get(k, 0), int):
                    raise ShapesError(f"{where}.{k}: must be an integer")
            entries += [{"rank": r, "hostname": h, **shape}
                        for r, h in zip(ranks, hosts, strict=True)]
        out[state] = sorted(entries, key=lambda e: e["rank"])
    return out


def object_size(data: dict[str, str | None], binary: dict[str, str | None]) -> int:
    """Bytes of a ConfigMap's values as the API server counts them (binaryData decoded)."""
    return sum(len(v.encode()) for v in data.values() if v is not None) + sum(
        len(base64.b64decode(v)) for v in binary.values() if v is not None)


def encode(doc: dict, text_key: str, gzip_key: str) -> tuple[dict, dict]:
    """(data, binaryData) for a merge patch holding `doc`: as text under `text_key`, or gzip'd
    under `gzip_key` when larger than INLINE_MAX; the other key None (removed)."""
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    if len(text) <= INLINE_MAX:
        return {text_key: text}, {gzip_key: None}
    packed = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    return {text_key: None}, {gzip_key: base64.b64encode(packed).decode()}


def fitting(listing: dict, text_key: str, gzip_key: str,
            budget: int) -> tuple[dict, dict, bool]:
    """(data, binaryData, ids kept) of `listing` in at most `budget` bytes of values: its
    shapes with the core and GPU ids, else with counts only. Raises ShapesError when even
    that does not fit."""
    for fields in (SHAPE_FIELDS, COUNT_FIELDS):
        data, binary = encode(group(listing, fields), text_key, gzip_key)
        size = object_size(data, binary)
        if size <= budget:
            return data, binary, fields == SHAPE_FIELDS
    nodes = sum(len(listing.get(s) or []) for s in STATES)
    raise ShapesError(f"{nodes} node entries take {size} bytes even as counts, over the "
                      f"{budget} a ConfigMap can hold")


def decode(data: dict, binary: dict, text_key: str, gzip_key: str) -> dict | None:
    """The document a ConfigMap holds (None when it holds none); ShapesError when it does
    not parse or decompresses to more than MAX_JSON bytes."""
    if binary.get(gzip_key):
        try:
            packed = base64.b64decode(binary[gzip_key], validate=True)
            inflate = zlib.decompressobj(wbits=31)  # gzip
            raw = inflate.decompress(packed, MAX_JSON)
        except (binascii.Error, ValueError, zlib.error) as exc:
            raise ShapesError(f"binaryData {gzip_key}: {exc}") from None
        if inflate.unconsumed_tail:
            raise ShapesError(f"binaryData {gzip_key}: more than {MAX_JSON} bytes decompressed")
        text: str | bytes = raw
    elif data.get(text_key):
        text = data[text_key]
    else:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ShapesError(f"{text_key}: {exc}") from None
