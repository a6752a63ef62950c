"""`fluxnode resource list|info`: what the instance has and its state, like flux-resource(1)."""

from __future__ import annotations

import click
from fluxnode.agent.cli_common import URI_OPTION, connect, rpc

STATES = ("free", "allocated", "down")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def resource() -> None:
    """List and summarize the instance's resources."""


def list_rows(listing: dict, states: tuple[str, ...] = STATES) -> list[str]:
    """Rows of `flux resource list` (format "{state:>10} {nnodes:>6} {ncores:>8} {ngpus:>8} {nodelist}")."""
    from fluxnode.broker_conf import hostlist

    rows = [f"{'STATE':>10} {'NNODES':>6} {'NCORES':>8} {'NGPUS':>8} NODELIST"]
    for state in states:
        entries = listing.get(state, [])
        nodelist = hostlist.encode([e["hostname"] for e in entries]) if entries else ""
        ncores = sum(e["ncores"] for e in entries)
        ngpus = sum(e["ngpus"] for e in entries)
        rows.append(f"{state:>10} {len(entries):>6} {ncores:>8} {ngpus:>8} {nodelist}".rstrip())
    return rows


@resource.command("list")
@click.option("--states", "-s", default=",".join(STATES), show_default=True, help="comma list of states to show")
@URI_OPTION
def list_cmd(states: str, uri: str | None) -> None:
    """Show free, allocated and down nodes with their core and GPU counts."""
    wanted = tuple(s.strip() for s in states.split(",") if s.strip())
    bad = [s for s in wanted if s not in STATES]
    if bad:
        raise click.UsageError(f"--states: unknown state {bad[0]!r} (known: {', '.join(STATES)})")
    with connect(uri) as client:
        listing = rpc(client, "resource.list")
    for row in list_rows(listing, wanted):
        click.echo(row)


@resource.command("info")
@URI_OPTION
def info_cmd(uri: str | None) -> None:
    """One-line summary of the instance's resources, e.g. "8 Nodes, 16 Cores, 0 GPUs"."""
    from fluxnode.broker_conf import rv1

    with connect(uri) as client:
        R = rpc(client, "resource.R")["R"]
    try:
        nodes = rv1.parse_R(R)
    except ValueError as exc:
        raise click.ClickException(f"resource.R: {exc}") from None
    ncores = sum(len(n.cores) for n in nodes)
    ngpus = sum(len(n.gpus) for n in nodes)
    click.echo(f"{len(nodes)} Nodes, {ncores} Cores, {ngpus} GPUs")
