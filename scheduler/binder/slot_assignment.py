"""Which pod gets which part of a group's allocation.

The service answers with per-node totals (``cores: "0-7"``, ``memory_mib: 4096``
on rank 3); the group's pods must each get a node and their own cores/GPUs (and
memory) out of those. Pods are placed largest first into the first node with
room (first-fit decreasing). For a homogeneous group this always succeeds
because the allocation was made of exactly such slots. A heterogeneous group's
answer also says where each slot kind landed (``kinds``): `assign_kinds` gives
each kind's pods that kind's share, so it succeeds too (every node of a kind
holds whole slots of that kind's shape); the service keeps ``kinds`` with the
allocation, so a binder rebuilding after a restart splits it the same way. Only
without that split (an allocation from a service that did not keep it), first-fit
over the totals can in rare shapes fail although a split exists, which is
reported rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluxnode.broker_conf import idset


class AssignmentError(RuntimeError):
    """The allocation cannot be split into the pods' requests."""


@dataclass(frozen=True, slots=True)
class PodSlot:
    """One pod's share: where it runs and which cores/GPUs it owns."""

    rank: int
    hostname: str
    cores: str
    gpus: str

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "hostname": self.hostname,
            "cores": self.cores,
            "gpus": self.gpus,
        }


def assign(pods: dict[str, tuple[int, int, int]], nodes: list[dict]) -> dict[str, PodSlot]:
    """Split `nodes` (service answer) among `pods` (uid -> (cores, gpus, memory MiB))."""
    free = [
        (
            int(n["rank"]),
            n["hostname"],
            idset.decode(n.get("cores") or ""),
            idset.decode(n.get("gpus") or ""),
            [int(n.get("memory_mib") or 0)],
        )
        for n in nodes
    ]
    out: dict[str, PodSlot] = {}
    for uid, (ncores, ngpus, mib) in sorted(
        pods.items(), key=lambda kv: (-kv[1][1], -kv[1][0], -kv[1][2], kv[0])
    ):
        for rank, hostname, cores, gpus, memory in free:
            if len(cores) >= ncores and len(gpus) >= ngpus and memory[0] >= mib:
                mine_c, mine_g = cores[:ncores], gpus[:ngpus]
                del cores[:ncores]
                del gpus[:ngpus]
                memory[0] -= mib
                out[uid] = PodSlot(rank, hostname, idset.encode(mine_c), idset.encode(mine_g))
                break
        else:
            raise AssignmentError(
                f"allocation has no room left for a pod of {ncores} cores, {ngpus} GPUs and {mib} "
                "MiB of memory"
            )
    return out


Shape = tuple[int, int, int]  # (cores, GPUs, memory MiB) of one pod's slot


def assign_kinds(pods: dict[str, Shape], kinds: dict[Shape, list[dict]]) -> dict[str, PodSlot]:
    """Split a multi-kind allocation: the pods of each shape share the nodes where the
    slots of that shape landed (`kinds`: shape -> per-node summaries of that kind)."""
    by_shape: dict[Shape, dict[str, Shape]] = {}
    for uid, shape in pods.items():
        by_shape.setdefault(shape, {})[uid] = shape
    missing = set(by_shape) - set(kinds)
    if missing:
        raise AssignmentError(
            f"allocation has no slots of shape {sorted(missing)[0]} (cores, GPUs, MiB)"
        )
    out: dict[str, PodSlot] = {}
    for shape, group in by_shape.items():
        out.update(assign(group, kinds[shape]))
    return out
