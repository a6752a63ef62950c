"""The broker configuration (broker.toml), with Flux's keys and meanings.

Tables and keys follow flux-config-bootstrap(5), flux-config-tbon(5),
flux-config-resource(5) and flux-config-access(5). A config path may be one file or a
directory of ``*.toml`` files merged like Flux's config directory (tables merge, a
value set in two files is an error). Every problem is a `ConfigError` whose message
names the file, the dotted key (``bootstrap.hosts[2].parent``) and what is wrong, so
a node agent can put it straight into a Kubernetes Event.

Durations are RFC 23 FSD strings (``"30s"``) in TOML and float seconds in Python.
``hosts`` entries may be RFC 29 hostlists; a host may appear in several entries (later
entries add ``bind``/``connect``/``parent``), and a broker's rank is the position of its
host's first appearance.

Each table's model and reader is in `config_tables`; this module assembles them into a
`BrokerConfig` (and its derived views: resolved hosts, URIs, topology), checks what
spans tables, and loads files and directories. `config` is the public face: the table
models and `ConfigError` are part of its ``__all__``.

`tomllib` is imported where a file is parsed, not with this module: a broker on a node
reads broker.toml once and then drops the parser (fluxnode/commands/broker_argv.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from fluxnode.broker_conf import fsd, hostlist, idset
from fluxnode.broker_conf.config_tables import (
    TABLE_PARSERS,
    AccessConfig,
    BootstrapConfig,
    ConfigError,
    ExecConfig,
    HostEntry,
    Origins,
    ResourceConfig,
    TbonConfig,
)
from fluxnode.broker_conf.topology import Topology, TopologyError

__all__ = [
    "ConfigError",
    "HostEntry",
    "BootstrapConfig",
    "TbonConfig",
    "ResourceConfig",
    "AccessConfig",
    "ExecConfig",
    "BrokerConfig",
    "ResolvedHost",
    "load",
    "loads",
    "from_dict",
    "dumps",
]

@dataclass(frozen=True)
class ResolvedHost:
    """A single host after hostlist expansion and merging of repeated entries."""

    rank: int
    host: str
    bind: str | None
    connect: str | None
    parent: str | None
    entry: int  # index of the hosts entry that introduced this host


@dataclass
class BrokerConfig:
    """broker.toml as a whole: its tables, where it was read from, and the hosts' index."""

    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    tbon: TbonConfig = field(default_factory=TbonConfig)
    resource: ResourceConfig = field(default_factory=ResourceConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    exec: ExecConfig = field(default_factory=ExecConfig)
    path: Path | None = field(default=None, compare=False)

    # -- hosts -----------------------------------------------------------------
    def _error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.path, key, problem)

    @cached_property
    def hosts(self) -> list[ResolvedHost]:
        """Hosts in rank order (hostlists expanded, repeated hosts merged).

        Resolved once per config (rank_of, bind_uri, connect_uri... all ask, and expanding
        hundreds of hosts each time is slow): a config is a value, so build a new one
        (`load`, `loads`, `from_dict`) rather than editing ``bootstrap.hosts`` afterwards.
        The cache lives outside the dataclass fields, so equality and `to_dict` ignore it.
        """
        return _resolve_hosts(self.bootstrap.hosts, self.path)

    @cached_property
    def hostnames(self) -> list[str]:
        """The hosts' names in rank order, built once per config and shared: callers read
        it and never change it (a broker forked from `fluxnode start` keeps the launcher's
        list; copying it, or building it again, wrote to all N names in each of N brokers,
        issue 32)."""
        return [h.host for h in self.hosts]

    @cached_property
    def _ranks(self) -> dict[str, int]:
        """Host name -> rank (hosts are merged: one each), so `rank_of` does not walk N."""
        return {h.host: h.rank for h in self.hosts}

    def has_host(self, hostname: str) -> bool:
        """Whether `hostname` is in bootstrap.hosts (a dict lookup, not a walk of N names)."""
        return hostname in self._ranks

    @property
    def size(self) -> int:
        """Number of brokers; 1 when no hosts are configured (a single broker)."""
        return max(1, len(self.hosts))

    def rank_of(self, hostname: str) -> int:
        """The broker rank of `hostname`: index of its first entry in bootstrap.hosts."""
        hosts = self.hosts
        if not hosts:
            return 0
        rank = self._ranks.get(hostname)
        if rank is not None:
            return rank
        raise self._error(
            "bootstrap.hosts",
            f"hostname {hostname!r} is not listed "
            f"(hosts: {hostlist.encode(h.host for h in hosts)})",
        )

    def _host(self, rank: int) -> ResolvedHost:
        hosts = self.hosts
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(hosts):
            raise self._error(
                "bootstrap.hosts", f"rank {rank!r} is out of range (size {len(hosts)})"
            )
        return hosts[rank]

    def _substitute(self, pattern: str, host: str, key: str) -> str:
        port = self.bootstrap.default_port
        if "%p" in pattern and port is None:
            raise self._error(key, f"{pattern!r} uses %p but bootstrap.default_port is not set")
        return pattern.replace("%h", host).replace("%p", str(port))

    def bind_uri(self, rank: int) -> str:
        """The ZeroMQ endpoint broker `rank` binds for its children (%h, %p substituted)."""
        h = self._host(rank)
        if h.bind is not None:
            return self._substitute(h.bind, h.host, f"bootstrap.hosts[{h.entry}].bind")
        if self.bootstrap.default_bind is None:
            raise self._error(
                f"bootstrap.hosts[{h.entry}].bind",
                f"no bind URI for {h.host!r} and no bootstrap.default_bind",
            )
        return self._substitute(self.bootstrap.default_bind, h.host, "bootstrap.default_bind")

    def connect_uri(self, rank: int) -> str:
        """The ZeroMQ endpoint children of broker `rank` connect to (%h, %p substituted)."""
        h = self._host(rank)
        if h.connect is not None:
            return self._substitute(h.connect, h.host, f"bootstrap.hosts[{h.entry}].connect")
        if self.bootstrap.default_connect is None:
            raise self._error(
                f"bootstrap.hosts[{h.entry}].connect",
                f"no connect URI for {h.host!r} and no bootstrap.default_connect",
            )
        return self._substitute(self.bootstrap.default_connect, h.host, "bootstrap.default_connect")

    def topology(self) -> Topology:
        """The TBON tree for `tbon.topo`; ``parent`` keys apply with ``custom``."""
        parents: dict[int, int] = {}
        hosts = self.hosts
        by_name = {h.host: h.rank for h in hosts}
        for h in hosts:
            if h.parent is None:
                continue
            key = f"bootstrap.hosts[{h.entry}].parent"
            if not self.tbon.topo.startswith("custom"):
                raise self._error(
                    key,
                    "parent is only allowed with tbon.topo = \"custom\" (topo is "
                    f"{self.tbon.topo!r})",
                )
            if h.parent not in by_name:
                raise self._error(
                    key, f"parent {h.parent!r} of {h.host!r} is not a host in bootstrap.hosts"
                )
            if h.rank == 0:
                raise self._error(
                    key, f"rank 0 ({h.host}) may not have a parent in a tree topology"
                )
            parents[h.rank] = by_name[h.parent]
        try:
            return Topology.from_spec(self.tbon.topo, max(1, len(hosts)), parents or None)
        except TopologyError as exc:
            problem = str(exc)
            names = [h.host for h in hosts]
            if names and "cycle" in problem:
                problem += " (" + ", ".join(f"{r}={names[r]}" for r in sorted(parents)) + ")"
            raise self._error("bootstrap.hosts" if parents else "tbon.topo", problem) from None

    def excluded_ranks(self) -> list[int]:
        """Ranks named by resource.exclude (an idset of ranks or a hostlist)."""
        spec = self.resource.exclude
        if not spec:
            return []
        try:
            ranks = idset.decode(spec)
        except idset.IdsetError:
            ranks_by_name = {h.host: h.rank for h in self.hosts}
            out = set()
            for name in hostlist.decode(spec):
                if name not in ranks_by_name:
                    raise self._error(
                        "resource.exclude", f"{name!r} is not a host in bootstrap.hosts"
                    ) from None
                out.add(ranks_by_name[name])
            return sorted(out)
        for r in ranks:
            if r >= self.size:
                raise self._error(
                    "resource.exclude", f"rank {r} is out of range (size {self.size})"
                )
        return ranks

    # -- serialization -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The TOML-shaped mapping (Flux key names, FSD strings), omitting unset keys."""
        b = self.bootstrap
        boot: dict[str, Any] = {}
        for key in ("curve_cert", "default_port", "default_bind", "default_connect"):
            if getattr(b, key) is not None:
                boot[key] = getattr(b, key)
        if b.enable_ipv6:
            boot["enable_ipv6"] = True
        if b.hosts:
            boot["hosts"] = [
                {
                    k: v
                    for k, v in (
                        ("host", e.host),
                        ("bind", e.bind),
                        ("connect", e.connect),
                        ("parent", e.parent),
                    )
                    if v is not None
                }
                for e in b.hosts
            ]
        t = self.tbon
        tbon: dict[str, Any] = {"topo": t.topo}
        for key in _TBON_DURATIONS:
            tbon[key] = fsd.format(getattr(t, key))
        tbon["zmqdebug"] = t.zmqdebug
        tbon["child_rcvhwm"] = t.child_rcvhwm
        tbon["prefertcp"] = t.prefertcp
        if t.interface_hint is not None:
            tbon["interface-hint"] = t.interface_hint
        r = self.resource
        res: dict[str, Any] = {
            k: getattr(r, k)
            for k in ("path", "scheduling", "exclude", "override")
            if getattr(r, k) is not None
        }
        res.update({k: getattr(r, k) for k in ("noverify", "norestrict") if getattr(r, k)})
        out: dict[str, Any] = {"bootstrap": boot, "tbon": tbon}
        if res:
            out["resource"] = res
        out["access"] = {
            "allow-guest-user": self.access.allow_guest_user,
            "allow-root-owner": self.access.allow_root_owner,
        }
        if self.exec.allow:
            out["exec"] = {"allow": True}
        return out

    def dumps(self) -> str:
        return dumps(self)


_TBON_DURATIONS = ("tcp_user_timeout", "connect_timeout", "torpid_min", "torpid_max")


def dumps(cfg: BrokerConfig) -> str:
    """Serialize to TOML (tomli-w); ``load`` of the result gives an equal BrokerConfig.
    (tomli-w is imported here: a broker reads its config and never writes one.)"""
    import tomli_w

    return tomli_w.dumps(cfg.to_dict())


def _resolve_hosts(entries: list[HostEntry], path: Path | None) -> list[ResolvedHost]:
    resolved: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for i, e in enumerate(entries):
        try:
            names = hostlist.decode(e.host)
        except hostlist.HostlistError as exc:
            raise ConfigError(path, f"bootstrap.hosts[{i}].host", str(exc)) from None
        for name in names:
            attrs = {"bind": e.bind, "connect": e.connect, "parent": e.parent}
            if name not in index:
                index[name] = len(resolved)
                resolved.append({"host": name, "entry": i, "set_by": {}, **attrs})
                for k, v in attrs.items():
                    if v is not None:
                        resolved[-1]["set_by"][k] = i
                continue
            rec = resolved[index[name]]
            for k, v in attrs.items():
                if v is None:
                    continue
                if rec[k] is not None and rec[k] != v:
                    raise ConfigError(
                        path,
                        f"bootstrap.hosts[{i}].{k}",
                        f"{name!r} already has {k} = {rec[k]!r} from "
                        f"bootstrap.hosts[{rec['set_by'][k]}]; conflicting {v!r}",
                    )
                rec[k] = v
                rec["set_by"].setdefault(k, i)
    return [
        ResolvedHost(
            rank=r,
            host=d["host"],
            bind=d["bind"],
            connect=d["connect"],
            parent=d["parent"],
            entry=d["entry"],
        )
        for r, d in enumerate(resolved)
    ]




def from_dict(
    data: Mapping[str, Any], path: str | Path | None = None, *, origins: Origins | None = None
) -> BrokerConfig:
    """Validate a parsed TOML mapping into a BrokerConfig (every check `load` does)."""
    origins = origins or Origins(Path(path) if path is not None else None)
    unknown = sorted(set(data) - set(TABLE_PARSERS))
    if unknown:
        raise ConfigError(
            origins.file_for(unknown[0]),
            unknown[0],
            f"unknown table {unknown[0]!r} (known: {', '.join(TABLE_PARSERS)})",
        )
    parts = {name: parse(data.get(name, {}), origins) for name, parse in TABLE_PARSERS.items()}
    cfg = BrokerConfig(**parts, path=Path(path) if path is not None else origins.default)
    _validate(cfg, origins)
    return cfg


def _validate(cfg: BrokerConfig, origins: Origins) -> None:
    def err(key: str, problem: str) -> ConfigError:
        return ConfigError(origins.file_for(key), key, problem)

    try:
        hosts = cfg.hosts
    except ConfigError as exc:
        raise err(exc.key, exc.problem) from None
    if len(hosts) > 1 and cfg.bootstrap.curve_cert is None:
        raise err(
            "bootstrap.curve_cert",
            f"is required when bootstrap.hosts has more than one host ({len(hosts)})",
        )
    for h in hosts:
        for kind, default in (
            ("bind", cfg.bootstrap.default_bind),
            ("connect", cfg.bootstrap.default_connect),
        ):
            pattern = getattr(h, kind) or default
            key = (
                f"bootstrap.hosts[{h.entry}].{kind}"
                if getattr(h, kind)
                else f"bootstrap.default_{kind}"
            )
            if len(hosts) > 1 and pattern is None:
                raise err(
                    f"bootstrap.hosts[{h.entry}].{kind}",
                    f"no {kind} URI for {h.host!r} and no bootstrap.default_{kind}",
                )
            if pattern is not None and "%p" in pattern and cfg.bootstrap.default_port is None:
                raise err(key, f"{pattern!r} uses %p but bootstrap.default_port is not set")
    try:
        cfg.topology()
        cfg.excluded_ranks()
    except ConfigError as exc:
        raise err(exc.key, exc.problem) from None


def loads(text: str, path: str | Path | None = None) -> BrokerConfig:
    """Parse broker.toml text; `path` is only used to name the source in errors."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path or "<string>", "", f"TOML syntax error: {exc}") from None
    return from_dict(data, path)


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(file, "", f"not UTF-8 text (byte {exc.start})") from None
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file, "", f"TOML syntax error: {exc}") from None


def _merge(
    dst: dict[str, Any], src: dict[str, Any], file: Path, origins: Origins, prefix: str = ""
) -> None:
    for key, value in src.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if key in dst:
            if isinstance(dst[key], dict) and isinstance(value, dict):
                _merge(dst[key], value, file, origins, dotted)
                continue
            first = origins.by_key.get(dotted, origins.default)
            raise ConfigError(file, dotted, f"already set in {first}")
        dst[key] = value
        origins.by_key[dotted] = file
        if isinstance(value, dict):
            _record(value, file, origins, dotted)


def _record(table: dict[str, Any], file: Path, origins: Origins, prefix: str) -> None:
    for key, value in table.items():
        dotted = f"{prefix}.{key}"
        origins.by_key[dotted] = file
        if isinstance(value, dict):
            _record(value, file, origins, dotted)


def load(path: str | Path) -> BrokerConfig:
    """Load broker.toml, or a directory whose ``*.toml`` files are merged in name order."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.toml") if f.is_file())
        if not files:
            raise ConfigError(p, "", "directory contains no *.toml files")
        origins = Origins(p)
        merged: dict[str, Any] = {}
        for f in files:
            _merge(merged, _read_toml(f), f, origins)
        return from_dict(merged, p, origins=origins)
    if not p.exists():
        raise ConfigError(p, "", "no such file or directory")
    origins = Origins(p)
    return from_dict(_read_toml(p), p, origins=origins)
