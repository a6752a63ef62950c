"""`fluxnode broker`: run one broker daemon, like `flux broker`."""

from __future__ import annotations

import sys

import click

from fluxnode.agent.broker import attributes as attrs
from fluxnode.agent.broker import broker as broker_mod


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config-path", "-c", required=True, metavar="PATH",
              help="broker.toml, or a directory of *.toml files (flux-config-bootstrap(5) keys)")
@click.option("--setattr", "-S", "settings", multiple=True, metavar="ATTR=VALUE",
              help="set a broker attribute (tbon.topo, rundir, statedir, local-uri, broker.quorum, "
                   "log-stderr-level, log-filename, broker.modules, resource.override)")
@click.option(
    "--hostname",
    metavar="NAME",
    help="act as this host of [bootstrap] hosts (default: this machine's name)",
)
def broker(config_path: str, settings: tuple[str, ...], hostname: str | None) -> None:
    """Run one broker: join the overlay and serve local clients.

    It serves the local connector (local://) until it is shut down.
    """
    try:
        attributes = attrs.parse_settings(settings)
    except attrs.AttrError as exc:
        raise click.UsageError(str(exc)) from None
    sys.exit(broker_mod.main(config_path, attributes, hostname))
