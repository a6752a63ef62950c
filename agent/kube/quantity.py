"""Kubernetes resource quantities ("100m", "1.5", "2Gi", "1e3"), parsed exactly.

The agent (node capacity) and the binder (pod requests) must read a quantity the
way the API server does, or they would disagree with kube-scheduler about what a
node has and a pod asks for. The arithmetic is the official client's
``parse_quantity`` (Decimal, so "100m" is exactly 0.1), written out here so the node
agent does not import the official package for it (issue 32; a test holds the two equal);
in front of it sits the API server's own grammar, which the client is laxer about (it
accepts " 1"). Errors name the field, so a bad object can be found and fixed.
"""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException

_GRAMMAR = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[kMGTPE]|[KMGTPE]i|m)?"
)
"""resource.Quantity's serialized form: a signed decimal, then an exponent or an SI/binary
suffix."""


_EXPONENTS = {"n": -3, "u": -2, "m": -1, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
"""Powers of 1000 (or of 1024 before an ``i``) of each suffix, as the official client has them."""


def parse_quantity(quantity: str | int | float) -> Decimal:
    """The official client's ``kubernetes.utils.quantity.parse_quantity``, step for step."""
    if isinstance(quantity, int | float):
        return Decimal(quantity)
    number, suffix = quantity, ""
    if len(quantity) >= 2 and quantity[-1] == "i" and quantity[-2] in _EXPONENTS:
        number, suffix = quantity[:-2], quantity[-2:]
    elif quantity and quantity[-1] in _EXPONENTS:
        number, suffix = quantity[:-1], quantity[-1]
    try:
        value = Decimal(number)
    except DecimalException:
        raise ValueError(f"Invalid number format: {number}") from None
    if not suffix:
        return value
    if suffix.endswith("i") and suffix[0] not in "KMGTPE":
        raise ValueError(f"{quantity} has unknown suffix")
    base = 1024 if suffix.endswith("i") else 1000
    return value * (base ** Decimal(_EXPONENTS[suffix[0]]))


class QuantityError(ValueError):
    """A value is not a Kubernetes quantity; the message names the field and the value."""


def parse(value: object, where: str) -> Decimal:
    """``value`` (a string, or a number as JSON carries it) as an exact Decimal.

    ``where`` names the field for the error, e.g. ``node n1 status.capacity.memory``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(
            f"{where}: invalid quantity {value!r} (expected a string like '500m' or '2Gi')"
        )
    if isinstance(value, str) and not _GRAMMAR.fullmatch(value):
        raise QuantityError(
            f"{where}: invalid quantity {value!r} (expected a number with an optional "
            "suffix m, k, M, G, T, P, E, Ki..Ei or an exponent like 1e3)"
        )
    try:
        result = parse_quantity(value)
    except (ValueError, ArithmeticError) as exc:
        raise QuantityError(f"{where}: invalid quantity {value!r}: {exc}") from None
    if not result.is_finite():
        raise QuantityError(f"{where}: invalid quantity {value!r} (not a finite number)")
    return result
