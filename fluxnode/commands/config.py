"""``fluxnode config``: check, render and explain broker configurations.

Errors are one line on stderr and exit status 1, so the commands fit in scripts and
init containers (``fluxnode config check /etc/fluxnode/system && exec fluxnode broker ...``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from fluxnode.agent.broker.client import Client, ConnectError, RPCError
from fluxnode.agent.broker.message import NODEID_ANY
from fluxnode.broker_conf import certificate, hostlist, idset, render
from fluxnode.broker_conf import config as config_mod
from fluxnode.broker_conf.topology import Topology, TopologyError
from fluxnode.commands.common import connect_error_message, connection_options, rpc_errstr


def _fail(message: str) -> NoReturn:
    click.echo(f"fluxnode-config: {message}", err=True)
    sys.exit(1)


@click.group("config")
def config() -> None:
    """Check, render and explain broker.toml files.

    The keys are flux-config-bootstrap(5)'s and flux-config-tbon(5)'s.
    """


@config.command("check")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--hostname", help="Also show the rank and endpoints this host would use.")
@click.option(
    "--cert/--no-cert",
    "check_cert",
    default=False,
    help="Also load and verify bootstrap.curve_cert.",
)
def check(path: Path, hostname: str | None, check_cert: bool) -> None:
    """Validate a broker.toml file or directory; print a summary.

    An invalid file is one line naming the key and what is wrong, and exit status 1.
    """
    try:
        cfg = config_mod.load(path)
        topo = cfg.topology()
        if check_cert:
            if cfg.bootstrap.curve_cert is None:
                raise config_mod.ConfigError(
                    cfg.path, "bootstrap.curve_cert", "is not set (--cert asks to verify it)"
                )
            certificate.load(cfg.bootstrap.curve_cert)
        rank = cfg.rank_of(hostname) if hostname else None
        lines = [
            f"{path}: ok: size {cfg.size}, tbon.topo {cfg.tbon.topo}, maxlevel {topo.maxlevel}"
        ]
        if cfg.hostnames:
            lines.append(f"hosts: {hostlist.encode(cfg.hostnames)}")
        if rank is not None and cfg.hostnames:
            parent = topo.parent(rank)
            lines.append(
                f"{hostname}: rank {rank}, parent {parent if parent is not None else '-'}, "
                f"children {idset.encode(topo.children(rank)) or '-'}"
            )
            if topo.children(rank) or rank == 0:
                lines.append(f"{hostname}: bind {cfg.bind_uri(rank)}")
            if parent is not None:
                lines.append(f"{hostname}: connect to {cfg.connect_uri(parent)}")
        excluded = cfg.excluded_ranks()
        if excluded:
            lines.append(f"resource.exclude: ranks {idset.encode(excluded)}")
    except (config_mod.ConfigError, certificate.CertificateError) as exc:
        _fail(str(exc))
    click.echo("\n".join(lines))


@config.command("render")
@click.option(
    "--hosts",
    "hosts_spec",
    required=True,
    metavar="HOSTLIST",
    help="Hosts in rank order, e.g. 'node[0-7]'.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8050,
    show_default=True,
    help="bootstrap.default_port",
)
@click.option(
    "--topo",
    default="kary:2",
    show_default=True,
    help="tbon.topo: kary:K, binomial, mincrit[:K], custom",
)
@click.option(
    "--curve-cert", metavar="PATH", help="bootstrap.curve_cert (required for more than one host)."
)
@click.option(
    "--bind", default="tcp://0.0.0.0:%p", show_default=True, help="bootstrap.default_bind (%h, %p)"
)
@click.option(
    "--connect", default="tcp://%h:%p", show_default=True, help="bootstrap.default_connect (%h, %p)"
)
@click.option("--torpid-min", metavar="FSD", help="tbon.torpid_min, e.g. 5s")
@click.option("--torpid-max", metavar="FSD", help="tbon.torpid_max, e.g. 30s (0 disables)")
@click.option("--tcp-user-timeout", metavar="FSD", help="tbon.tcp_user_timeout")
@click.option("--connect-timeout", metavar="FSD", help="tbon.connect_timeout")
@click.option(
    "--resource-override", metavar="PATH", help="resource.override (a resource description file)"
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write here instead of stdout.",
)
def render_cmd(
    hosts_spec: str,
    port: int,
    topo: str,
    curve_cert: str | None,
    bind: str,
    connect: str,
    torpid_min: str | None,
    torpid_max: str | None,
    tcp_user_timeout: str | None,
    connect_timeout: str | None,
    resource_override: str | None,
    output: Path | None,
) -> None:
    """Render a broker.toml for HOSTLIST, checked before it is written."""
    try:
        hosts = hostlist.decode(hosts_spec)
    except hostlist.HostlistError as exc:
        _fail(f"--hosts: {exc}")
    if curve_cert is None and len(hosts) > 1:
        _fail(f"--curve-cert PATH is required for more than one host ({len(hosts)} in --hosts)")
    tbon = {
        k: v
        for k, v in (
            ("torpid_min", torpid_min),
            ("torpid_max", torpid_max),
            ("tcp_user_timeout", tcp_user_timeout),
            ("connect_timeout", connect_timeout),
        )
        if v
    }
    try:
        text = render.render_broker_toml(
            hosts,
            curve_cert=curve_cert,
            port=port,
            topo=topo,
            bind=bind,
            connect=connect,
            tbon=tbon,
            resource={"override": resource_override} if resource_override else None,
        )
    except render.RenderError as exc:
        _fail(str(exc))
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        _fail(f"{output}: cannot write: {exc.strerror or exc}")


@config.command("topology")
@click.option("--topo", help="Topology spec (kary:K, binomial, mincrit[:K], custom).")
@click.option("--size", type=int, help="Number of brokers.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="Take topo, size and hostnames from a config.",
)
def topology_cmd(topo: str | None, size: int | None, config_path: Path | None) -> None:
    """Print each rank's parent, children and level in the TBON.

    The tree is the one flux would build for the same tbon.topo and size.
    """
    names: list[str] = []
    try:
        if config_path is not None:
            cfg = config_mod.load(config_path)
            names = cfg.hostnames
            tree = cfg.topology() if topo is None else Topology.from_spec(topo, size or cfg.size)
        else:
            if topo is None or size is None:
                _fail("give --topo SPEC and --size N, or --config PATH")
            tree = Topology.from_spec(topo, size)
    except (config_mod.ConfigError, TopologyError) as exc:
        _fail(str(exc))
    rows = [("RANK", "PARENT", "LEVEL", "CHILDREN") + (("HOSTNAME",) if names else ())]
    for r in range(tree.size):
        p = tree.parent(r)
        row = (
            str(r),
            "-" if p is None else str(p),
            str(tree.level(r)),
            idset.encode(tree.children(r)) or "-",
        )
        rows.append(row + ((names[r],) if names else ()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(
                cell.rjust(w) if i < 3 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    click.echo(f"# {tree.spec}: size {tree.size}, maxlevel {tree.maxlevel}")


@config.command("reload")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    help="Reload this broker's config (default: the broker at URI).",
)
@connection_options
@click.option(
    "--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for the broker."
)
def reload_cmd(rank: int | None, uri: str | None, curve_cert: str | None, timeout: float) -> None:
    """Make a running broker re-read and apply its config in place.

    Like ``flux config reload``: the broker re-reads its --config-path.

    A change the broker cannot apply without a restart (its rank, endpoint or parent), or an
    invalid config, is an error; the broker keeps running with the config it had.
    """
    try:
        with Client.connect(uri, timeout=timeout, curve_cert=curve_cert) as client:
            client.rpc(
                "config.reload", {}, nodeid=NODEID_ANY if rank is None else rank, timeout=timeout
            )
    except ConnectError as exc:
        _fail(connect_error_message(exc))
    except RPCError as exc:
        _fail(rpc_errstr(exc))
