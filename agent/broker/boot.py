"""Bootstrap from config: who this broker is in its instance (flux-core's boot_config.c).

A broker starts from broker.toml and its own hostname: the [bootstrap] hosts give its
rank and the instance size, [tbon] topo (or the `tbon.topo` attribute) the tree, and
the command-line attributes fill in the rest (`attr.get` answers from them). Without
[bootstrap] hosts the broker is a singleton, as in flux.

All of this lives in one `InstanceState` that every part of the broker shares: only
``config.reload`` changes it (size, hosts, tree, quorum), in place, so the parts that
hold it always see the current instance.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from fluxnode.agent.broker import attributes
from fluxnode.agent.broker.message import Message, ServiceError
from fluxnode.broker_conf import idset
from fluxnode.broker_conf.config import BrokerConfig
from fluxnode.broker_conf.topology import Topology

DEFAULT_STATEDIR = "/var/lib/fluxnode"


class BrokerError(Exception):
    """The broker cannot start (bad config, hostname not in hosts, socket problems)."""


@dataclass
class InstanceState:
    """The instance as this broker sees it; ``config.reload`` updates it in place."""

    config: BrokerConfig
    hostname: str
    rank: int
    size: int
    hostnames: list[str]
    topology: Topology
    quorum: int
    singleton: bool  # no [bootstrap] hosts: a lone broker, like flux
    statedir: Path
    attrs: dict[str, str]  # what `attr.get` answers: the -S attributes and the derived ones
    given: frozenset[str]  # attribute names set on the command line
    topo_override: str | None  # the `tbon.topo` attribute, which wins over [tbon] topo

    def attr_get(self, msg: Message) -> dict:
        """The `attr.get` service: one attribute by name, or all of them."""
        name = (msg.payload or {}).get("name")
        if name is None:
            return {"attrs": self.attrs}
        if not isinstance(name, str):
            raise ServiceError(
                errno.EPROTO, f"name: must be a string, not {type(name).__name__}"
            )
        if name not in self.attrs:
            raise ServiceError(errno.ENOENT, f"unknown attribute {name!r}")
        return {"name": name, "value": self.attrs[name]}


def parse_quorum(value: str | None, size: int) -> int:
    """`broker.quorum`: a count or an idset of ranks (its size counts); default all."""
    if value is None or value == "":
        return size
    v = value.strip()
    if v.isdigit():
        n = int(v)
    else:
        try:
            n = len(idset.decode(v))
        except ValueError as exc:
            raise BrokerError(f"broker.quorum: {exc}") from None
    if not 1 <= n <= size:
        raise BrokerError(
            f"broker.quorum: {value!r} must be between 1 and the instance size {size}"
        )
    return n


def boot(
    config: BrokerConfig, hostname: str, attrs: dict[str, str], topology: Topology | None = None
) -> InstanceState:
    """This broker's place in the instance; `topology` may be passed already built (the launcher
    shares it)."""
    # the config's own list, not a copy: a copy writes to every name (reference counts), a
    # page each in every broker forked from `fluxnode start` (issue 32); nobody changes it
    hostnames = config.hostnames
    singleton = not hostnames
    if singleton:
        hostnames = [hostname]
    elif not config.has_host(hostname):
        raise BrokerError(f"hostname {hostname!r} is not in the [bootstrap] hosts of {config.path} "
                          f"({len(hostnames)} hosts); use --hostname to pick one")
    rank = config.rank_of(hostname)
    size = config.size
    topo_spec = attrs.get("tbon.topo") or config.tbon.topo
    if topology is not None and topology.size == config.size:
        tree = topology
    elif topo_spec == config.tbon.topo:
        tree = config.topology()
    else:
        tree = Topology.from_spec(topo_spec, size)
    rundir = attrs.get("rundir")
    local_uri = attrs.get("local-uri") or (
        f"local://{rundir}/local" if rundir else attributes.DEFAULT_LOCAL_URI
    )
    statedir = Path(attrs.get("statedir") or rundir or DEFAULT_STATEDIR)
    quorum = parse_quorum(attrs.get("broker.quorum"), size)
    all_attrs: dict[str, str] = {
        **attrs,
        "rank": str(rank),
        "size": str(size),
        "hostname": hostname,
        "tbon.topo": topo_spec,
        "tbon.endpoint": "" if singleton else config.bind_uri(rank),
        "local-uri": local_uri,
        "broker.quorum": str(quorum),
        "broker.pid": str(os.getpid()),
        "statedir": str(statedir),
    }
    if rundir:
        all_attrs["rundir"] = rundir
    return InstanceState(
        config=config,
        hostname=hostname,
        rank=rank,
        size=size,
        hostnames=hostnames,
        topology=tree,
        quorum=quorum,
        singleton=singleton,
        statedir=statedir,
        attrs=all_attrs,
        given=frozenset(attrs),
        topo_override=attrs.get("tbon.topo") or None,
    )
