"""The one `fluxnode` entry point.

Subcommands live beside the concept they drive and are imported only when
invoked, so `fluxnode ping` does not pay for the scheduler or the Kubernetes
client. Each entry maps a command name to ``module:attribute`` (a click command
or group).
"""

from __future__ import annotations

import errno
import importlib
import signal
import sys

import click

COMMANDS: dict[str, str] = {
    # overlay (agent/)
    "broker": "fluxnode.commands.broker:broker",
    "start": "fluxnode.commands.start:start",
    "ping": "fluxnode.commands.ping:ping",
    "exec": "fluxnode.commands.exec:exec_command",
    "overlay": "fluxnode.commands.overlay:overlay",
    "resource": "fluxnode.commands.resource:resource",
    "proxy": "fluxnode.commands.proxy:proxy",
    "relay": "fluxnode.commands.proxy:relay",
    "agent": "fluxnode.commands.agent:agent",
    "archive": "fluxnode.commands.archive:archive",
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

    def main(self, *args, **kwargs):  # type: ignore[override]
        """click's standalone handling, except that an interrupt (Ctrl-C) exits 130 like a
        shell command, quietly, instead of click's "Aborted!" and 1, whenever it comes."""
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):
                sys.exit(128 + signal.SIGINT)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(128 + signal.SIGINT)
        except OSError as exc:  # EPIPE: the reader went away (`fluxnode ... | head`)
            if exc.errno != errno.EPIPE:
                raise
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

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
