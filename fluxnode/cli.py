"""The one `fluxnode` entry point.

Subcommands live beside the concept they drive and are imported only when
invoked, so `fluxnode ping` does not pay for the scheduler or the Kubernetes
client. Each entry maps a command name to ``module:attribute`` (a click command
or group).
"""

from __future__ import annotations

import importlib

import click

COMMANDS: dict[str, str] = {
    # overlay (agent/)
    "broker": "fluxnode.commands.broker:broker",
    "start": "fluxnode.commands.start:start",
    "ping": "fluxnode.commands.ping:ping",
    "overlay": "fluxnode.commands.overlay:overlay",
    "resource": "fluxnode.commands.resource:resource",
    "proxy": "fluxnode.commands.proxy:proxy",
    "relay": "fluxnode.commands.proxy:relay",
    "agent": "fluxnode.commands.agent:agent",
    # configuration (broker_conf/)
    "keygen": "fluxnode.commands.keygen:keygen",
    "config": "fluxnode.commands.config:config",
    # scheduling (scheduler/)
    "resource-query": "fluxnode.scheduler.resource_query.command:main",
    "alloc": "fluxnode.commands.alloc:alloc",
    "allocs": "fluxnode.commands.alloc:allocs",
    "cancel": "fluxnode.commands.alloc:cancel",
    "binder": "fluxnode.commands.binder:binder",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise click.ClickException(
                    f"command {name!r} is not available in this build"
                ) from exc
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            try:
                command = self.get_command(ctx, name)
            except click.ClickException:
                continue
            if command is not None and not command.hidden:
                rows.append(
                    (name, command.get_short_help_str(limit=formatter.width - 6 - len(name)))
                )
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fluxnode")
def main() -> None:
    """fluxnode: Flux-style overlay and graph scheduling for Kubernetes."""
