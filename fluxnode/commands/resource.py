"""`fluxnode resource list|info|R`: the scheduler view of resources, like flux-resource(1)."""

from __future__ import annotations

import json
import string

import click

from fluxnode.broker_conf import hostlist, idset
from fluxnode.commands.common import connect, connection_options, rpc

STATES = ("free", "allocated", "down", "up", "all")
DEFAULT_STATES = "free,allocated,down"
DEFAULT_FORMAT = "{state:>10} {nnodes:>6} {ncores:>8} {ngpus:>8} {nodelist}"
HEADINGS = {
    "state": "STATE",
    "nnodes": "NNODES",
    "ncores": "NCORES",
    "ngpus": "NGPUS",
    "ranks": "RANKS",
    "nodelist": "NODELIST",
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def resource() -> None:
    """List and summarize the instance's resources."""


def parse_states(value: str) -> tuple[str, ...]:
    wanted = tuple(s.strip() for s in value.split(",") if s.strip())
    bad = [s for s in wanted if s not in STATES]
    if bad or not wanted:
        raise click.UsageError(
            f"--states: unknown state {bad[0] if bad else value!r} (known: {', '.join(STATES)})"
        )
    return wanted


def select(listing: dict, state: str, include: set[int] | None = None) -> list[dict]:
    """Per-node entries in `state`; `up`/`all` merge a node's entries from several states."""
    parts = {"up": ("free", "allocated"), "all": ("free", "allocated", "down")}.get(state, (state,))
    merged: dict[int, dict] = {}
    for part in parts:
        for e in listing.get(part, []):
            if include is not None and e["rank"] not in include:
                continue
            m = merged.setdefault(
                e["rank"], {"rank": e["rank"], "hostname": e["hostname"], "ncores": 0, "ngpus": 0}
            )
            m["ncores"] += e["ncores"]
            m["ngpus"] += e["ngpus"]
    return [merged[r] for r in sorted(merged)]


def summarize(state: str, entries: list[dict]) -> dict:
    return {
        "state": state,
        "nnodes": len(entries),
        "ncores": sum(e["ncores"] for e in entries),
        "ngpus": sum(e["ngpus"] for e in entries),
        "ranks": idset.encode([e["rank"] for e in entries]),
        "nodelist": hostlist.encode([e["hostname"] for e in entries]) if entries else "",
    }


def list_rows(
    listing: dict,
    states: tuple[str, ...] = ("free", "allocated", "down"),
    fmt: str = DEFAULT_FORMAT,
    header: bool = True,
    include: set[int] | None = None,
) -> list[str]:
    """Rows of `flux resource list` (one per state, header from the format's field widths)."""
    fields = [f for _, f, _, _ in string.Formatter().parse(fmt) if f]
    unknown = [f for f in fields if f not in HEADINGS]
    if unknown:
        raise click.UsageError(
            f"--format: unknown field {unknown[0]!r} (known: {', '.join(HEADINGS)})"
        )
    rows = []
    if header:
        rows.append(fmt.format(**HEADINGS).rstrip())
    for state in states:
        try:
            rows.append(fmt.format(**summarize(state, select(listing, state, include))).rstrip())
        except (ValueError, TypeError) as exc:
            raise click.UsageError(f"--format: {exc}") from None
    return rows


def parse_include(value: str | None, listing: dict) -> set[int] | None:
    """`-i TARGETS`: an idset of ranks or a hostlist (unknown ones are not an error, as in flux)."""
    if value is None:
        return None
    try:
        return set(idset.decode(value))
    except ValueError:
        pass
    try:
        hosts = set(hostlist.decode(value))
    except ValueError as exc:
        raise click.UsageError(
            f"--include: {value!r} is neither an idset nor a hostlist: {exc}"
        ) from None
    return {
        e["rank"]
        for s in ("free", "allocated", "down")
        for e in listing.get(s, [])
        if e["hostname"] in hosts
    }


@resource.command("list")
@click.option("--states", "-s", default=DEFAULT_STATES, show_default=True,
              help="comma list of states: free, allocated, down, up, all")
@click.option(
    "--format",
    "-o",
    "fmt",
    default=DEFAULT_FORMAT,
    help="python format with fields " + ", ".join(HEADINGS),
)
@click.option("--no-header", "-n", is_flag=True, help="suppress the header")
@click.option(
    "--include", "-i", metavar="TARGETS", help="only these ranks (idset) or hosts (hostlist)"
)
@connection_options
def list_cmd(states: str, fmt: str, no_header: bool, include: str | None, uri: str | None,
    curve_cert: str | None) -> None:
    """Show free, allocated and down nodes with their core and GPU counts."""
    wanted = parse_states(states)
    with connect(uri, curve_cert) as client:
        listing = rpc(client, "resource.list")
    for row in list_rows(listing, wanted, fmt, not no_header, parse_include(include, listing)):
        click.echo(row)


@resource.command("info")
@click.option(
    "--states", "-s", default="all", show_default=True, help="comma list of states to count"
)
@click.option(
    "--include", "-i", metavar="TARGETS", help="only these ranks (idset) or hosts (hostlist)"
)
@connection_options
def info_cmd(states: str, include: str | None, uri: str | None, curve_cert: str | None) -> None:
    """One-line summary of the instance's resources, e.g. "8 Nodes, 16 Cores, 0 GPUs"."""
    wanted = parse_states(states)
    with connect(uri, curve_cert) as client:
        listing = rpc(client, "resource.list")
    only = parse_include(include, listing)
    per_rank: dict[int, dict] = {}
    for state in wanted:
        for e in select(listing, state, only):
            if e["rank"] not in per_rank:
                per_rank[e["rank"]] = e
            elif state not in ("up", "all"):
                per_rank[e["rank"]] = {
                    **per_rank[e["rank"]],
                    "ncores": per_rank[e["rank"]]["ncores"] + e["ncores"],
                    "ngpus": per_rank[e["rank"]]["ngpus"] + e["ngpus"],
                }
    total = summarize("", list(per_rank.values()))
    click.echo(f"{total['nnodes']} Nodes, {total['ncores']} Cores, {total['ngpus']} GPUs")


@resource.command("R")
@connection_options
def r_cmd(uri: str | None, curve_cert: str | None) -> None:
    """Print the instance's R (RFC 20) as the leader assembled it."""
    with connect(uri, curve_cert) as client:
        click.echo(json.dumps(rpc(client, "resource.R")["R"]))
