"""`fluxnode alloc`, `fluxnode allocs`, `fluxnode cancel`: the scheduler service by hand.

They speak the same sched.* RPCs as the binder, so what an operator sees and
does here is exactly what the binder sees and does.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from fluxnode.broker_conf import hostlist, idset
from fluxnode.commands.common import connect, connection_options, rpc
from fluxnode.scheduler.jobspec.builder import JobspecBuildError, SlotKind, build_jobspec
from fluxnode.scheduler.jobspec.jobspec import Jobspec, JobspecError
from fluxnode.scheduler.policies.policy import POLICIES


def _rpc(uri: str | None, curve_cert: str | None, topic: str, payload: dict) -> dict:
    with connect(uri, curve_cert) as client:
        return rpc(client, topic, payload)


def _load_jobspec(path: str) -> dict:
    """The jobspec in PATH (- for stdin), checked here as the service will check it, so that
    a mistake is named with its line and column before anything is sent."""
    try:
        data = click.get_binary_stream("stdin").read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"{path}: {exc.strerror or exc}") from None
    try:
        return Jobspec.parse(data).to_dict()
    except JobspecError as exc:
        raise click.ClickException(f"{path}: {exc}") from None


def _count(node: dict, key: str) -> int:
    return len(idset.decode(node.get(key) or ""))


@click.command()
@click.argument("jobspec", required=False)
@click.option("-N", "--nodes", type=click.IntRange(min=1), help="Number of nodes.")
@click.option("-n", "--slots", type=click.IntRange(min=1),
              help="Number of slots (default: --nodes, else 1).")
@click.option("-c", "--cores-per-slot", type=click.IntRange(min=0), default=1, show_default=True,
              help="Cores in each slot.")
@click.option("-g", "--gpus-per-slot", type=click.IntRange(min=0), default=0, show_default=True,
              help="GPUs in each slot.")
@click.option("-m", "--memory-per-slot", type=click.IntRange(min=0), default=0,
              help="MiB of memory per slot.")
@click.option("--policy", type=click.Choice(POLICIES), default="first", show_default=True,
              help="Match policy: which free resources are picked first.")
@click.option("--reserve", is_flag=True, help="Reserve the earliest start if it cannot run now.")
@click.option("--json", "as_json", is_flag=True, help="Print the service's JSON answer.")
@connection_options
def alloc(
    jobspec,
    nodes,
    slots,
    cores_per_slot,
    gpus_per_slot,
    memory_per_slot,
    policy,
    reserve,
    as_json,
    uri,
    curve_cert,
):
    """Allocate resources for a jobspec or for given counts.

    JOBSPEC is a YAML or JSON file (- for stdin); without it, the options build one.
    """
    if jobspec is not None:
        spec = _load_jobspec(jobspec)
    else:
        if not (cores_per_slot or gpus_per_slot or memory_per_slot):
            raise click.UsageError("-c/--cores-per-slot, -g/--gpus-per-slot and "
                                   "-m/--memory-per-slot are all 0: a slot must ask for something")
        count = slots if slots is not None else (nodes or 1)
        try:
            spec = build_jobspec(
                [SlotKind(cores_per_slot, gpus_per_slot, memory_per_slot, count)], nnodes=nodes
            )
        except JobspecBuildError as exc:
            raise click.ClickException(str(exc)) from None
    payload = {
        "jobspec": spec,
        "policy": policy,
        "op": "allocate_orelse_reserve" if reserve else "allocate",
    }
    payload["labels"] = {"owner": "cli"}
    answer = _rpc(uri, curve_cert, "sched.alloc", payload)
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(
        f"allocation {answer['id']}: {answer['status']}"
        + (f" at {answer['at']}" if answer["status"] == "RESERVED" else "")
    )
    click.echo(f"{'RANK':>5} {'HOSTNAME':<16} {'CORES':<12} {'GPUS':<8} MEMORY")
    for node in answer.get("nodes", []):
        memory = f"{node.get('memory_mib', 0)}MiB" if node.get("memory_mib") else "-"
        click.echo(
            f"{node['rank']:>5} {node['hostname']:<16} {node['cores'] or '-':<12} "
            f"{node.get('gpus') or '-':<8} {memory}"
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the service's JSON answer.")
@connection_options
def allocs(as_json, uri, curve_cert):
    """List allocations with their pods, nodes, cores and GPUs.

    One line each: id, state, group, pods, cores, GPUs and the nodes' hostlist.
    """
    answer = _rpc(uri, curve_cert, "sched.list", {})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(
        f"{'ID':>6} {'STATE':<9} {'GROUP':<28} {'PODS':>4} {'NCORES':>6} {'NGPUS':>5} NODELIST"
    )
    for a in answer.get("allocations", []):
        labels = a.get("labels") or {}
        pods = labels.get("pods")
        npods = len(pods) if isinstance(pods, dict | list) else "-"
        cores = sum(_count(n, "cores") for n in a["nodes"])
        gpus = sum(_count(n, "gpus") for n in a["nodes"])
        hosts = (
            hostlist.encode(dict.fromkeys(n["hostname"] for n in a["nodes"])) if a["nodes"] else "-"
        )
        group = labels.get("group") or labels.get("owner") or "-"
        click.echo(
            f"{a['id']:>6} {a['status']:<9} {group:<28} {npods:>4} {cores:>6} {gpus:>5} {hosts}"
        )


@click.command()
@click.argument("alloc_id", metavar="ID", type=int)
@click.option("--ranks", help="Free only these ranks (RFC 22 idset, e.g. 0-3).")
@connection_options
def cancel(alloc_id, ranks, uri, curve_cert):
    """Cancel allocation ID, or the part of it on --ranks."""
    payload: dict = {"id": alloc_id}
    if ranks is not None:
        try:
            idset.decode(ranks)
        except idset.IdsetError as exc:
            raise click.ClickException(f"--ranks: {exc}") from None
        payload["ranks"] = ranks
    answer = _rpc(uri, curve_cert, "sched.cancel", payload)
    left = f"; ranks {answer['remaining']} still allocated" if answer.get("remaining") else ""
    click.echo(f"allocation {alloc_id}: freed ranks {answer.get('freed') or '-'}{left}")
