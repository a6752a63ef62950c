"""Small helpers shared by the overlay's CLI commands (connect, one-line errors)."""

from __future__ import annotations

import click

from fluxnode.agent.broker.client import Client, ConnectError, RPCError

URI_OPTION = click.option(
    "--uri", envvar="FLUXNODE_URI", metavar="URI", help="broker URI (default $FLUXNODE_URI)"
)


def connect(uri: str | None, timeout: float = 10.0) -> Client:
    try:
        return Client.connect(uri, timeout=timeout)
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
        raise click.ClickException(f"{topic}: {exc.errstr}") from None
