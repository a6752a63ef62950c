"""Oracles that come from outside the code under test.

A test that checks the product with the product's own helpers cannot catch a bug the two
share (a rounding error in `scheduler.pod_requests` would pass a check that counts with
it). These re-derive the facts from the objects themselves, with the official Kubernetes
client's quantity parser and an idset parser of their own.
"""

from __future__ import annotations

import math
from decimal import Decimal

from kubernetes.utils import parse_quantity

from fluxnode.testing import invariants

GPU = "nvidia.com/gpu"


def parse_idset(text: str) -> set[int]:
    """An RFC 22 idset ("0-3,7") as a set, parsed by the fault checker's own parser
    (fluxnode.testing.invariants) rather than by the product's idset module; malformed or
    overlapping ranges fail the test."""
    try:
        return set(invariants.parse_idset(text))
    except invariants.IdsetParseError as exc:
        raise AssertionError(str(exc)) from None


def spec_requests(pod: dict) -> tuple[int, int, int]:
    """(millicores, memory bytes, GPUs) a pod asks for by Kubernetes' rule (requests default to
    limits; init containers run one at a time, sidecars alongside; overhead added), parsed
    with the official client's quantity parser, independently of scheduler.pod_requests."""
    spec = pod.get("spec") or {}

    def amounts(resources: dict | None) -> tuple[Decimal, Decimal, Decimal]:
        r = resources or {}
        return tuple(parse_quantity(r[k]) if k in r else Decimal(0) for k in ("cpu", "memory", GPU))

    def container(c: dict) -> tuple[Decimal, Decimal, Decimal]:
        res = c.get("resources") or {}
        return amounts({**(res.get("limits") or {}), **(res.get("requests") or {})})

    def add(a, b):
        return tuple(x + y for x, y in zip(a, b, strict=True))

    zero = (Decimal(0),) * 3
    app = zero
    for c in spec.get("containers") or []:
        app = add(app, container(c))
    sidecars, init_peak = zero, zero
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars = add(sidecars, container(c))
            init_peak = tuple(map(max, init_peak, sidecars))
        else:
            init_peak = tuple(map(max, init_peak, add(container(c), sidecars)))
    total = add(tuple(map(max, add(app, sidecars), init_peak)), amounts(spec.get("overhead")))
    cpu, mem, gpus = total
    return math.ceil(cpu * 1000), math.ceil(mem), math.ceil(gpus)
