"""`fluxnode keygen PATH`: create the instance CURVE certificate, like `flux keygen`.

The file format, its checks and the 0600 write live in broker_conf/certificate.py;
this is only the command line around them (one line on stderr and exit 1 on error).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fluxnode.broker_conf.certificate import CertificateError, generate, write


@click.command("keygen")
@click.option(
    "-n",
    "--name",
    metavar="NAME",
    help="Certificate metadata 'name' (default: the local hostname).",
)
@click.option("-f", "--force", is_flag=True, help="Replace PATH if it already exists.")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def keygen(name: str | None, force: bool, path: Path) -> None:
    """Generate the instance's CURVE certificate (flux keygen).

    The certificate is written at PATH with mode 0600, like `flux keygen`.
    """
    try:
        write(path, generate(name), force=force)
    except CertificateError as exc:
        click.echo(f"fluxnode-keygen: {exc}", err=True)
        sys.exit(1)
