"""Small helpers shared by the overlay's CLI commands (connect, one-line errors)."""

from __future__ import annotations

import click

from fluxnode.agent.broker.client import Client, ConnectError, RPCError


def connection_options(command):
    """``--uri`` and the ``--curve-cert`` a tcp:// URI needs: every command that talks to a
    broker takes both (as `connect` does)."""
    command = click.option(
        "--curve-cert", envvar="FLUXNODE_CURVE_CERT", metavar="PATH",
        type=click.Path(dir_okay=False),
        help="CURVE certificate for a tcp:// URI (default $FLUXNODE_CURVE_CERT)",
    )(command)
    return click.option(
        "--uri", envvar="FLUXNODE_URI", metavar="URI", help="broker URI (default $FLUXNODE_URI)"
    )(command)


def connect(uri: str | None, curve_cert: str | None = None, timeout: float = 10.0) -> Client:
    try:
        return Client.connect(uri, timeout=timeout, curve_cert=curve_cert)
    except ConnectError as exc:
        raise click.ClickException(str(exc).removeprefix("fluxnode: ")) from None


def rpc(
    client: Client,
    topic: str,
    payload: dict | None = None,
    nodeid: int = 0,
    timeout: float | None = None,
) -> dict:
    try:
        return client.rpc(topic, payload, nodeid=nodeid, timeout=timeout)
    except RPCError as exc:
        raise click.ClickException(prefixed(topic, exc.errstr)) from None


def prefixed(topic: str, errstr: str) -> str:
    """`topic: errstr`, once: a service that names itself already is not prefixed again."""
    return errstr if errstr.startswith(f"{topic}:") else f"{topic}: {errstr}"


def key_value_pairs(
    values: tuple[str, ...], what: str, form: str = "KEY=VALUE"
) -> dict[str, str]:
    """`KEY=VALUE` arguments as a dict (a later KEY wins); anything else is a usage error
    naming the option (`what`), the argument and the `form` expected."""
    out = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k:
            raise click.UsageError(f"{what} {v!r}: expected {form}")
        out[k] = val
    return out
