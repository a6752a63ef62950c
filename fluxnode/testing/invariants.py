"""THE invariant of issue 10, checked from outside the code under test.

A scheduler that overcommits after a restart is worse than none, so the fault-injection
test, the soak and the binder tests all ask one question after every step: is what the
leader says it handed out consistent with itself, with its journal, with what it told its
clients and with where the pods run? This module answers it and nothing else.

Why an oracle of its own: it reads only what an operator could read (the `sched.list` and
`sched.resource-status` answers, the journal file opened read-only, the pods through the
official Kubernetes client) and parses RFC 22 idsets and R_lite itself, never with the
product's idset, R or journal modules, so a bug those share with the checker cannot hide.

Gathering (`gather`) and judging (`check`) are apart: `check` is a pure function of a
`Snapshot`, so its own tests can feed it hand-made broken states and see each kind of
violation named. `gather` reads sched.list twice around the pods and the journal and keeps
only a snapshot in which nothing moved in between (the binder acts concurrently), so a race
between two reads is never reported as a violation.

Violation kinds (`Violation.kind`):
  core-twice / gpu-twice   one (rank, core|gpu) in two live allocations
  memory-over              a rank's allocated memory exceeds its capacity
  outside-R                an allocation names a core/GPU its rank does not have
  lost                     an acknowledged allocation is missing (or no longer ALLOCATED)
  changed                  an acknowledged allocation is present with other nodes
  unexpected               (with exhaustive expectations) an allocation nobody was told of
  journal-missing / journal-extra / journal-differs
                           the journal's ALLOCATED set differs from sched.list's
  journal-unreadable       the journal file cannot be read
  pod-core-twice           one core of a node given to two running pods
  pod-outside              a bound pod's cores are not inside an allocation of its group
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ANN = "fluxnode.io/"
JOURNAL_FILE = "sched-journal.sqlite"  # in the statedir of rank 0


class IdsetParseError(ValueError):
    """Text that is not an RFC 22 idset."""


def parse_idset(text: str | None) -> frozenset[int]:
    """An RFC 22 idset ("0-3,7", optionally "[0-3]") as a set of ints; raises IdsetParseError
    for anything else (reversed or overlapping ranges included)."""
    body = (text or "").strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    ids: set[int] = set()
    for part in filter(None, body.split(",")):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise IdsetParseError(f"idset {text!r}: {part!r} is not N or N-M")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first > last:
            raise IdsetParseError(f"idset {text!r}: range {part!r} runs backwards")
        span = set(range(first, last + 1))
        if ids & span:
            raise IdsetParseError(f"idset {text!r}: {part!r} overlaps an earlier range")
        ids |= span
    return frozenset(ids)


def format_ids(ids: Iterable[int]) -> str:
    """Ids as a compact idset, for readable details."""
    out: list[str] = []
    for i in sorted(set(ids)):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class NodeShare:
    """What one allocation holds on one rank, in comparable form."""

    rank: int
    cores: frozenset[int]
    gpus: frozenset[int]
    memory_mib: int

    @classmethod
    def from_wire(cls, node: Mapping[str, Any]) -> NodeShare:
        return cls(int(node["rank"]), parse_idset(node.get("cores")),
                   parse_idset(node.get("gpus")), int(node.get("memory_mib") or 0))

    def __str__(self) -> str:
        text = f"rank {self.rank} cores [{format_ids(self.cores)}]"
        if self.gpus:
            text += f" gpus [{format_ids(self.gpus)}]"
        if self.memory_mib:
            text += f" {self.memory_mib} MiB"
        return text


def shares(nodes: Iterable[Mapping[str, Any]]) -> tuple[NodeShare, ...]:
    """An allocation's `nodes` (wire form) as NodeShares sorted by rank."""
    return tuple(sorted((NodeShare.from_wire(n) for n in nodes), key=lambda s: s.rank))


def describe(nodes: Iterable[NodeShare]) -> str:
    return "; ".join(str(n) for n in nodes) or "nothing"


@dataclass
class Snapshot:
    """Everything the checker judges, read at one moment."""

    allocations: list[dict]  # sched.list's "allocations"
    status: dict  # sched.resource-status's answer
    journal: list[dict] | None = None  # rows of the journal's allocation table (None: not read)
    journal_error: str | None = None
    pods: list[dict] | None = None  # pod objects as the API server returns them (None: no pods)
    taken_at: float = field(default_factory=time.time)


# -- reading -------------------------------------------------------------------------------


def read_journal(path: Path | str) -> list[dict]:
    """The journal's allocation rows, opened read-only (the leader may be writing it)."""
    uri = f"file:{Path(path)}?mode=ro"
    db = sqlite3.connect(uri, uri=True, timeout=5.0)
    try:
        rows = db.execute("SELECT id, nodes, labels FROM allocation ORDER BY id").fetchall()
    finally:
        db.close()
    return [{"id": r[0], "nodes": json.loads(r[1]), "labels": json.loads(r[2])} for r in rows]


def read_pods(core_api: Any, namespace: str | None = None) -> list[dict]:
    """Pods through the official client (`kubernetes.client.CoreV1Api`), as plain dicts."""
    if namespace is None:
        resp = core_api.list_pod_for_all_namespaces(_preload_content=False)
    else:
        resp = core_api.list_namespaced_pod(namespace, _preload_content=False)
    return json.loads(resp.data)["items"]


def gather(
    rpc: Any,
    journal_path: Path | str | None = None,
    *,
    core_api: Any = None,
    namespace: str | None = None,
    attempts: int = 20,
) -> Snapshot:
    """Read a consistent snapshot. `rpc(topic, payload) -> dict` asks the leader (e.g.
    `Client.rpc` or `Instance.rpc`). sched.list is read before and after the journal and the
    pods; the snapshot is kept once both reads agree and the journal read twice agrees too
    (after `attempts` tries the last one is judged anyway)."""
    snap: Snapshot | None = None
    for _ in range(attempts):
        before = rpc("sched.list", {})["allocations"]
        pods = read_pods(core_api, namespace) if core_api is not None else None
        journal, error = None, None
        if journal_path is not None:
            try:
                journal = read_journal(journal_path)
            except (sqlite3.Error, OSError, ValueError) as exc:
                error = f"{journal_path}: {exc}"
        status = rpc("sched.resource-status", {})
        after = rpc("sched.list", {})["allocations"]
        again = journal
        if journal_path is not None and error is None:
            try:
                again = read_journal(journal_path)
            except (sqlite3.Error, OSError, ValueError) as exc:
                error = f"{journal_path}: {exc}"
        snap = Snapshot(after, status, journal, error, pods)
        if before == after and again == journal:
            return snap
        time.sleep(0.05)
    assert snap is not None
    return snap


# -- judging -------------------------------------------------------------------------------


def _capacity(status: Mapping[str, Any]) -> dict[int, dict]:
    """Per rank: cores and gpus ids (from R_lite of "all") and memory_mib (from "nodes")."""
    out: dict[int, dict] = {}
    for entry in ((status.get("all") or {}).get("execution") or {}).get("R_lite") or []:
        children = entry.get("children") or {}
        for rank in parse_idset(entry.get("rank")):
            out[rank] = {"cores": parse_idset(children.get("core")),
                         "gpus": parse_idset(children.get("gpu")), "memory_mib": None}
    for node in status.get("nodes") or []:
        cap = out.setdefault(int(node["rank"]), {"cores": None, "gpus": None, "memory_mib": None})
        cap["memory_mib"] = int(node.get("memory_mib") or 0)
    return out


def check(
    snap: Snapshot,
    expected: Mapping[int, Iterable[Mapping[str, Any]]] | None = None,
    *,
    exhaustive: bool = False,
) -> list[Violation]:
    """Every violation of the invariant in `snap`; empty when all is well.

    `expected` maps each allocation id the caller was acknowledged (and did not cancel) to
    its nodes as the caller knows them (the alloc answer's `nodes` minus ranks it cancelled
    since). With `exhaustive`, sched.list may hold no other allocation.
    """
    out: list[Violation] = []
    live: dict[int, tuple[NodeShare, ...]] = {}
    for alloc in snap.allocations:
        if alloc.get("status") != "ALLOCATED":
            continue
        try:
            live[int(alloc["id"])] = shares(alloc.get("nodes") or [])
        except (IdsetParseError, KeyError, TypeError, ValueError) as exc:
            out.append(Violation("malformed", f"sched.list allocation {alloc.get('id')}: {exc}"))
    out += _check_exclusive(live)
    out += _check_capacity(live, snap.status)
    if expected is not None:
        out += _check_expected(live, snap.allocations, expected, exhaustive)
    if snap.journal_error is not None:
        out.append(Violation("journal-unreadable", snap.journal_error))
    elif snap.journal is not None:
        out += _check_journal(live, snap.journal)
    if snap.pods is not None:
        out += _check_pods(snap.pods, snap.allocations)
    return out


def _check_exclusive(live: Mapping[int, tuple[NodeShare, ...]]) -> list[Violation]:
    out: list[Violation] = []
    owner: dict[tuple[str, int, int], int] = {}
    clashes: dict[tuple[str, int, int, int], set[int]] = {}
    for alloc_id in sorted(live):
        for share in live[alloc_id]:
            for kind, ids in (("core", share.cores), ("gpu", share.gpus)):
                for i in ids:
                    first = owner.setdefault((kind, share.rank, i), alloc_id)
                    if first != alloc_id:
                        clashes.setdefault((kind, share.rank, first, alloc_id), set()).add(i)
    for (kind, rank, a, b), ids in sorted(clashes.items()):
        out.append(Violation(
            f"{kind}-twice",
            f"rank {rank} {kind}s [{format_ids(ids)}] are held by allocation {a} and by "
            f"allocation {b}",
        ))
    return out


def _check_capacity(
    live: Mapping[int, tuple[NodeShare, ...]], status: Mapping[str, Any]
) -> list[Violation]:
    out: list[Violation] = []
    caps = _capacity(status)
    memory: dict[int, list[tuple[int, int]]] = {}
    for alloc_id in sorted(live):
        for share in live[alloc_id]:
            cap = caps.get(share.rank)
            if cap is None:
                continue  # a rank not (yet) in R: nothing to measure it against
            for kind, ids in (("core", share.cores), ("gpu", share.gpus)):
                have = cap[kind + "s"]
                if have is not None and not ids <= have:
                    out.append(Violation(
                        "outside-R",
                        f"allocation {alloc_id} holds rank {share.rank} {kind}s "
                        f"[{format_ids(ids - have)}], which R does not have (it has "
                        f"[{format_ids(have)}])",
                    ))
            if share.memory_mib:
                memory.setdefault(share.rank, []).append((alloc_id, share.memory_mib))
    for rank, held in sorted(memory.items()):
        cap = caps[rank]["memory_mib"]
        total = sum(m for _, m in held)
        if cap is not None and total > cap:
            parts = ", ".join(f"{m} MiB by {a}" for a, m in held)
            out.append(Violation(
                "memory-over", f"rank {rank}: {total} MiB allocated ({parts}) > {cap} MiB"
            ))
    return out


def _check_expected(
    live: Mapping[int, tuple[NodeShare, ...]],
    allocations: list[dict],
    expected: Mapping[int, Iterable[Mapping[str, Any]]],
    exhaustive: bool,
) -> list[Violation]:
    out: list[Violation] = []
    status = {int(a["id"]): a.get("status") for a in allocations if "id" in a}
    for alloc_id in sorted(expected):
        want = shares(expected[alloc_id])
        if alloc_id not in live:
            where = "is missing from sched.list" if alloc_id not in status else (
                f"is {status[alloc_id]} in sched.list")
            out.append(Violation(
                "lost", f"acknowledged allocation {alloc_id} ({describe(want)}) {where}"
            ))
        elif live[alloc_id] != want:
            out.append(Violation(
                "changed",
                f"allocation {alloc_id} was acknowledged as {describe(want)} but sched.list "
                f"has {describe(live[alloc_id])}",
            ))
    if exhaustive:
        for alloc_id in sorted(set(live) - set(expected)):
            out.append(Violation(
                "unexpected",
                f"allocation {alloc_id} ({describe(live[alloc_id])}) is live but no client "
                "holds it (never acknowledged, or cancelled)",
            ))
    return out


def _check_journal(
    live: Mapping[int, tuple[NodeShare, ...]], journal: list[dict]
) -> list[Violation]:
    out: list[Violation] = []
    journaled: dict[int, tuple[NodeShare, ...]] = {}
    for row in journal:
        try:
            journaled[int(row["id"])] = shares(row["nodes"])
        except (IdsetParseError, KeyError, TypeError, ValueError) as exc:
            out.append(Violation("malformed", f"journal row {row.get('id')}: {exc}"))
    for alloc_id in sorted(set(live) - set(journaled)):
        out.append(Violation(
            "journal-missing",
            f"allocation {alloc_id} ({describe(live[alloc_id])}) is live but not journaled: "
            "a leader restart would lose it",
        ))
    for alloc_id in sorted(set(journaled) - set(live)):
        out.append(Violation(
            "journal-extra",
            f"the journal holds allocation {alloc_id} ({describe(journaled[alloc_id])}) "
            "which sched.list does not list as ALLOCATED",
        ))
    for alloc_id in sorted(set(journaled) & set(live)):
        if journaled[alloc_id] != live[alloc_id]:
            out.append(Violation(
                "journal-differs",
                f"allocation {alloc_id}: journal has {describe(journaled[alloc_id])}, "
                f"sched.list has {describe(live[alloc_id])}",
            ))
    return out


def _pod_running(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in (
        "Succeeded", "Failed") and not meta.get("deletionTimestamp")


def _check_pods(pods: list[dict], allocations: list[dict]) -> list[Violation]:
    out: list[Violation] = []
    by_id = {int(a["id"]): a for a in allocations if a.get("status") == "ALLOCATED"}
    owner: dict[tuple[str, int], str] = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""),
                                           p["metadata"]["name"])):
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        if not _pod_running(pod) or ANN + "allocation" not in ann:
            continue  # not running, or placed by another scheduler
        name = f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
        node = pod["spec"]["nodeName"]
        try:
            cores = parse_idset(ann.get(ANN + "cores"))
            gpus = parse_idset(ann.get(ANN + "gpus"))
            rank = int(ann[ANN + "rank"])
            alloc_id = int(ann[ANN + "allocation"])
        except (IdsetParseError, KeyError, ValueError) as exc:
            out.append(Violation("malformed", f"pod {name}: fluxnode.io annotations: {exc}"))
            continue
        for kind, ids in (("core", cores), ("gpu", gpus)):
            for i in sorted(ids):
                first = owner.setdefault((f"{node}/{kind}", i), name)
                if first != name:
                    out.append(Violation(
                        "pod-core-twice" if kind == "core" else "pod-gpu-twice",
                        f"{kind} {i} of node {node} is given to pod {first} and pod {name}",
                    ))
        group = ann.get(ANN + "group")
        alloc = by_id.get(alloc_id)
        if alloc is not None:
            alloc_group = (alloc.get("labels") or {}).get("group")
            if group and alloc_group and group != alloc_group:
                out.append(Violation(
                    "pod-outside",
                    f"pod {name} of group {group} runs under allocation {alloc_id} of group "
                    f"{alloc_group}",
                ))
                continue
            candidates = [alloc]
        else:
            # the leader may have re-adopted the pod under a new id (sched.adopt after a
            # journal loss): any live allocation of its group holding its cores will do
            candidates = [a for a in by_id.values()
                          if not group or (a.get("labels") or {}).get("group") in (None, group)]
        if any(_holds(a, rank, cores, gpus) for a in candidates):
            continue
        held = ", ".join(sorted(f"{a['id']}: " + describe(shares(a.get("nodes") or []))
                                for a in candidates[:3]))
        out.append(Violation(
            "pod-outside",
            f"pod {name} holds rank {rank} cores [{format_ids(cores)}]"
            + (f" gpus [{format_ids(gpus)}]" if gpus else "")
            + (f" under allocation {alloc_id}, which holds {held}" if alloc is not None else
               f" under allocation {alloc_id}, which is not live, and no live allocation of its "
               f"group holds them"),
        ))
    return out


def _holds(alloc: Mapping[str, Any], rank: int, cores: frozenset[int],
           gpus: frozenset[int]) -> bool:
    share = {s.rank: s for s in shares(alloc.get("nodes") or [])}.get(rank)
    return share is not None and cores <= share.cores and gpus <= share.gpus
