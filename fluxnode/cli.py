"""The one `fluxnode` entry point.

Subcommands live beside the concept they drive and are imported only when
invoked, so `fluxnode ping` does not pay for the scheduler or the Kubernetes
client, and `fluxnode --help` imports none of them. Each entry maps a command name
to ``module:attribute`` (a click command or group) and its one-line summary.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import NamedTuple

import click


class Entry(NamedTuple):
    target: str  # ``module:attribute`` of the click command or group
    summary: str  # its one-line help, shown by `fluxnode --help` without importing it
    hidden: bool = False  # run by fluxnode itself, not listed (as the command's ``hidden``)


# Each summary is the command's own short help (the first sentence of its docstring), written
# here too so that `fluxnode --help` imports no command; tests/commands/test_help.py fails
# when the two drift apart or a summary no longer fits its line.
COMMANDS: dict[str, Entry] = {
    # overlay (agent/)
    "broker": Entry("fluxnode.commands.broker:broker",
                    "Run one broker: join the overlay and serve local clients."),
    "start": Entry("fluxnode.commands.start:start",
                   "Start N brokers on this machine, run a command, stop them."),
    "ping": Entry("fluxnode.commands.ping:ping",
                  "Ping a broker or one of its services; print round trips."),
    "exec": Entry("fluxnode.commands.exec:exec_command",
                  "Run a command on the nodes of the target ranks."),
    "overlay": Entry("fluxnode.commands.overlay:overlay",
                     "Inspect the tree-based overlay network."),
    "resource": Entry("fluxnode.commands.resource:resource",
                      "List and summarize the instance's resources."),
    "proxy": Entry("fluxnode.commands.proxy:proxy",
                   "Run a shell or COMMAND connected to a broker over ssh://."),
    "relay": Entry("fluxnode.commands.proxy:relay",
                   "Relay stdin and stdout to a broker socket (for proxy).", hidden=True),
    "agent": Entry("fluxnode.commands.agent:agent",
                   "Run this node's broker under Kubernetes (the DaemonSet)."),
    "archive": Entry("fluxnode.commands.archive:archive",
                     "Store files on the leader and extract them on nodes."),
    # configuration (broker_conf/)
    "keygen": Entry("fluxnode.commands.keygen:keygen",
                    "Generate the instance's CURVE certificate (flux keygen)."),
    "config": Entry("fluxnode.commands.config:config",
                    "Check, render and explain broker.toml files."),
    # scheduling (scheduler/)
    "resource-query": Entry("fluxnode.scheduler.resource_query.command:main",
                            "Fluxion's resource-query: match jobspecs on a graph."),
    "alloc": Entry("fluxnode.commands.alloc:alloc",
                   "Allocate resources for a jobspec or for given counts."),
    "allocs": Entry("fluxnode.commands.alloc:allocs",
                    "List allocations with their pods, nodes, cores and GPUs."),
    "cancel": Entry("fluxnode.commands.alloc:cancel",
                    "Cancel allocation ID, or the part of it on --ranks."),
    "binder": Entry("fluxnode.commands.binder:binder",
                    "Bind pods to nodes with the leader's graph scheduler."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        module_name, _, attr = entry.target.partition(":")
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
        except OSError as exc:
            # click itself exits 1 quietly when the reader went away (EPIPE, `fluxnode ... |
            # head`). Any other OSError here (ENOSPC writing the output, a file no command made
            # its own error of) is one line; stdout goes to /dev/null so that the interpreter's
            # last flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"Error: {where}{exc.strerror or exc}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The summaries from `COMMANDS`: importing every command to ask would take a second."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name].summary)
                                for name in self.list_commands(ctx) if not COMMANDS[name].hidden])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fluxnode")
def main() -> None:
    """fluxnode: Flux-style overlay and graph scheduling for Kubernetes."""
