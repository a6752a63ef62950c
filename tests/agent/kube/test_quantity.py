"""The one Kubernetes quantity parser (agent/kube_quantity.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from fluxnode.agent.kube.quantity import QuantityError, parse


@pytest.mark.parametrize("text,expected", [
    ("100m", Decimal("0.1")),
    ("1", Decimal(1)),
    ("1.5", Decimal("1.5")),
    ("2Gi", Decimal(2 * 2**30)),
    ("500Mi", Decimal(500 * 2**20)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1k", Decimal(1000)),
    ("1M", Decimal(10**6)),
    ("1E", Decimal(10**18)),
    ("1Ki", Decimal(1024)),
    ("3500m", Decimal("3.5")),
    ("0.5Gi", Decimal(2**29)),
    (".5", Decimal("0.5")),
    ("+2", Decimal(2)),
    (4, Decimal(4)),
    (2.5, Decimal("2.5")),
])
def test_valid_quantities_are_exact(text, expected):
    assert parse(text, "f") == expected


def test_millis_stay_exact():
    assert parse("100m", "f") * 3 == Decimal("0.3")


@pytest.mark.parametrize("value", ["", "lots", "1Gb", "1ki", "1.2.3", "Gi", " 1", "1 ", "1e", "1m3",
                                   None, True, [], {"cpu": 1}, float("nan"), float("inf")])
def test_bad_values_are_errors_naming_the_field(value):
    with pytest.raises(QuantityError, match=r"^node n1 status.capacity.cpu: invalid quantity "):
        parse(value, "node n1 status.capacity.cpu")


def test_quantity_error_is_a_value_error():
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize("number", ["0", "1", "1.5", ".5", "+2", "-3", "7e2", "1E3", "123456789",
                                    "x", ""])
@pytest.mark.parametrize("suffix", ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E",
                                    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "ki", "mi"])
def test_the_same_value_as_the_official_client(number, suffix):
    """The agent's copy of parse_quantity (it no longer imports the official package) gives
    the official client's value, or its ValueError, for every suffix."""
    from fluxnode.agent.kube.quantity import parse_quantity as ours
    from kubernetes.utils.quantity import parse_quantity as official

    text = number + suffix
    try:
        expected = official(text)
    except ValueError:
        with pytest.raises(ValueError):
            ours(text)
    else:
        assert ours(text) == expected, text
