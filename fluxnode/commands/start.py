"""`fluxnode start --test-size N`: run an N-broker instance on this machine, like `flux start`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click

from fluxnode.agent.broker import attributes as attrs_mod
from fluxnode.agent.broker import launcher
from fluxnode.commands.common import key_value_pairs


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False}
)
@click.option(
    "--test-size",
    type=int,
    required=True,
    metavar="N",
    help="number of brokers to start on this machine",
)
@click.option(
    "--topo", default="kary:2", show_default=True, help="TBON topology (kary:K, binomial)"
)
@click.option(
    "--setattr",
    "-S",
    "settings",
    multiple=True,
    metavar="ATTR=VALUE",
    help="broker attribute for every broker",
)
@click.option("--tbon", "tbon", multiple=True, metavar="KEY=VALUE",
              help="[tbon] setting for broker.toml, e.g. torpid_max=2s")
@click.option(
    "--resource-override-dir",
    type=click.Path(exists=True, file_okay=False),
    metavar="DIR",
    help="per-host resource files DIR/<hostname>.json (or .toml) for fake resources",
)
@click.option(
    "--rundir",
    type=click.Path(file_okay=False),
    help="keep the instance files here (default: a temporary 0700 dir, removed)",
)
@click.option(
    "--hostname-prefix",
    metavar="PREFIX",
    help="hosts are PREFIX0..PREFIX{N-1} (default: this machine's name)",
)
@click.option(
    "--quorum-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="seconds to wait for all brokers",
)
@click.option("--quiet", "-q", is_flag=True, help="no progress display")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def start(
    test_size: int,
    topo: str,
    settings: tuple[str, ...],
    tbon: tuple[str, ...],
    resource_override_dir: str | None,
    rundir: str | None,
    hostname_prefix: str | None,
    quorum_timeout: float,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """Start TEST-SIZE brokers, run COMMAND (or a shell) with FLUXNODE_URI set, then shut down.

    The exit code is COMMAND's.
    """
    stopped_by = [
        signal.SIGINT
    ]  # what interrupted us: the exit code is 128 + its number, as in a shell

    def on_term(signum: int, _frame: object) -> None:
        stopped_by[0] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        attributes = attrs_mod.parse_settings(settings)
    except attrs_mod.AttrError as exc:
        raise click.UsageError(str(exc)) from None
    tbon_settings = key_value_pairs(tbon, "--tbon")
    try:
        inst = launcher.prepare(
            test_size,
            topo=topo,
            attrs=attributes,
            rundir=rundir,
            prefix=hostname_prefix,
            tbon=tbon_settings,
            resource_override_dir=resource_override_dir,
        )
    except (launcher.LaunchError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:  # nothing runs yet; prepare removed what it made
        sys.exit(128 + stopped_by[0])

    tty = sys.stderr.isatty() and not quiet

    def progress(count: int, size: int) -> None:
        if tty:
            sys.stderr.write(f"\rfluxnode-start: {count}/{size} brokers online")
            sys.stderr.flush()

    code = 1
    try:
        launcher.fork_brokers(inst)
        try:
            launcher.wait_quorum(inst, quorum_timeout, progress)
        finally:
            if tty:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
        env = dict(os.environ, FLUXNODE_URI=inst.uri)
        argv = list(command) or [os.environ.get("SHELL", "/bin/sh")]
        try:
            code = subprocess.call(argv, env=env)
        except OSError as exc:
            click.echo(f"fluxnode-start: {argv[0]}: {exc.strerror}", err=True)
            code = 127
    except launcher.LaunchError as exc:
        click.echo(f"fluxnode-start: {exc}", err=True)
        code = 1
    except KeyboardInterrupt:
        code = 128 + stopped_by[0]
    finally:
        # the shutdown is under way: a second SIGINT or SIGTERM must not cut it short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        launcher.shutdown(inst)
        launcher.cleanup(inst)
    sys.exit(code)
