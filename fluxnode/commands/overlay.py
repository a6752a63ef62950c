"""`fluxnode overlay status`: draw the TBON and each subtree's health, like flux-overlay(1).

The tree comes from `overlay.topology`; each reachable broker is asked for
`overlay.health` (all requests of one tree level are pipelined). Brokers
behind a lost or offline parent cannot be asked: they are drawn with their
ancestor's state ("ghosts"), as flux does unless --no-ghost.
"""

from __future__ import annotations

import time

import click

from fluxnode.agent.broker.client import RPCError
from fluxnode.broker_conf import hostlist, idset
from fluxnode.commands.common import connect, connection_options, rpc

STATES = ("full", "partial", "degraded", "lost", "offline")


def format_duration(seconds: float) -> str:
    """Time in state the way flux prints it (6 significant digits, largest fitting unit)."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size:
            return f"{seconds / size:.6g}{unit}"
    return f"{seconds * 1000.0:.6g}ms"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def overlay() -> None:
    """Inspect the tree-based overlay network."""


def collect(client, root: int, tree: dict, timeout: float) -> dict[int, dict]:
    """Ask every reachable broker of `tree` for its health; returns rank -> info (+ rtt, ghost)."""
    info: dict[int, dict] = {}
    level = [tree]
    while level:
        sent = []
        for node in level:
            rank = node["rank"]
            if rank in info:  # already known as a ghost or as unreachable
                continue
            sent.append((node, client.send("overlay.health", None, rank), time.monotonic()))
        next_level = []
        for node, tag, t0 in sent:
            rank = node["rank"]
            try:
                msg = client.recv(tag, timeout)
            except RPCError as exc:
                info[rank] = {"status": "lost", "error": exc.errstr}
                _ghost(info, node, "lost")
                continue
            rtt = (time.monotonic() - t0) * 1000.0
            if msg.errnum:
                info[rank] = {
                    "status": info.get(rank, {}).get("status", "lost"),
                    "error": msg.errstr,
                }
                _ghost(info, node, info[rank]["status"])
                continue
            health = msg.decode_payload() or {}
            info[rank] = {"status": health["status"], "duration": health["duration"], "rtt": rtt,
                          "hostname": health["hostname"]}
            by_rank = {c["rank"]: c for c in health["children"]}
            for child in node["children"]:
                c = by_rank.get(child["rank"])
                if c is None:
                    continue
                if c["status"] in ("lost", "offline"):
                    info[child["rank"]] = {
                        "status": c["status"],
                        "duration": c["duration"],
                        "hostname": c["hostname"],
                        **({"error": c["error"]} if c.get("error") else {}),
                    }
                    _ghost(info, child, c["status"])
                else:
                    next_level.append(child)
        level = next_level
    return info


def _ghost(info: dict[int, dict], node: dict, status: str) -> None:
    for child in node["children"]:
        info.setdefault(child["rank"], {"status": status, "ghost": True})
        _ghost(info, child, status)


def render(
    tree: dict,
    info: dict[int, dict],
    hostnames: list[str],
    *,
    verbose: int = 0,
    down: bool = False,
    summary: bool = False,
    ghost: bool = True,
) -> list[str]:
    lines: list[str] = []

    def label(rank: int) -> str:
        i = info.get(rank, {"status": "unknown"})
        text = f"{rank} {hostnames[rank]}: {i['status']}"
        if verbose >= 1 and "duration" in i:
            text += f" for {format_duration(i['duration'])}"
        if verbose >= 2 and "rtt" in i:
            text += f" ({i['rtt']:.3f} ms)"
        return text

    def walk(node: dict, prefix: str) -> None:
        kids = [c for c in node["children"] if ghost or not info.get(c["rank"], {}).get("ghost")]
        if down:
            kids = [c for c in kids if info.get(c["rank"], {}).get("status") != "full"]
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(f"{prefix}{'└─ ' if last else '├─ '}{label(child['rank'])}")
            walk(child, prefix + ("   " if last else "│  "))

    lines.append(label(tree["rank"]))
    if not summary:
        walk(tree, "")
    return lines


@overlay.command("status")
@click.option("--verbose", "-v", count=True, help="-v: time in state; -vv: also round-trip time")
@click.option(
    "--rank", "-r", type=click.IntRange(min=0), default=0, help="root of the subtree to show"
)
@click.option(
    "--timeout", "-t", type=float, default=0.5, show_default=True, help="per-broker RPC timeout (s)"
)
@click.option("--summary", is_flag=True, help="show only the root subtree status")
@click.option("--down", is_flag=True, help="show only partial/degraded subtrees (hide full ones)")
@click.option("--no-ghost", is_flag=True, help="do not show brokers behind a lost/offline parent")
@click.option("--no-pretty", is_flag=True, help="no indentation or line drawing")
@click.option(
    "--wait",
    "-w",
    "wait_state",
    type=click.Choice(STATES),
    help="wait until the subtree is in STATE",
)
@connection_options
def status(
    verbose: int,
    rank: int,
    timeout: float,
    summary: bool,
    down: bool,
    no_ghost: bool,
    no_pretty: bool,
    wait_state: str | None,
    uri: str | None,
    curve_cert: str | None,
) -> None:
    """Show the status of each subtree of the overlay network."""
    with connect(uri, curve_cert) as client:
        if wait_state is not None:
            while rpc(client, "overlay.health", nodeid=rank)["status"] != wait_state:
                time.sleep(0.1)
        topo = rpc(client, "overlay.topology", {"rank": rank}, nodeid=0)
        tree = {**topo["tree"], "children": []} if summary else topo["tree"]
        info = collect(client, rank, tree, timeout if timeout > 0 else 3600.0)
    lines = render(
        topo["tree"],
        info,
        topo["hostnames"],
        verbose=verbose,
        down=down,
        summary=summary,
        ghost=not no_ghost,
    )
    for line in lines:
        click.echo(line.lstrip("│├└─ ") if no_pretty else line)


@overlay.command("errors")
@click.option(
    "--timeout", "-t", type=float, default=0.5, show_default=True, help="per-broker RPC timeout (s)"
)
@connection_options
def errors(timeout: float, uri: str | None, curve_cert: str | None) -> None:
    """Say why brokers are lost or offline, one line per error."""
    with connect(uri, curve_cert) as client:
        topo = rpc(client, "overlay.topology", {"rank": 0}, nodeid=0)
        info = collect(client, 0, topo["tree"], timeout if timeout > 0 else 3600.0)
    by_error: dict[str, list[str]] = {}
    for rank, i in sorted(info.items()):
        if i["status"] not in ("lost", "offline"):
            continue
        reason = i.get("error") or (
            "lost parent"
            if i.get("ghost") and i["status"] == "lost"
            else "never joined or shut down"
            if i["status"] == "offline"
            else "lost"
        )
        by_error.setdefault(reason, []).append(topo["hostnames"][rank])
    for reason, hosts in by_error.items():
        click.echo(f"{hostlist.encode(hosts)}: {reason}")


@overlay.command("parentof")
@click.argument("rank", type=click.IntRange(min=0))
@connection_options
def parentof(rank: int, uri: str | None, curve_cert: str | None) -> None:
    """Show the TBON parent of RANK."""
    with connect(uri, curve_cert) as client:
        topo = rpc(client, "overlay.topology", {"rank": 0}, nodeid=0)
    parents = _parents(topo["tree"])
    if rank >= topo["size"]:
        raise click.ClickException(f"rank {rank} is out of range (size {topo['size']})")
    if rank == 0:
        raise click.ClickException("rank 0 has no parent")
    click.echo(parents[rank])


@overlay.command("lookup")
@click.argument("target")
@connection_options
def lookup(target: str, uri: str | None, curve_cert: str | None) -> None:
    """Translate a rank idset to a hostlist, or a hostlist to ranks."""
    with connect(uri, curve_cert) as client:
        names = rpc(client, "overlay.topology", {"rank": 0}, nodeid=0)["hostnames"]
    try:
        ranks = idset.decode(target)
    except ValueError:
        ranks = None
    if ranks is not None:
        bad = [r for r in ranks if r >= len(names)]
        if bad:
            raise click.ClickException(f"rank {bad[0]} is out of range (size {len(names)})")
        click.echo(hostlist.encode(names[r] for r in ranks))
        return
    try:
        hosts = hostlist.decode(target)
    except ValueError as exc:
        raise click.ClickException(
            f"{target!r} is neither an idset nor a hostlist: {exc}"
        ) from None
    index = {h: r for r, h in reversed(list(enumerate(names)))}
    unknown = [h for h in hosts if h not in index]
    if unknown:
        raise click.ClickException(f"{unknown[0]} is not a host of this instance")
    click.echo(idset.encode(sorted(index[h] for h in hosts)))


def _parents(
    tree: dict, parent: int | None = None, out: dict[int, int | None] | None = None
) -> dict:
    out = {} if out is None else out
    out[tree["rank"]] = parent
    for child in tree["children"]:
        _parents(child, tree["rank"], out)
    return out
