"""`fluxnode resource list|info|R|status|drain|undrain`, like flux-resource(1).

`list`, `info` and `R` are the scheduler view (free, allocated, down: a drained node is
down); `status` is the system view (available, draining, drained; online or offline), and
`drain`/`undrain` take nodes out of scheduling and put them back (the leader's
`sched.drain`/`sched.undrain`, kept across restarts)."""

from __future__ import annotations

import json
import string
import time

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
    """Show free, allocated and down nodes with cores and GPUs."""
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
    """Print a one-line summary such as "8 Nodes, 16 Cores, 0 GPUs"."""
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


# -- the system view: status, drain, undrain (flux resource status|drain|undrain) ----------

STATUS_STATES = ("all", "online", "offline", "avail", "exclude", "drain", "draining", "drained",
                 "torpid", "allocated", "housekeeping")
STATUS_DEFAULT_STATES = "avail,exclude,draining,drained,torpid,housekeeping"
STATUS_FORMAT = "{state:>12} {up:>2} {nnodes:>6} {nodelist}"
DRAIN_FORMAT = "{timestamp:<12} {state:<8.8} {reason:<30.30} {nodelist}"
STATUS_HEADINGS = {
    "state": "STATE",
    "statex": "STATE",
    "status": "STATUS",
    "up": "UP",
    "nnodes": "NNODES",
    "ranks": "RANKS",
    "nodelist": "NODELIST",
    "reason": "REASON",
    "timestamp": "TIME",
}
GROUPING_FIELDS = ("nnodes", "ranks", "nodelist")  # lines equal in all else are merged


def drain_time(timestamp: float | None) -> str:
    """When a node was drained, as flux prints it (e.g. "Nov25 05:01")."""
    if not timestamp:
        return ""
    return time.strftime("%b%d %H:%M", time.localtime(timestamp))


def status_lines(listing: dict, states: set[str], include: set[int] | None) -> list[dict]:
    """One line per (state, online) with its nodes, as `flux resource status`; drained and
    draining nodes one line each (their reasons differ). `listing` is resource.list's."""
    hosts: dict[int, str] = {}
    allocated: set[int] = set()
    for part in ("free", "allocated", "down"):
        for e in listing.get(part, []):
            hosts[e["rank"]] = e["hostname"]
            if part == "allocated":
                allocated.add(e["rank"])
    if include is not None:
        hosts = {r: h for r, h in hosts.items() if r in include}
    offline = set(idset.decode(listing.get("offline") or ""))
    drain = {d["rank"]: d for d in listing.get("drain") or [] if d.get("rank") in hosts}
    want_online = "online" in states or "offline" not in states
    want_offline = "offline" in states or "online" not in states
    lines = []

    def add(state: str, ranks: list[int], online: bool, drained: dict | None = None) -> None:
        if (online and not want_online) or (not online and not want_offline):
            return
        lines.append({
            "statex": state,
            "state": state if online else f"{state}*",
            "status": "online" if online else "offline",
            "up": "✔" if online else "✗",
            "ranks": sorted(ranks),
            "reason": (drained or {}).get("reason", ""),
            "timestamp": drain_time((drained or {}).get("timestamp")),
        })

    for state in ("avail", "exclude", "allocated", "torpid", "housekeeping"):
        if not states & {state, "all"}:
            continue
        if state == "avail":
            chosen = [r for r in hosts if r not in drain]
        elif state == "allocated":
            chosen = [r for r in hosts if r in allocated]
        else:
            chosen = []  # fluxnode excludes nothing by configuration and runs no housekeeping
        for online in (True, False):
            add(state, [r for r in chosen if (r not in offline) == online], online)
    for state in ("draining", "drained"):
        if not states & {state, "all"}:
            continue
        ranks = [r for r, d in drain.items() if d.get("state") == state]
        if not ranks:
            add(state, [], True)
        for r in sorted(ranks):
            add(state, [r], r not in offline, drain[r])
    for line in lines:
        line["nnodes"] = len(line["ranks"])
        line["nodelist"] = hostlist.encode([hosts[r] for r in line["ranks"]])
        line["ranks"] = idset.encode(line["ranks"])
    return lines


def format_lines(
    lines: list[dict], fmt: str, header: bool, skip_empty: bool, offline: bool = False
) -> list[str]:
    """Rows for `lines` in `fmt`, merging lines that print the same but for their nodes."""
    fields = [f for _, f, _, _ in string.Formatter().parse(fmt) if f]
    unknown = [f for f in fields if f not in STATUS_HEADINGS]
    if unknown:
        raise click.UsageError(
            f"--format: unknown field {unknown[0]!r} (known: {', '.join(STATUS_HEADINGS)})"
        )
    merged: dict[tuple, dict] = {}
    for line in lines:
        if not line["nnodes"] and (skip_empty or (line["status"] == "offline" and not offline)):
            continue  # empty offline lines only when offline nodes were asked for
        key = tuple(line[f] for f in fields if f not in GROUPING_FIELDS)
        if key not in merged:
            merged[key] = dict(line, ranks=set(idset.decode(line["ranks"])))
            continue
        m = merged[key]
        m["ranks"] |= set(idset.decode(line["ranks"]))
        m["nnodes"] += line["nnodes"]
        m["nodelist"] = hostlist.encode(
            sorted(set(hostlist.decode(m["nodelist"] or "")) | set(
                hostlist.decode(line["nodelist"] or "")))
        ) if m["nodelist"] or line["nodelist"] else ""
    rows = [fmt.format(**STATUS_HEADINGS).rstrip()] if header else []
    for m in merged.values():
        try:
            rows.append(fmt.format(**dict(m, ranks=idset.encode(sorted(m["ranks"])))).rstrip())
        except (ValueError, TypeError) as exc:
            raise click.UsageError(f"--format: {exc}") from None
    return rows


def parse_status_states(value: str | None) -> tuple[set[str], bool]:
    """--states for status: the set asked for and whether it was given (Flux skips empty
    lines only when it was not)."""
    if value is None:
        return set(STATUS_DEFAULT_STATES.split(",")), False
    wanted = [s.strip() for s in value.split(",") if s.strip()]
    bad = [s for s in wanted if s not in STATUS_STATES]
    if bad or not wanted:
        raise click.UsageError(
            f"--states: unknown state {bad[0] if bad else value!r} "
            f"(known: {', '.join(STATUS_STATES)})"
        )
    states = set(wanted)
    if not states - {"online", "offline"}:
        states |= set(STATUS_DEFAULT_STATES.split(","))
    if "drain" in states:
        states |= {"draining", "drained"}
    return states, True


@resource.command("status")
@click.option("--states", "-s", default=None,
              help=f"comma list of: {', '.join(STATUS_STATES)} (default {STATUS_DEFAULT_STATES})")
@click.option("--format", "-o", "fmt", default=STATUS_FORMAT,
              help="python format with fields " + ", ".join(STATUS_HEADINGS))
@click.option("--no-header", "-n", is_flag=True, help="suppress the header")
@click.option("--skip-empty", is_flag=True, help="suppress lines with no nodes")
@click.option(
    "--include", "-i", metavar="TARGETS", help="only these ranks (idset) or hosts (hostlist)"
)
@connection_options
def status_cmd(states: str | None, fmt: str, no_header: bool, skip_empty: bool,
               include: str | None, uri: str | None, curve_cert: str | None) -> None:
    """Show which nodes are available, drained, online or offline."""
    wanted, given = parse_status_states(states)
    with connect(uri, curve_cert) as client:
        listing = rpc(client, "resource.list")
    lines = status_lines(listing, wanted, parse_include(include, listing))
    for row in format_lines(
        lines, fmt, not no_header, skip_empty or not given, offline="offline" in wanted
    ):
        click.echo(row)


@resource.command("drain")
@click.option("--force", "-f", count=True,
              help="overwrite the reason of nodes already drained (twice: the time too)")
@click.option("--update", "-u", is_flag=True,
              help="do not fail on nodes already drained; keep their reason")
@click.option("--format", "-o", "fmt", default=DRAIN_FORMAT,
              help="(listing) python format with fields " + ", ".join(STATUS_HEADINGS))
@click.option("--no-header", "-n", is_flag=True, help="(listing) suppress the header")
@click.option(
    "--include", "-i", metavar="TARGETS", help="(listing) only these ranks or hosts"
)
@click.argument("targets", required=False)
@click.argument("reason", nargs=-1)
@connection_options
def drain_cmd(force: int, update: bool, fmt: str, no_header: bool, include: str | None,
              targets: str | None, reason: tuple[str, ...], uri: str | None,
              curve_cert: str | None) -> None:
    """Drain TARGETS, or list the drained nodes without TARGETS.

    TARGETS is an idset of ranks or a hostlist: nothing new is placed there, what runs
    there keeps running."""
    with connect(uri, curve_cert) as client:
        if targets is None:
            listing = rpc(client, "resource.list")
            lines = status_lines(listing, {"draining", "drained"}, parse_include(include, listing))
            for row in format_lines(lines, fmt, not no_header, True):
                click.echo(row)
            return
        if force and update:
            raise click.UsageError("only one of --force and --update may be given")
        mode = "update" if update else {0: "fail", 1: "overwrite"}.get(force, "force-overwrite")
        payload = {"targets": targets, "reason": " ".join(reason), "mode": mode}
        rpc(client, "sched.drain", payload)


@resource.command("undrain")
@click.option("--force", "-f", is_flag=True, help="do not fail on nodes that are not drained")
@click.argument("targets")
@connection_options
def undrain_cmd(force: bool, targets: str, uri: str | None, curve_cert: str | None) -> None:
    """Put drained TARGETS (ranks or hosts) back into scheduling."""
    payload: dict = {"targets": targets}
    if force:
        payload["mode"] = "force"
    with connect(uri, curve_cert) as client:
        rpc(client, "sched.undrain", payload)
