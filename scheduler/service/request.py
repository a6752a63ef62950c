"""What the service's RPCs accept: each payload checked once, into a typed request.

Why a module of its own: the handlers (module.py) should read as what the service
does, not as field checks; and every refusal is EINVAL (E2BIG past a size limit) with
a message naming the field, from one place. Nothing here touches the graph.

sched.alloc takes one of two forms (docs/developers/interfaces.md):
  {"slots": [{"cores", "gpus", "memory_mib", "count"}, ...], "ranks"?: idset}
      slot kinds, typed (the binder's pods); `ranks`: the only ranks it may use
  {"jobspec": RFC 14 object or YAML/JSON text}
      anything a jobspec says (`fluxnode alloc`)
plus "policy", "op", "labels", "use_drained", "with_R"; or a batch {"requests": [...]},
which may carry "cancel": [reservation ids] (`replaced_ids`), cancelled before the first
request is tried.
A request of slots may say its "duration" (whole seconds; none: it lasts until cancelled);
a reservation's answer then says when it starts (live_graph.py HORIZON).
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass, field
from typing import Any

from fluxnode.agent.broker.message import ServiceError
from fluxnode.broker_conf import hostlist, idset
from fluxnode.scheduler.jobspec.builder import JobspecBuildError, SlotKind
from fluxnode.scheduler.policies.policy import POLICIES
from fluxnode.scheduler.service.allocation import NodeShare

OPS = ("allocate", "allocate_orelse_reserve")
MAX_BATCH = 1024  # requests in one batched sched.alloc
MAX_KINDS = 1024  # slot kinds in one request
MAX_COUNT = 1 << 31  # of anything in a slot kind
ADOPT_KEYS = {"rank", "hostname", "cores", "gpus", "memory_mib"}
MAX_IDSET_TEXT = 4096  # characters of one adopted node's cores/gpus idset, or of targets
IDSET_TEXT = re.compile(r"[\[\]0-9,-]+")  # targets that are ranks, not hostnames
MAX_DURATION = 1 << 30  # seconds a request may last (live_graph.py HORIZON: a known end)
MAX_UNIT_ID = 1 << 16  # core/GPU ids adopted on a rank not joined yet are below this


def invalid(message: str) -> ServiceError:
    return ServiceError(errno.EINVAL, message)


@dataclass(frozen=True, slots=True)
class AllocRequest:
    """One sched.alloc request: slot kinds (`kinds`, with the `ranks` it may use as the
    wire's idset text, None for all) or a jobspec, and how to place it."""

    kinds: tuple[SlotKind, ...] | None = None
    ranks: str | None = None
    jobspec: dict | str | None = None
    policy: str = "first"
    op: str = "allocate"
    labels: dict = field(default_factory=dict)
    use_drained: bool = False
    with_R: bool = True  # noqa: N815 (R is RFC 20's name)
    duration: int | None = None  # seconds (slot kinds; a jobspec says its own); None: no end


def alloc_request(payload: dict) -> AllocRequest:
    """The typed form of one sched.alloc payload (not a batch)."""
    if ("slots" in payload) == ("jobspec" in payload):
        raise invalid("slots or jobspec: exactly one is required")
    kinds, ranks, jobspec, duration = None, None, None, None
    if "jobspec" in payload:
        jobspec = payload["jobspec"]
        if not isinstance(jobspec, dict | str):
            raise invalid("jobspec: required (an RFC 14 jobspec object)")
        for key in ("ranks", "duration"):
            if key in payload:
                raise invalid(f"{key}: goes with slots (a jobspec says it in its own terms)")
    else:
        kinds = slot_kinds(payload["slots"])
        duration = payload.get("duration")
        if duration is not None and (not isinstance(duration, int) or isinstance(duration, bool)
                                     or not 1 <= duration < MAX_DURATION):
            raise invalid(f"duration: must be whole seconds, 1 to {MAX_DURATION - 1}")
        ranks = payload.get("ranks")
        if ranks is not None and not isinstance(ranks, str):
            raise invalid("ranks: must be an idset string")
    policy = payload.get("policy") or "first"
    if policy not in POLICIES:
        raise invalid(f"policy: unknown {policy!r} (one of {', '.join(POLICIES)})")
    op = payload.get("op") or "allocate"
    if op not in OPS:
        raise invalid(f"op: unknown {op!r} (one of {', '.join(OPS)})")
    flags = {}
    for key, default in (("use_drained", False), ("with_R", True)):
        flags[key] = payload.get(key, default)
        if not isinstance(flags[key], bool):
            raise invalid(f"{key}: must be true or false")
    return AllocRequest(kinds, ranks, jobspec, policy, op, labels(payload), **flags,
                        duration=duration)


def slot_kinds(value: Any) -> tuple[SlotKind, ...]:
    if not isinstance(value, list) or not value:
        raise invalid('slots: must be a non-empty list of {"cores", "gpus", "memory_mib", '
                      '"count"} objects')
    if len(value) > MAX_KINDS:
        raise invalid(f"slots: at most {MAX_KINDS} kinds, not {len(value)}")
    kinds = []
    for i, obj in enumerate(value):
        try:
            kind = SlotKind.from_wire(obj, f"slots[{i}]")
        except JobspecBuildError as exc:
            raise invalid(str(exc)) from None
        if kind.count < 1:
            raise invalid(f"slots[{i}].count: must be >= 1")
        if not (kind.cores or kind.gpus or kind.memory_mib):
            raise invalid(f"slots[{i}]: asks for nothing (no cores, GPUs or memory)")
        too_big = [k for k in ("cores", "gpus", "memory_mib", "count")
                   if getattr(kind, k) >= MAX_COUNT]
        if too_big:
            raise invalid(f"slots[{i}].{too_big[0]}: must be below {MAX_COUNT}")
        kinds.append(kind)
    return tuple(kinds)


def labels(payload: dict) -> dict:
    """The optional `labels` object (absent or null: none)."""
    value = payload.get("labels")
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise invalid("labels: must be an object")
    return value


def batch(payload: dict) -> list[dict]:
    """The payloads of a batched sched.alloc (each checked when it is tried)."""
    requests = payload["requests"]
    if set(payload) - {"requests", "cancel"}:
        raise invalid("requests: cannot be combined with "
                      + ", ".join(sorted(set(payload) - {"requests", "cancel"})))
    if not isinstance(requests, list) or not requests:
        raise invalid("requests: must be a non-empty list of sched.alloc payloads")
    if len(requests) > MAX_BATCH:
        raise invalid(f"requests: at most {MAX_BATCH} per call, not {len(requests)}")
    for i, request in enumerate(requests):
        if not isinstance(request, dict):
            raise invalid(f"requests[{i}]: must be an object")
        if "requests" in request:
            raise invalid(f"requests[{i}]: batches do not nest")
        if "cancel" in request:
            raise invalid(f"requests[{i}].cancel: goes with the batch, not one of its requests")
    return requests


def replaced_ids(payload: dict) -> list[int]:
    """A batch's optional `cancel`: the ids of reservations it replaces (absent: none).
    Only the list's shape is checked here; what each id names is the service's."""
    value = payload.get("cancel", [])
    if not isinstance(value, list) or len(value) > MAX_BATCH or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise invalid(f"cancel: must be a list of at most {MAX_BATCH} reservation ids "
                      "(integers)")
    return value


def alloc_id(payload: dict) -> int:
    value = payload.get("id")
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid("id: must be an integer allocation id")
    return value


def cancel_ranks(payload: dict, alloc_id: int, held: list[int]) -> set[int] | None:
    """The ranks a sched.cancel frees (None: all of it); each must be held."""
    text = payload.get("ranks")
    if text is None:
        return None
    if not isinstance(text, str | int) or isinstance(text, bool):
        raise invalid("ranks: must be an idset string")
    try:
        # more ids than the allocation holds cannot all be its own: refused before
        # anything is expanded (`0-16777215` held the leader 14 s)
        ranks = set(idset.decode(str(text), limit=len(held)))
    except idset.IdsetError as exc:
        raise invalid(f"ranks: {exc} (allocation {alloc_id} holds {len(held)} ranks: "
                      f"{idset.encode(held)})") from None
    unknown = ranks - set(held)
    if unknown:
        raise invalid(f"ranks: allocation {alloc_id} holds {idset.encode(held)}, not "
                      f"{idset.encode(unknown)}")
    return ranks


def adopt_nodes(value: Any, size: int, hostnames: dict[int, str]) -> list[NodeShare]:
    """sched.adopt's `nodes`: one share per rank, in rank order."""
    if not isinstance(value, list) or not value:
        raise invalid('nodes: must be a non-empty list of {"rank", "cores", "gpus", '
                      '"memory_mib"} objects')
    if len(value) > max(1, size):
        raise invalid(f"nodes: {len(value)} entries for an instance of {size} ranks")
    out: dict[int, NodeShare] = {}
    for i, node in enumerate(value):
        where = f"nodes[{i}]"
        if not isinstance(node, dict) or set(node) - ADOPT_KEYS:
            raise invalid(f"{where}: must be an object with keys {', '.join(sorted(ADOPT_KEYS))}")
        rank, memory = node.get("rank"), node.get("memory_mib", 0)
        for key, v in (("rank", rank), ("memory_mib", memory)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise invalid(f"{where}.{key}: must be an integer >= 0")
        if rank >= size:
            raise invalid(f"{where}.rank: {rank} is outside the instance (size {size})")
        if rank in out:
            raise invalid(f"{where}.rank: rank {rank} is listed twice")
        ids = {}
        for key in ("cores", "gpus"):
            text = node.get(key) or ""
            if not isinstance(text, str) or len(text) > MAX_IDSET_TEXT:
                raise invalid(f"{where}.{key}: must be an idset string")
            try:
                ids[key] = idset.decode(text, limit=MAX_UNIT_ID)
            except idset.IdsetError as exc:
                raise invalid(f"{where}.{key}: {exc}") from None
            if ids[key] and ids[key][-1] >= MAX_UNIT_ID:
                raise invalid(f"{where}.{key}: id {ids[key][-1]} is too large (at most "
                              f"{MAX_UNIT_ID - 1})")
        if not (ids["cores"] or ids["gpus"] or memory):
            raise invalid(f"{where}: holds nothing (no cores, GPUs or memory)")
        out[rank] = NodeShare(rank, hostnames.get(rank, f"rank{rank}"), tuple(ids["cores"]),
                              tuple(ids["gpus"]), memory)
    return [out[r] for r in sorted(out)]


def targets(payload: dict, size: int, hostnames: dict[int, str]) -> list[str]:
    """`targets`: an RFC 22 idset of ranks or an RFC 29 hostlist, as hostnames of nodes
    the graph knows (a drain names machines that have reported their resources)."""
    text = payload.get("targets")
    if not isinstance(text, str | int) or isinstance(text, bool) or text == "":
        raise invalid("targets: required (an idset of ranks or a hostlist)")
    text = str(text)
    if len(text) > MAX_IDSET_TEXT:
        raise invalid(f"targets: at most {MAX_IDSET_TEXT} characters")
    size = max(1, size)
    if IDSET_TEXT.fullmatch(text):
        try:
            ranks = idset.decode(text, limit=size)
        except idset.IdsetError as exc:
            raise invalid(f"targets: {exc}") from None
        unknown = [r for r in ranks if r not in hostnames]
        if unknown:
            raise invalid(f"targets: rank(s) {idset.encode(unknown)} are not in the instance's "
                          "resources")
        return [hostnames[r] for r in ranks]
    try:
        hosts = hostlist.decode(text, limit=size)
    except (hostlist.HostlistError, ValueError) as exc:
        raise invalid(f"targets: {text!r} is neither an idset nor a hostlist: {exc}") from None
    known = set(hostnames.values())
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise invalid(f"targets: {hostlist.encode(unknown)} not in the instance's resources")
    return list(dict.fromkeys(hosts))


def undrain_options(payload: dict) -> tuple[str | None, bool]:
    """sched.undrain's `source` and whether `mode` is force."""
    source = payload.get("source")
    if source is not None and not isinstance(source, str):
        raise invalid("source: must be a string")
    mode = payload.get("mode")
    if mode not in (None, "force"):
        raise invalid(f"mode: unknown {mode!r} (only force)")
    return source, mode == "force"
