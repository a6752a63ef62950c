"""Render broker.toml from ``templates/broker.toml.j2``.

The Kubernetes node agent and ``fluxnode start --test-size`` both write their broker
config through here, so there is one place that decides the file's shape. Runs of
hosts that share settings are written as one RFC 29 hostlist entry
(``{ host = "kind-worker,kind-worker[2-4]" }``); hosts with their own bind/connect/parent
get their own entry. The output is checked with `config.loads` before it is returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import tomli_w
from fluxnode.broker_conf import config, fsd, hostlist

__all__ = ["render_broker_toml", "RenderError"]

_HOST_KEYS = ("bind", "connect", "parent")
_TBON_DURATIONS = ("tcp_user_timeout", "connect_timeout", "torpid_min", "torpid_max")


class RenderError(ValueError):
    """Arguments that cannot make a valid broker.toml (the message says which and why).

    `key` and `problem` name the broker.toml key at fault when there is one, so that a
    command can name the option its user typed for it (`--tbon torpid_max=...`)."""

    def __init__(self, message: str, key: str | None = None, problem: str | None = None):
        super().__init__(message)
        self.key = key
        self.problem = problem


def _toml_value(value: Any) -> str:
    """A TOML literal for one value, via tomli-w so quoting is always right."""
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def _toml_inline(table: Mapping[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in table.items()) + " }"


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("fluxnode.templates", ""),
    autoescape=False,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["toml"] = _toml_value
_env.filters["toml_inline"] = _toml_inline


def _entries(
    hosts: Sequence[str], overrides: Mapping[str, Mapping[str, str]]
) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = []
    run: list[str] = []
    for host in hosts:
        extra = overrides.get(host)
        if not extra:
            run.append(host)
            continue
        if run:
            entries.append({"host": hostlist.encode(run)})
            run = []
        bad = sorted(set(extra) - set(_HOST_KEYS))
        if bad:
            raise RenderError(
                f"host_overrides[{host!r}]: unknown key {bad[0]!r} (known: {', '.join(_HOST_KEYS)})"
            )
        entries.append(
            {"host": host, **{k: extra[k] for k in _HOST_KEYS if extra.get(k) is not None}}
        )
    if run:
        entries.append({"host": hostlist.encode(run)})
    return entries


def render_broker_toml(
    hosts: Sequence[str],
    *,
    curve_cert: str | None,
    port: int,
    topo: str = "kary:2",
    bind: str = "tcp://0.0.0.0:%p",
    connect: str = "tcp://%h:%p",
    host_overrides: Mapping[str, Mapping[str, str]] | None = None,
    tbon: Mapping[str, Any] | None = None,
    resource: Mapping[str, Any] | None = None,
    access: Mapping[str, Any] | None = None,
    exec_table: Mapping[str, Any] | None = None,
    enable_ipv6: bool = False,
) -> str:
    """Return broker.toml text for `hosts` (rank order).

    `host_overrides` maps a hostname to its own ``bind``/``connect``/``parent`` (e.g. one
    port per broker when all brokers share 127.0.0.1). `tbon` takes flux-config-tbon keys
    (durations as seconds or FSD strings); `resource`/`access`/`exec_table` take their TOML keys
    (`exec_table` is ``[exec]``, e.g. ``{"allow": True}``).
    """
    hosts = list(hosts)
    if not hosts:
        raise RenderError("hosts: at least one hostname is required")
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise RenderError(f"hosts: {dup!r} is listed more than once")
    overrides = dict(host_overrides or {})
    unknown = sorted(set(overrides) - set(hosts))
    if unknown:
        raise RenderError(f"host_overrides: {unknown[0]!r} is not in hosts")
    try:
        entries = _entries(hosts, overrides)
    except hostlist.HostlistError as exc:
        raise RenderError(f"hosts: {exc}") from None
    tbon_out: dict[str, Any] = {}
    for key, value in (tbon or {}).items():
        if (
            key in _TBON_DURATIONS
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            try:
                value = fsd.format(float(value))
            except fsd.FSDError as exc:
                raise RenderError(f"tbon.{key}: {exc}") from None
        tbon_out[key] = value
    text = _env.get_template("broker.toml.j2").render(
        hosts_count=len(hosts),
        curve_cert=curve_cert,
        port=port,
        bind=bind,
        connect=connect,
        enable_ipv6=enable_ipv6,
        entries=entries,
        topo=topo,
        tbon=tbon_out,
        resource=dict(resource or {}),
        access=dict(access or {}),
        exec_table=dict(exec_table or {}),
    )
    try:
        config.loads(text, "<rendered broker.toml>")
    except config.ConfigError as exc:
        raise RenderError(
            f"rendered config is invalid: {exc.key}: {exc.problem}" if exc.key else str(exc),
            key=exc.key, problem=exc.problem,
        ) from None
    return text
