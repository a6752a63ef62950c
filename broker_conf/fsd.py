"""RFC 23 Flux Standard Duration: ``"30s"``, ``"1.5m"``, ``"2h"``, ``"1d"``, ``"500ms"``.

A bare number means seconds. ``inf``/``infinity`` are accepted for "never".
`format` picks the largest unit that represents the value exactly, so
``parse(format(x)) == x`` for every finite, non-negative float.
"""

from __future__ import annotations

import math
import re

__all__ = ["FSDError", "parse", "format"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(ms|s|m|h|d)?$")


class FSDError(ValueError):
    """A duration that is not a valid Flux Standard Duration."""


def parse(value: str | int | float) -> float:
    """Return the duration in seconds."""
    if isinstance(value, bool):
        raise FSDError(f"invalid duration {value!r}: expected a string like '30s' or a number")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise FSDError(f"invalid duration {value!r}: too large") from None
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() in ("inf", "infinity"):
            return math.inf
        m = _PATTERN.match(text)
        if m is None:
            raise FSDError(
                f"invalid duration {value!r}: expected a number with optional suffix ms, s, m, h "
                "or d (e.g. '30s')"
            )
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
        if math.isinf(seconds):
            raise FSDError(
                f"invalid duration {value!r}: too large (write 'inf' or 'infinity' for never)"
            )
    else:
        raise FSDError(f"invalid duration {value!r}: expected a string like '30s' or a number")
    if math.isnan(seconds) or seconds < 0:
        raise FSDError(f"invalid duration {value!r}: must be a non-negative number")
    return seconds


def _num(x: float) -> str:
    # integers beyond 2**53 print in exponent form: str(int(1e308)) is 309 digits
    return str(int(x)) if x == int(x) and abs(x) < 2**53 else repr(x)


def format(seconds: float) -> str:  # noqa: A001 - mirrors fsd_format_duration
    """Render seconds as the shortest exact FSD string (``90.0 -> "1.5m"``)."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or math.isnan(seconds)
        or seconds < 0
    ):
        raise FSDError(f"invalid duration {seconds!r}: must be a non-negative number of seconds")
    if math.isinf(seconds):
        return "infinity"
    if seconds == 0:
        return "0s"
    for unit in ("d", "h", "m", "s", "ms"):
        if seconds < _UNITS[unit] and unit != "ms":
            continue
        scaled = seconds / _UNITS[unit]
        if math.isinf(scaled):  # 1.8e308 s is finite, in ms it is not
            continue
        candidate = _num(scaled) + unit
        if len(candidate) <= 8 and parse(candidate) == seconds:
            return candidate
    return _num(float(seconds)) + "s"
