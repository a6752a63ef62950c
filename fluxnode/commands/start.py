"""`fluxnode start --test-size N`: run an N-broker instance on this machine, like `flux start`.

`--test-hosts` and `--test-resources` say in the command what the instance looks like (its
host names, each node's cores and GPUs) instead of taking this machine's name and core
count, so an example prints the same on every machine, as Flux's `--test-hosts` and a
resource override do for `flux start`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click

from fluxnode.agent.broker import attributes as attrs_mod
from fluxnode.agent.broker import launcher
from fluxnode.broker_conf import hostlist, render
from fluxnode.broker_conf.topology import validate_spec
from fluxnode.commands.common import key_value_pairs

# The keys --test-resources takes: an override file's, less those naming one node's layout.
TEST_RESOURCE_KEYS = ("cores", "gpus", "sockets", "memory_mib")


def parse_test_hosts(text: str, size: int) -> list[str]:
    """An RFC 29 hostlist naming at least `size` hosts, as `flux start --test-hosts`."""
    try:
        return hostlist.decode(text, limit=max(size, 1) * 4 + 1024)
    except hostlist.HostlistError as exc:
        raise click.BadParameter(str(exc), param_hint="'--test-hosts'") from None


def parse_test_resources(text: str) -> dict[str, int | str]:
    """`cores=2,gpus=0-1,memory_mib=4096`: a number is a count, a range or list (`0-3`,
    `0,2`) names the ids; a comma-separated piece without `=` continues the value before."""
    out: dict[str, int | str] = {}
    key = None
    for piece in text.split(","):
        k, sep, value = piece.partition("=")
        if sep:
            key = k.strip()
            if key not in TEST_RESOURCE_KEYS:
                raise click.BadParameter(
                    f"unknown key {key!r} in {text!r} (known: {', '.join(TEST_RESOURCE_KEYS)})",
                    param_hint="'--test-resources'")
            out[key] = value.strip()
        elif key is not None and key in ("cores", "gpus"):
            out[key] = f"{out[key]},{piece.strip()}"
        else:
            raise click.BadParameter(
                f"{text!r}: expected KEY=VALUE[,KEY=VALUE...], e.g. cores=2,gpus=1",
                param_hint="'--test-resources'")
    for k, v in out.items():
        if v.isdigit():
            out[k] = int(v)
        elif k in ("sockets", "memory_mib"):
            raise click.BadParameter(f"{k}: must be a number, not {v!r}",
                                     param_hint="'--test-resources'")
    return out


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
    "--test-hosts",
    metavar="HOSTLIST",
    help="name the brokers' hosts by this RFC 29 hostlist, e.g. 'node[0-7]' (default: this "
    "machine's name with 0..N-1)",
)
@click.option(
    "--test-resources",
    metavar="KEY=VALUE,...",
    help="every node has these resources instead of this machine's: cores, gpus (a count or "
    "ids, e.g. cores=2 or gpus=0-1), sockets, memory_mib",
)
@click.option(
    "--topo", default="kary:2", show_default=True, metavar="SPEC",
    help="TBON topology: kary:K, binomial, mincrit[:K] or custom (as tbon.topo)",
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
    metavar="DIR",
    help="keep the instance files here (default: a temporary 0700 dir, removed)",
)
@click.option(
    "--quorum-timeout",
    type=float,
    metavar="SECONDS",
    default=60.0,
    show_default=True,
    help="seconds to wait for all brokers",
)
@click.option("--quiet", "-q", is_flag=True, help="no progress display")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def start(
    test_size: int,
    test_hosts: str | None,
    test_resources: str | None,
    topo: str,
    settings: tuple[str, ...],
    tbon: tuple[str, ...],
    resource_override_dir: str | None,
    rundir: str | None,
    quorum_timeout: float,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """Start N brokers on this machine, run a command, stop them.

    Starts TEST-SIZE brokers, runs COMMAND (or a shell) with FLUXNODE_URI set, then shuts
    them down. The exit code is COMMAND's.
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
    hosts = parse_test_hosts(test_hosts, test_size) if test_hosts is not None else None
    try:  # the spec alone: the launcher builds the tree once, for the size
        validate_spec(attributes.get("tbon.topo") or topo)
    except ValueError as exc:
        hint = "'-S tbon.topo'" if "tbon.topo" in attributes else "'--topo'"
        raise click.BadParameter(str(exc), param_hint=hint) from None
    resources = parse_test_resources(test_resources) if test_resources is not None else None
    try:
        inst = launcher.prepare(
            test_size,
            topo=topo,
            attrs=attributes,
            rundir=rundir,
            hosts=hosts,
            tbon=tbon_settings,
            resources=resources,
            resource_override_dir=resource_override_dir,
        )
    except render.RenderError as exc:
        key = (exc.key or "").removeprefix("tbon.")
        if exc.key and exc.key != key and key in tbon_settings:
            raise click.BadParameter(f"{key}: {exc.problem}", param_hint="'--tbon'") from None
        raise click.ClickException(str(exc)) from None
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
