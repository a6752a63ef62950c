"""The tables of broker.toml, each with its model and its reader, and `ConfigError`.

One dataclass per table (`BootstrapConfig` and its `HostEntry`, `TbonConfig`,
`ResourceConfig`, `AccessConfig`, `ExecConfig`), each read from a parsed TOML table by one function
that checks every key against flux-config-bootstrap(5), flux-config-tbon(5),
flux-config-resource(5) and flux-config-access(5) and names the dotted key of any
problem. `Origins` remembers which file each key came from when a config directory is
merged, so an error names the right file. `config` assembles the tables into a
`BrokerConfig`, checks what spans tables, and loads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluxnode.broker_conf import fsd, hostlist, idset
from fluxnode.broker_conf.topology import TopologyError, validate_spec

URI_SCHEMES = ("tcp://", "ipc://")


class ConfigError(ValueError):
    """A broker configuration problem: `file`, dotted `key` and `problem` are kept separately."""

    def __init__(self, file: str | Path | None, key: str, problem: str) -> None:
        self.file = str(file) if file is not None else "<config>"
        self.key = key
        self.problem = problem
        where = f"{self.file}: {key}: " if key else f"{self.file}: "
        super().__init__(where + problem)


@dataclass
class HostEntry:
    """One ``[[bootstrap.hosts]]`` entry; `host` may be a hostlist (``node[1-4]``)."""

    host: str
    bind: str | None = None
    connect: str | None = None
    parent: str | None = None


@dataclass
class BootstrapConfig:
    """The `[bootstrap]` table: the certificate, the endpoints' defaults, the hosts."""

    curve_cert: str | None = None
    default_port: int | None = None
    default_bind: str | None = None
    default_connect: str | None = None
    hosts: list[HostEntry] = field(default_factory=list)
    enable_ipv6: bool = False


@dataclass
class TbonConfig:
    """``[tbon]``; durations in seconds, defaults as documented in flux-config-tbon(5)."""

    topo: str = "custom"
    tcp_user_timeout: float = 20.0
    connect_timeout: float = 30.0
    torpid_min: float = 5.0
    torpid_max: float = 30.0
    zmqdebug: int = 0
    child_rcvhwm: int = 0
    prefertcp: bool = False
    interface_hint: str | None = None


@dataclass
class ResourceConfig:
    """``[resource]``: where R comes from and what to leave out.

    `override` is fluxnode's own key: a JSON/TOML file describing this node's resources
    (cores, sockets, gpus, memory_mib, hostname) used instead of discovery, for tests.
    """

    path: str | None = None
    scheduling: str | None = None
    exclude: str | None = None
    noverify: bool = False
    norestrict: bool = False
    override: str | None = None


@dataclass
class AccessConfig:
    """``[access]`` (flux-config-access(5))."""

    allow_guest_user: bool = False
    allow_root_owner: bool = False


@dataclass
class ExecConfig:
    """``[exec]`` (fluxnode's own table): may clients start processes on this broker's node
    (`fluxnode exec`, the ``rexec`` service)? Off unless the operator says so; `fluxnode start
    --test-size` turns it on for its private instance."""

    allow: bool = False


class Origins:
    """Which file each dotted key came from, so merged-directory errors name the right file."""

    def __init__(self, default: Path | None) -> None:
        self.default = default
        self.by_key: dict[str, Path] = {}

    def file_for(self, key: str) -> Path | None:
        parts = key.replace("[", ".[").split(".")
        while parts:
            hit = self.by_key.get(".".join(parts).replace(".[", "["))
            if hit is not None:
                return hit
            parts.pop()
        return self.default


class _Reader:
    """Typed accessors over one TOML table that record errors with dotted keys."""

    def __init__(self, table: Any, prefix: str, origins: Origins) -> None:
        self.prefix = prefix
        self.origins = origins
        if not isinstance(table, dict):
            raise self.error(prefix, f"must be a table, not {_tname(table)}")
        self.table = table
        self.seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.origins.file_for(key), key, problem)

    def get(self, name: str, kinds: tuple[type, ...], what: str, default: Any = None) -> Any:
        self.seen.add(name)
        if name not in self.table:
            return default
        value = self.table[name]
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(self.key(name), f"must be {what}, not a boolean")
        if not isinstance(value, kinds):
            raise self.error(self.key(name), f"must be {what}, not {_tname(value)} {_short(value)}")
        return value

    def string(self, name: str, default: str | None = None) -> str | None:
        value = self.get(name, (str,), "a string", default)
        if value is not None and value == "":
            raise self.error(self.key(name), "must not be empty")
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        return self.get(name, (bool,), "a boolean (true/false)", default)

    def integer(
        self,
        name: str,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self.get(name, (int,), "an integer", default)
        if value is not None and name in self.table:
            if minimum is not None and value < minimum:
                raise self.error(self.key(name), f"must be >= {minimum}, not {value}")
            if maximum is not None and value > maximum:
                raise self.error(self.key(name), f"must be <= {maximum}, not {value}")
        return value

    def duration(self, name: str, default: float) -> float:
        value = self.get(name, (str, int, float), "a duration like \"30s\" (RFC 23 FSD)", None)
        if value is None:
            return default
        try:
            return fsd.parse(value)
        except fsd.FSDError as exc:
            raise self.error(self.key(name), str(exc)) from None

    def uri(self, name: str) -> str | None:
        value = self.string(name)
        if value is not None and not value.startswith(URI_SCHEMES):
            raise self.error(
                self.key(name),
                f"{value!r} is not a ZeroMQ endpoint (expected tcp://HOST:PORT, %h/%p allowed)",
            )
        if value is not None and value.startswith("tcp://"):
            problem = tcp_port_problem(value)
            if problem:
                raise self.error(self.key(name), f"{value!r}: {problem}")
        return value

    def finish(self, known: list[str] | tuple[str, ...]) -> None:
        unknown = sorted(set(self.table) - self.seen)
        if unknown:
            raise self.error(
                self.key(unknown[0]),
                f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"(known: {', '.join(known)})",
            )


def tcp_port_problem(uri: str) -> str | None:
    """What is wrong with a tcp:// endpoint's port, or None: it must be 1-65535, or %p
    (bootstrap.default_port, checked on its own) or * (any free port, as ZeroMQ binds).
    ZeroMQ takes a port past 65535 modulo 2**16, so the broker would bind another port."""
    rest = uri[len("tcp://"):]
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        return "expected tcp://HOST:PORT"
    if port in ("%p", "*"):
        return None
    if not port.isdigit():
        return f"port {port!r} is not a number (1-65535, %p or *)"
    if not 1 <= int(port) <= 65535:
        return f"port {int(port)} is outside 1-65535"
    return None


def _tname(value: Any) -> str:
    return {
        dict: "a table",
        list: "an array",
        str: "a string",
        int: "an integer",
        float: "a float",
        bool: "a boolean",
    }.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return f"({text[:40]}...)" if len(text) > 43 else f"({text})"


def _parse_bootstrap(table: Any, origins: Origins) -> BootstrapConfig:
    r = _Reader(table, "bootstrap", origins)
    cfg = BootstrapConfig(
        curve_cert=r.string("curve_cert"),
        default_port=r.integer("default_port", minimum=1, maximum=65535),
        default_bind=r.uri("default_bind"),
        default_connect=r.uri("default_connect"),
        enable_ipv6=r.boolean("enable_ipv6"),
    )
    hosts = r.get("hosts", (list,), "an array of tables like { host = \"node[1-4]\" }", [])
    for i, item in enumerate(hosts):
        h = _Reader(item, f"bootstrap.hosts[{i}]", origins)
        host = h.string("host")
        if host is None:
            raise h.error(h.key("host"), "is required (the hostname or hostlist of this entry)")
        try:
            if not hostlist.decode(host):
                raise h.error(h.key("host"), "is an empty hostlist")
        except hostlist.HostlistError as exc:
            raise h.error(h.key("host"), str(exc)) from None
        parent = h.string("parent")
        cfg.hosts.append(
            HostEntry(host=host, bind=h.uri("bind"), connect=h.uri("connect"), parent=parent)
        )
        h.finish(("host", "bind", "connect", "parent"))
    r.finish(
        ("curve_cert", "default_port", "default_bind", "default_connect", "enable_ipv6", "hosts")
    )
    return cfg


def _parse_tbon(table: Any, origins: Origins) -> TbonConfig:
    r = _Reader(table, "tbon", origins)
    d = TbonConfig()
    topo = r.string("topo", d.topo)
    try:
        validate_spec(topo)
    except TopologyError as exc:
        raise r.error("tbon.topo", str(exc)) from None
    cfg = TbonConfig(
        topo=topo,
        tcp_user_timeout=r.duration("tcp_user_timeout", d.tcp_user_timeout),
        connect_timeout=r.duration("connect_timeout", d.connect_timeout),
        torpid_min=r.duration("torpid_min", d.torpid_min),
        torpid_max=r.duration("torpid_max", d.torpid_max),
        zmqdebug=r.integer("zmqdebug", d.zmqdebug, minimum=0, maximum=1),
        child_rcvhwm=r.integer("child_rcvhwm", d.child_rcvhwm, minimum=0),
        prefertcp=r.boolean("prefertcp", d.prefertcp),
        interface_hint=r.string("interface-hint"),
    )
    r.finish(
        (
            "topo",
            "tcp_user_timeout",
            "connect_timeout",
            "torpid_min",
            "torpid_max",
            "zmqdebug",
            "child_rcvhwm",
            "prefertcp",
            "interface-hint",
        )
    )
    return cfg


def _parse_resource(table: Any, origins: Origins) -> ResourceConfig:
    r = _Reader(table, "resource", origins)
    cfg = ResourceConfig(
        path=r.string("path"),
        scheduling=r.string("scheduling"),
        exclude=r.string("exclude"),
        noverify=r.boolean("noverify"),
        norestrict=r.boolean("norestrict"),
        override=r.string("override"),
    )
    if cfg.exclude is not None:
        try:
            idset.decode(cfg.exclude)
        except idset.IdsetError:
            try:
                hostlist.decode(cfg.exclude)
            except hostlist.HostlistError as exc:
                raise r.error(
                    "resource.exclude", f"must be an idset of ranks or a hostlist: {exc}"
                ) from None
    r.finish(("path", "scheduling", "exclude", "noverify", "norestrict", "override"))
    return cfg


def _parse_access(table: Any, origins: Origins) -> AccessConfig:
    r = _Reader(table, "access", origins)
    cfg = AccessConfig(
        allow_guest_user=r.boolean("allow-guest-user"),
        allow_root_owner=r.boolean("allow-root-owner"),
    )
    r.finish(("allow-guest-user", "allow-root-owner"))
    return cfg


def _parse_exec(table: Any, origins: Origins) -> ExecConfig:
    r = _Reader(table, "exec", origins)
    cfg = ExecConfig(allow=r.boolean("allow"))
    r.finish(("allow",))
    return cfg


TABLE_PARSERS = {
    "bootstrap": _parse_bootstrap,
    "tbon": _parse_tbon,
    "resource": _parse_resource,
    "access": _parse_access,
    "exec": _parse_exec,
}
