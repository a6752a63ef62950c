"""Broker attributes (`-S attr=value`), named and defaulted like flux-broker-attributes(7)."""

from __future__ import annotations

from fluxnode.agent.broker import broker_log

DEFAULT_LOCAL_URI = "local:///run/fluxnode/local"

# attributes a user may set on the command line, with a one-line meaning each
SETTABLE = {
    "tbon.topo": "topology spec (kary:K, binomial, custom); default from [tbon] topo",
    "rundir": "directory for the local socket and run-time files",
    "statedir": "directory for persistent module state",
    "local-uri": "URI of the local connector socket (local://PATH)",
    "broker.quorum": "number of brokers (or idset of ranks) that must be online",
    "log-stderr-level": "syslog level 0-7 (or name) at which to log to stderr",
    "log-filename": "also log to this file",
    "broker.modules": "comma list of python modules to load on rank 0",
    "resource.override": "JSON/TOML file describing this node's resources (tests)",
    # limits (SECURITY.md): sizes in bytes, with an optional k/M/G suffix (powers of 1024)
    "connector.max-message": "largest message a local client may send (default 64M)",
    "connector.input-budget": "partly received messages of all local clients (default 128M)",
    "connector.output-pause": "answers waiting unread before a client is not read (default 4M)",
    "connector.output-limit": "answers waiting unread before a client is cut off (default 128M)",
    "jobspec.max-bytes": "largest jobspec text sched.alloc takes (default 1M)",
    "jobspec.max-depth": "deepest nesting of a jobspec (default 64)",
    "jobspec.max-nodes": "YAML nodes of a jobspec, aliases counted as used (default 4096)",
    "tbon.pending-max": "TBON connections without a CURVE handshake yet, in all (default 128)",
    "tbon.pending-per-address": "the same, from one IP address (default 16)",
    "tbon.fd-reserve": "descriptors under the limit kept from unproved TBON peers (default 32)",
    "content.hash": "hash of content store blobrefs: sha1 (default) or sha256",
    "content.cache-size": "bytes of fetched blobs a non-leader broker caches (default 64M)",
    "content.send-rate": "bytes per second of blobs this broker sends its children (default: "
                         "no limit)",
}
SIZE_ATTRS = ("connector.max-message", "connector.input-budget", "connector.output-pause",
              "connector.output-limit", "jobspec.max-bytes", "content.cache-size",
              "content.send-rate")
COUNT_ATTRS = ("jobspec.max-depth", "jobspec.max-nodes", "tbon.pending-max",
               "tbon.pending-per-address", "tbon.fd-reserve")
CONTENT_HASHES = ("sha1", "sha256")  # RFC 10 hash names the content store knows (HASHES)
_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

_LEVELS = {
    "emerg": 0, "alert": 1, "crit": 2, "err": 3, "error": 3, "warning": 4, "warn": 4,
    "notice": 5, "info": 6, "debug": 7,
}


class AttrError(ValueError):
    """A bad -S attribute: unknown name, missing '=', or an invalid value."""


def parse_settings(settings: list[str] | tuple[str, ...]) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise AttrError(f"-S {item!r}: expected attr=value")
        if name not in SETTABLE:
            raise AttrError(f"-S {name}: unknown attribute (known: {', '.join(sorted(SETTABLE))})")
        if name in SIZE_ATTRS or name in COUNT_ATTRS:
            size(name, value)  # refused now, not when the broker starts
        if name == "content.hash" and value not in CONTENT_HASHES:
            # refused now: a worker builds its content store with its first request
            raise AttrError(f"content.hash: {value!r} is not sha1 or sha256")
        attrs[name] = value
    return attrs


def size(name: str, value: str) -> int:
    """A limit attribute's value: a positive integer (bytes may end in k, M or G)."""
    text = value.strip()
    suffix = text[-1:].lower() if text[-1:].isalpha() and name in SIZE_ATTRS else ""
    number = text[: len(text) - len(suffix)]
    if suffix not in _SUFFIXES or not number.isdigit() or len(number) > 15 or int(number) < 1:
        raise AttrError(f"{name}: {value!r} is not a positive "
                        + ("size (bytes, or with k, M or G)" if name in SIZE_ATTRS else "integer"))
    return int(number) * _SUFFIXES[suffix]


def sizes(attrs: dict[str, str], prefix: str) -> dict[str, int]:
    """The limit attributes under `prefix` that are set, as keyword names: for
    ``connector.`` ``{"max_message": 67108864, ...}``."""
    return {name[len(prefix):].replace("-", "_"): size(name, value)
            for name, value in attrs.items()
            if name.startswith(prefix) and (name in SIZE_ATTRS or name in COUNT_ATTRS)}


def stderr_level(value: str) -> int:
    """Map a syslog level (number or name) to a logging level (`broker_log`'s numbers)."""
    v = value.strip().lower()
    if v.isdigit():
        n = int(v)
    elif v in _LEVELS:
        n = _LEVELS[v]
    else:
        raise AttrError(f"log-stderr-level: {value!r} is not a syslog level 0-7 or a level name")
    if not 0 <= n <= 7:
        raise AttrError(f"log-stderr-level: {n} is outside 0-7")
    if n <= 3:
        return broker_log.ERROR
    if n == 4:
        return broker_log.WARNING
    if n <= 6:
        return broker_log.INFO
    return broker_log.DEBUG
