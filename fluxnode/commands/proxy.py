"""`fluxnode proxy URI [COMMAND...]`: run a command against a (possibly remote) broker, like
flux-proxy(1).

* ``local:///run/fluxnode/local`` -- the command runs with ``FLUXNODE_URI`` set to that socket.
* ``ssh://[user@]host[:port]/run/fluxnode/local`` -- an SSH connection is opened once and
  serves a private Unix socket; every connection to it runs ``fluxnode relay
  /run/fluxnode/local`` on the remote host (override with ``FLUXNODE_SSH_RCMD``, like flux's
  ``FLUX_SSH_RCMD``). The command runs with ``FLUXNODE_URI=local://<private socket>``; its
  exit code is the proxy's.

Host keys are checked like OpenSSH's default (``--known-hosts``/``FLUXNODE_SSH_KNOWN_HOSTS``;
an unknown host only with ``--accept-new-host-key``/``FLUXNODE_SSH_ACCEPT_NEW=1``; a changed
key never). The work is done by agent/broker/proxy.py and agent/broker/ssh_tunnel.py; this
is the command line around them: every failure is one line on stderr and exit status 1.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from fluxnode.agent.broker.proxy import (
    ProxyError,
    check_socket,
    parse_uri,
    relay_stdio,
    run_command,
)


def _fail(prog: str, message: str, code: int = 1) -> NoReturn:
    click.echo(f"{prog}: {message}", err=True)
    sys.exit(code)


def _report(line: str) -> None:
    click.echo(line, err=True)


@click.command(
    "proxy",
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["-h", "--help"],
    },
)
@click.option("-i", "--identity", "identities", multiple=True, type=click.Path(dir_okay=False),
              help="SSH private key to try first (repeatable; also FLUXNODE_SSH_IDENTITY).")
@click.option(
    "--known-hosts",
    type=click.Path(dir_okay=False),
    help="known_hosts file to use instead of ~/.ssh/known_hosts (also FLUXNODE_SSH_KNOWN_HOSTS).",
)
@click.option(
    "--accept-new-host-key",
    is_flag=True,
    envvar="FLUXNODE_SSH_ACCEPT_NEW",
    help="Trust and record the key of a host seen for the first time (never a changed key).",
)
@click.argument("uri")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def proxy(identities: tuple[str, ...], known_hosts: str | None, accept_new_host_key: bool, uri: str,
          command: tuple[str, ...]) -> None:
    """Run a shell or COMMAND connected to a broker over ssh://.

    COMMAND (default: $SHELL) runs with FLUXNODE_URI set to a local socket relayed to the
    broker at URI (ssh:// or local://).
    """
    try:
        target = parse_uri(uri)
        if isinstance(target, str):
            check_socket(target)
            sys.exit(run_command(command, f"local://{target}"))
        # Lazy: paramiko takes ~170 ms to import, which `fluxnode relay` (this module too) must not
        # pay.
        from fluxnode.agent.broker.ssh_tunnel import Tunnel

        tunnel = Tunnel(
            target,
            identities=identities,
            known_hosts=known_hosts,
            accept_new=accept_new_host_key,
            report=_report,
        )
        try:
            tunnel.connect()
            tunnel.check_remote()
            path = tunnel.listen()
            code = run_command(command, f"local://{path}")
        finally:
            tunnel.close()
    except ProxyError as exc:
        _fail("fluxnode-proxy", str(exc))
    sys.exit(code)


@click.command("relay", hidden=True)
@click.option("--check", is_flag=True, help="Only check that PATH accepts connections.")
@click.argument("path")
def relay(check: bool, path: str) -> None:
    """Relay stdin and stdout to a broker socket (for proxy).

    Copies stdin to the broker socket at PATH and the socket to stdout; `fluxnode proxy`
    runs it over ssh.
    """
    if path.startswith("local://"):
        path = path[len("local://"):]
    try:
        if check:
            check_socket(path)
            return
        relay_stdio(path)
    except ProxyError as exc:
        _fail("fluxnode-relay", str(exc))
