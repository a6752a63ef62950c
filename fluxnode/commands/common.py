"""Small helpers shared by the overlay's CLI commands (connect, one-line errors)."""

from __future__ import annotations

import errno

import click

from fluxnode.agent.broker.client import (
    Client,
    ConnectError,
    CurveCertError,
    CurveHandshakeError,
    RPCError,
)


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
        raise click.ClickException(connect_error_message(exc)) from None


# The OS errors that mean "no broker there": no socket file, or nothing accepting on it.
NOT_LISTENING = (errno.ENOENT, errno.ECONNREFUSED)


def connect_error_message(exc: ConnectError) -> str:
    """The client library's ConnectError in the command line's words: the option or variable
    the user set (--uri or $FLUXNODE_URI, --curve-cert or $FLUXNODE_CURVE_CERT) and what to
    check, instead of the library's argument names."""
    uri = given_as("uri", "--uri", "FLUXNODE_URI")
    if exc.uri is None:
        return ("no broker URI given: pass --uri URI or set FLUXNODE_URI "
                "(`fluxnode start` sets it for the command it runs)")
    if isinstance(exc, CurveCertError):
        if exc.path is None:
            return (f"cannot connect to {exc.uri}: a tcp:// URI needs the instance's CURVE "
                    "certificate: pass --curve-cert PATH or set FLUXNODE_CURVE_CERT")
        cert = given_as("curve_cert", "--curve-cert", "FLUXNODE_CURVE_CERT")
        return f"cannot connect to {exc.uri}: {cert}: {exc.reason}"
    if exc.errnum in NOT_LISTENING:
        return (f"no broker is listening at {exc.uri} ({exc.reason}): is the instance running? "
                f"Check {uri}, or start one with `fluxnode start --test-size N`")
    if exc.errnum == errno.EACCES:
        return (f"cannot connect to {exc.uri}: {exc.reason} (a broker's local:// socket is for "
                "the user it runs as; from elsewhere use its tcp:// URI and --curve-cert)")
    if exc.errnum is not None:
        return f"cannot connect to {exc.uri}: {exc.reason} (check {uri})"
    return f"cannot connect to {exc.uri}: {exc.reason}"


def given_as(param: str, option: str, envvar: str) -> str:
    """How the user gave `param` of the running command: `option`, or `$envvar` when click
    read it from there, so that an error names what the user typed."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(param) if ctx is not None else None
    if source is click.core.ParameterSource.ENVIRONMENT:
        return f"${envvar}"
    return option


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
        raise click.ClickException(prefixed(topic, rpc_errstr(exc))) from None


def rpc_errstr(exc: RPCError) -> str:
    """An RPC's error for the command line: a refused CURVE handshake names the option or
    variable that gave the certificate."""
    if isinstance(exc, CurveHandshakeError):
        cert = given_as("curve_cert", "--curve-cert", "FLUXNODE_CURVE_CERT")
        return f"{exc.uri} refused the CURVE handshake: is {cert} the instance's certificate?"
    return exc.errstr


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
