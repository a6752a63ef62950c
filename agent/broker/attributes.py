"""Broker attributes (`-S attr=value`), named and defaulted like flux-broker-attributes(7)."""

from __future__ import annotations

import logging

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
}

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
        attrs[name] = value
    return attrs


def stderr_level(value: str) -> int:
    """Map a syslog level (number or name) to a logging level."""
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
        return logging.ERROR
    if n == 4:
        return logging.WARNING
    if n <= 6:
        return logging.INFO
    return logging.DEBUG
