"""What a pod asks for, computed the way Kubernetes computes it.

The scheduler must charge a pod exactly what kube-scheduler would, or the two
would disagree about a node's free space. Kubernetes' effective request per
resource is ``max(sum(app containers) + sum(sidecars), max(init container +
sidecars started before it)) + overhead``; a container that sets only a limit
has its request defaulted to the limit. Pods are plain dicts (the JSON the API
server sends) so the hot path never pays for client model objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from fluxnode.agent.kube.quantity import QuantityError, parse
from fluxnode.scheduler.jobspec.builder import SlotKind

GPU_RESOURCE = "nvidia.com/gpu"
MIB = 1024 * 1024


class PodRequestError(QuantityError):
    """A pod's resource quantity cannot be parsed; the message names pod, container and key."""


@dataclass(frozen=True, slots=True)
class PodRequests:
    """Effective requests of one pod in the units the graph scheduler counts."""

    millicpu: int = 0
    memory_bytes: int = 0
    gpus: int = 0

    @property
    def cores(self) -> int:
        """Whole cores: the graph allocates cores, so fractions round up."""
        return math.ceil(self.millicpu / 1000)

    @property
    def memory_mib(self) -> int:
        return math.ceil(self.memory_bytes / MIB)

    def slot(self) -> SlotKind:
        """The slot a pod of these requests takes: at least one whole core, its GPUs and
        its memory in MiB (both rounded up)."""
        return SlotKind(max(1, self.cores), self.gpus, self.memory_mib)

    def __add__(self, other: PodRequests) -> PodRequests:
        return PodRequests(
            self.millicpu + other.millicpu,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )

    def __sub__(self, other: PodRequests) -> PodRequests:
        return PodRequests(
            self.millicpu - other.millicpu,
            self.memory_bytes - other.memory_bytes,
            self.gpus - other.gpus,
        )

    def max(self, other: PodRequests) -> PodRequests:
        return PodRequests(
            max(self.millicpu, other.millicpu),
            max(self.memory_bytes, other.memory_bytes),
            max(self.gpus, other.gpus),
        )


ZERO = PodRequests()


def _quantity(value: object, where: str) -> Decimal:
    try:
        return parse(value, where)
    except QuantityError as exc:
        raise PodRequestError(str(exc)) from None


# ResourceLists read before, by their (cpu, memory, GPU) values: the pods of a workload
# repeat their template's few quantities, each parsed exactly (Decimal) in ~2 us; bounded
# (cleared when full), and only plain values are kept (bad input is parsed, and refused,
# every time)
_READ: dict[tuple, PodRequests] = {}
_READ_MAX = 4096
_PLAIN = (str, int, float, type(None))


def resource_list(resources: dict | None, where: str) -> PodRequests:
    """Convert a ResourceList (``{"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 1}``)."""
    resources = resources or {}
    cpu = resources.get("cpu")
    memory = resources.get("memory")
    gpu = resources.get(GPU_RESOURCE)
    key = (cpu, memory, gpu)
    plain = type(cpu) in _PLAIN and type(memory) in _PLAIN and type(gpu) in _PLAIN
    if plain:
        known = _READ.get(key)
        if known is not None:
            return known
    millicpu = math.ceil(_quantity(cpu, f"{where}.cpu") * 1000) if cpu is not None else 0
    memory_bytes = math.ceil(_quantity(memory, f"{where}.memory")) if memory is not None else 0
    gpus = math.ceil(_quantity(gpu, f"{where}.{GPU_RESOURCE}")) if gpu is not None else 0
    read = PodRequests(millicpu, memory_bytes, gpus)
    if plain:
        if len(_READ) >= _READ_MAX:
            _READ.clear()
        _READ[key] = read
    return read


def container_requests(container: dict, where: str) -> PodRequests:
    """A container's requests, each missing request defaulted to its limit (API defaulting)."""
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})
    requests.update(resources.get("requests") or {})
    return resource_list(requests, f"{where}.resources")


def pod_requests(pod: dict) -> PodRequests:
    """The effective request of `pod` (a dict as the API returns it)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    name = f"pod {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    app = ZERO
    for i, container in enumerate(spec.get("containers") or []):
        app = app + container_requests(container, f"{name} spec.containers[{i}]")
    sidecars = ZERO
    init_peak = ZERO
    for i, container in enumerate(spec.get("initContainers") or []):
        req = container_requests(container, f"{name} spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to later init containers and the app.
            sidecars = sidecars + req
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(req + sidecars)
    total = (app + sidecars).max(init_peak)
    overhead = spec.get("overhead")
    if overhead:
        total = total + resource_list(overhead, f"{name} spec.overhead")
    return total
