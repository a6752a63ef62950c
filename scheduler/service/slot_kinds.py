"""A request of several slot kinds (a pod group of different pods), matched kind by kind.

Fluxion's matcher (and the library, faithfully) matches one slot shape per jobspec
level and refuses sibling slots, while a pod group of different requests is one
jobspec of several slot kinds (scheduler/jobspec/builder.py). The service splits the
parsed `Jobspec` into one single-kind `Jobspec` per slot, matches them largest first
(first-fit decreasing) inside one service call and reports where each kind landed
(``kinds``: label, count, the slot's shape and its per-node summaries), so the
caller gives each pod exactly its share. Everything here works on the parsed
jobspec's typed resources; only the per-node summaries (the RPC's words) are dicts.
"""

from __future__ import annotations

import dataclasses

from fluxnode.broker_conf import idset
from fluxnode.scheduler.jobspec.jobspec import Count, Jobspec, Resource, Task
from fluxnode.scheduler.service.errors import Unsatisfiable

SLOT_LEAVES = ("core", "gpu", "memory")


def slot_totals(slot: Resource) -> dict[str, int]:
    """What one slot holds, by resource type (nested counts multiplied out)."""
    out: dict[str, int] = {}

    def walk(items: tuple[Resource, ...], times: int) -> None:
        for item in items:
            n = times * item.count.min
            out[item.type] = out.get(item.type, 0) + n
            walk(item.with_, n)

    walk(slot.with_, 1)
    return out


def slot_shape(slot: Resource) -> dict[str, int]:
    """What one slot of a kind holds, in the words of the per-node summaries: a caller
    (the binder after a restart) tells the kinds apart by it without the jobspec."""
    totals = slot_totals(slot)
    return {
        "cores": totals.get("core", 0),
        "gpus": totals.get("gpu", 0),
        "memory_mib": totals.get("memory", 0),
    }


def describe(totals: dict[str, int]) -> str:
    """'3 cores, 1 gpu, 512 MiB of memory' for error messages."""
    words = []
    for type_, n in totals.items():
        if type_ == "memory":
            words.append(f"{n} MiB of memory")
        else:
            words.append(f"{n} {type_}{'s' if n != 1 else ''}")
    return ", ".join(words) or "nothing"


def slot_unsatisfiable(slot: Resource, why: Exception) -> Unsatisfiable:
    """`why` one kind of a multi-kind request can never fit, naming the kind."""
    return Unsatisfiable(f"slot {slot.label} ({describe(slot_totals(slot))} each): {why}")


def _pod_task(label: str) -> Task:
    return Task(("pod",), label, {"per_slot": "1"})


def split_slot_kinds(spec: Jobspec) -> list[Jobspec] | None:
    """One jobspec per top-level slot kind of `spec` (its tasks, attributes and
    constraints kept), largest slot first (GPUs, then cores, then memory); None when
    `spec` has a single kind (or is not a list of slots)."""
    if len(spec.resources) < 2 or any(not r.is_slot for r in spec.resources):
        return None
    kinds = [
        dataclasses.replace(
            spec,
            resources=(slot,),
            tasks=tuple(t for t in spec.tasks if t.slot == slot.label) or (_pod_task(slot.label),),
        )
        for slot in spec.resources
    ]

    def size(kind: Jobspec) -> tuple[int, int, int]:
        t = slot_totals(kind.resources[0])
        return t.get("gpu", 0), t.get("core", 0), t.get("memory", 0)

    return sorted(kinds, key=size, reverse=True)


def widest_slot(spec: Jobspec, kinds: list[Jobspec]) -> Jobspec | None:
    """`spec` asked as N slots of its kinds' largest shape (every leaf type at its
    largest), N the kinds' slots together; None unless every slot is flat
    core/gpu/memory (only those can be widened into one shape)."""
    slots = [k.resources[0] for k in kinds]
    if any(set(slot_totals(s)) - set(SLOT_LEAVES) for s in slots):
        return None
    largest = {t: max(slot_totals(s).get(t, 0) for s in slots) for t in SLOT_LEAVES}
    count = sum(s.count.min for s in slots)
    wide = Resource("slot", Count(count, count), label="reserve",
                    with_=tuple(Resource(t, Count(n, n)) for t, n in largest.items() if n))
    return dataclasses.replace(spec, resources=(wide,), tasks=(_pod_task("reserve"),))


def merge_nodes(parts: list[list[dict]]) -> list[dict]:
    """Per-node summaries of several matches, combined per rank (cores/GPUs united, memory
    added)."""
    per_rank: dict[int, dict] = {}
    for nodes in parts:
        for n in nodes:
            m = per_rank.setdefault(
                n["rank"],
                {"hostname": n["hostname"], "cores": set(), "gpus": set(), "memory_mib": 0},
            )
            m["cores"].update(idset.decode(n.get("cores") or ""))
            m["gpus"].update(idset.decode(n.get("gpus") or ""))
            m["memory_mib"] += int(n.get("memory_mib") or 0)
    return [
        {
            "rank": rank,
            "hostname": m["hostname"],
            "cores": idset.encode(m["cores"]),
            "gpus": idset.encode(m["gpus"]),
            "memory_mib": m["memory_mib"],
        }
        for rank, m in sorted(per_rank.items())
    ]
