"""A node vertex's basename and id from its hostname, as Fluxion's readers name them.

``node12`` is basename ``node``, id 12; a hostname without a trailing number keeps
its whole name and id -1. The readers that make node vertices from hostnames (hwloc,
rv1exec) share this one rule, which R itself uses (`broker_conf.rv1.split_hostname`).
"""

from __future__ import annotations

from fluxnode.broker_conf.rv1 import split_hostname

INT64_MAX = 2**63 - 1


class HostnameIdError(ValueError):
    """A hostname whose number is past int64 (Fluxion's split_hostname: std::stoll
    overflows, EOVERFLOW, and the reader fails)."""


def node_name_parts(hostname: str) -> tuple[str, int]:
    """``(basename, id)`` of the node vertex for `hostname` (id -1 without a number).

    Raises HostnameIdError for a number past int64 (leading zeros do not count)."""
    parts = split_hostname(hostname) or (hostname, -1)
    if parts[1] > INT64_MAX:
        raise HostnameIdError(hostname)
    return parts
