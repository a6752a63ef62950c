"""Queue limits: how much of the cluster the admitted Jobs of one queue may hold at once.

Issue 30 asks for queues with optional limits (cores, GPUs, memory per queue). They are
binder configuration, kept in one ConfigMap (``fluxnode/fluxnode-queues``, key
``queues.yaml``) that the binder watches, rather than a file or a custom resource:

- a cluster administrator changes a limit with ``kubectl edit configmap`` and it applies
  at the next pass, with no restart (a file mounted from a ConfigMap is updated by the
  kubelet only after its sync period, and a flag needs a rollout);
- RBAC keeps it the administrator's (the binder may only read it; users who may submit
  Jobs need no access), and ``kubectl get cm fluxnode-queues -o yaml`` shows what applies;
- a new API type (as Kueue's ClusterQueue) would be one more CRD to install and version
  for three numbers per queue.

The value is YAML: queue name -> ``{cores, gpus, memory}``, each optional; ``memory`` is a
Kubernetes quantity (``64Gi``). A queue not named has no limit, and neither has a resource
a queue's entry leaves out. What a queue *uses* is what its admitted Jobs (unsuspended,
not finished) ask for: pods x the slot each pod takes in the graph (whole cores, GPUs)
and pods x its memory request. A Job that would take its queue past a limit stays Queued
and says so (`QueueLimits.held`); it reserves nothing, and Jobs after it are asked as
usual (a limit is a policy, not a shortage of resources a reservation could wait for).
A ConfigMap that does not parse is reported and ignored as a whole (no limits), never half
applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml
from fluxnode.agent.kube.quantity import QuantityError, parse

CONFIGMAP_KEY = "queues.yaml"
LIMITED = ("cores", "gpus", "memory")
GI = 1024**3


class QueueLimitsError(ValueError):
    """The queue limits ConfigMap does not parse; the message names the queue and field."""


@dataclass(frozen=True)
class Ask:
    """What a Job (or a queue's admitted Jobs together) holds: cores, GPUs, memory bytes."""

    cores: int = 0
    gpus: int = 0
    memory: int = 0

    def __add__(self, other: Ask) -> Ask:
        return Ask(self.cores + other.cores, self.gpus + other.gpus, self.memory + other.memory)


@dataclass(frozen=True)
class QueueLimit:
    """One queue's limits; None: that resource is not limited."""

    cores: int | None = None
    gpus: int | None = None
    memory: int | None = None  # bytes


def _memory(value: int) -> str:
    """Bytes in the unit a person wrote them in most likely (Gi, Mi, else bytes)."""
    for unit, size in (("Gi", GI), ("Mi", 1024**2)):
        if value % size == 0 and value:
            return f"{value // size}{unit}"
    return str(value)


@dataclass(frozen=True)
class QueueLimits:
    """Queue name -> its limit (queues not named are unlimited)."""

    limits: dict[str, QueueLimit] = field(default_factory=dict)

    @classmethod
    def from_configmap(cls, configmap: dict | None) -> QueueLimits:
        """The limits a ConfigMap says (none when there is no ConfigMap or no key)."""
        text = ((configmap or {}).get("data") or {}).get(CONFIGMAP_KEY)
        if not text:
            return cls()
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise QueueLimitsError(f"{CONFIGMAP_KEY}: not YAML: {exc}") from None
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise QueueLimitsError(f"{CONFIGMAP_KEY}: must map queue names to limits")
        return cls({str(name): _limit(str(name), entry) for name, entry in doc.items()})

    def held(self, queue: str, used: Ask, ask: Ask) -> str | None:
        """Why a Job of `queue` asking `ask` may not be admitted while the queue's admitted
        Jobs hold `used`, in words for its FluxJob's REASON; None when it may."""
        limit = self.limits.get(queue)
        if limit is None:
            return None
        for name, cap, have, want, show in (
                ("cores", limit.cores, used.cores, ask.cores, str),
                ("GPUs", limit.gpus, used.gpus, ask.gpus, str),
                ("memory", limit.memory, used.memory, ask.memory, _memory)):
            if cap is not None and have + want > cap:
                return (f"queue '{queue}' limit: {show(have)} of {show(cap)} {name} in use, "
                        f"this Job asks {show(want)}")
        return None


def _limit(queue: str, entry: object) -> QueueLimit:
    where = f"{CONFIGMAP_KEY}: queue {queue!r}"
    if entry is None:
        return QueueLimit()
    if not isinstance(entry, dict):
        raise QueueLimitsError(f"{where}: must be a mapping of {', '.join(LIMITED)}")
    unknown = sorted(set(map(str, entry)) - set(LIMITED))
    if unknown:
        raise QueueLimitsError(f"{where}: unknown limit {unknown[0]!r} (one of "
                               f"{', '.join(LIMITED)})")
    values: dict[str, int | None] = {}
    for key in ("cores", "gpus"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
            raise QueueLimitsError(f"{where}.{key}: must be a whole number >= 0")
        values[key] = value
    memory = entry.get("memory")
    if memory is not None:
        try:
            amount = parse(memory, f"{where}.memory")
        except QuantityError as exc:
            raise QueueLimitsError(str(exc)) from None
        if amount < 0 or amount != int(amount):
            raise QueueLimitsError(f"{where}.memory: must be whole bytes >= 0")
        values["memory"] = int(amount)
    return QueueLimit(values["cores"], values["gpus"], values.get("memory"))
