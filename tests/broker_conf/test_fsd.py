"""RFC 23 Flux Standard Duration parsing and formatting."""

from __future__ import annotations

import math

import pytest
from fluxnode.broker_conf import fsd


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("500ms", 0.5),
        ("0", 0.0),
        ("10", 10.0),
        ("0.25", 0.25),
        (".5s", 0.5),
        ("1e3s", 1000.0),
        (20, 20.0),
        (2.5, 2.5),
        ("inf", math.inf),
        ("infinity", math.inf),
    ],
)
def test_parse(text, seconds):
    assert fsd.parse(text) == seconds


@pytest.mark.parametrize(
    "bad", ["", "s", "10x", "-1s", "1.5.3m", "1 h", "nan", True, None, [1], -3]
)
def test_parse_errors_name_input(bad):
    with pytest.raises(fsd.FSDError) as exc:
        fsd.parse(bad)
    assert repr(bad) in str(exc.value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (30, "30s"), (90, "1.5m"), (60, "1m"), (7200, "2h"), (5400, "1.5h"), (86400, "1d"),
     (0.5, "500ms"), (100, "100s"), (59.9, "59.9s"), (math.inf, "infinity")],
)
def test_format(seconds, text):
    assert fsd.format(seconds) == text


@pytest.mark.parametrize("seconds", [0.001, 0.1, 1.2345678, 45.5, 1e-7, 123456.789, 3.14159, 2 / 3])
def test_format_round_trips_exactly(seconds):
    assert fsd.parse(fsd.format(seconds)) == seconds


@pytest.mark.parametrize("bad", [-1, math.nan, "1s", None])
def test_format_rejects_bad(bad):
    with pytest.raises(fsd.FSDError):
        fsd.format(bad)
