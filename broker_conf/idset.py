"""RFC 22 idsets: sets of non-negative integers written as ``0-3,7`` (optionally ``[0-3,7]``).

Used for broker ranks, core ids and GPU ids. Decoding accepts ids in any order and
repeated ids (as flux's idset_decode does) but rejects leading zeros, signs and blanks.

Decoding never expands before it has bounded the result: the ranges are parsed and merged
first (`decode_ranges`, cost linear in the text), and only then turned into ids, so
``0-16777215`` is refused in microseconds. `decode` refuses more than ``limit`` ids
(default `MAX_IDS`); callers that name ranks pass the instance's size.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["IdsetError", "decode", "decode_ranges", "encode", "parse_id", "MAX_IDS"]

#: Default bound on the ids one string may expand to (`decode`'s ``limit``); guards
#: against ``0-4294967295``. A million ids is 36 MiB of Python ints.
MAX_IDS = 1 << 20


class IdsetError(ValueError):
    """An idset string or id collection that does not follow RFC 22."""


def parse_id(token: str, whole: str, *, what: str = "idset", error: type[ValueError] = IdsetError,
             leading_zeros: bool = False) -> int:
    """One decimal id of `whole` (an idset, or a hostlist's bracketed ids, which may be
    zero-padded).

    Errors are `error` and read ``invalid <what> '<whole>': <problem>``.
    """
    if not token or not token.isascii() or not token.isdigit():
        raise error(f"invalid {what} {_show(whole)}: {_show(token)} is not a non-negative integer")
    if not leading_zeros and len(token) > 1 and token.startswith("0"):
        raise error(f"invalid {what} {_show(whole)}: {_show(token)} has a leading zero")
    if len(token.lstrip("0")) > 20:  # int() of a huge digit string is slow; no id is that large
        raise error(f"invalid {what} {_show(whole)}: {_show(token)} is too large")
    return int(token)


def _show(text: str, width: int = 64) -> str:
    """`text` quoted for an error message, cut to `width` characters."""
    if len(text) <= width:
        return repr(text)
    return repr(text[:width]) + f"... ({len(text)} characters)"


def decode_ranges(s: str) -> list[tuple[int, int]]:
    """The ids of an idset string as sorted, disjoint, non-adjacent ``(lo, hi)`` ranges
    (inclusive), without expanding them: cost is linear in the text, whatever it names."""
    if not isinstance(s, str):
        raise IdsetError(f"idset must be a string, not {type(s).__name__}")
    body = s
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if body == "":
        return []
    ranges: list[tuple[int, int]] = []
    for item in body.split(","):
        lo_s, sep, hi_s = item.partition("-")
        lo = parse_id(lo_s, s)
        hi = parse_id(hi_s, s) if sep else lo
        if hi < lo:
            raise IdsetError(f"invalid idset {_show(s)}: range {_show(item)} is descending")
        ranges.append((lo, hi))
    ranges.sort()
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:
        last_lo, last_hi = merged[-1]
        if lo <= last_hi + 1:
            if hi > last_hi:
                merged[-1] = (last_lo, hi)
        else:
            merged.append((lo, hi))
    return merged


def count(ranges: Iterable[tuple[int, int]]) -> int:
    """How many ids `decode_ranges`' ranges hold."""
    return sum(hi - lo + 1 for lo, hi in ranges)


def decode(s: str, *, limit: int | None = None) -> list[int]:
    """Return the ids of an idset string, sorted and unique.

    More than ``limit`` ids (default `MAX_IDS`) is an `IdsetError` reading
    ``... holds N ids, which exceeds L``, raised before anything is expanded.
    """
    ranges = decode_ranges(s)
    bound = MAX_IDS if limit is None else limit
    n = count(ranges)
    if n > bound:
        raise IdsetError(f"invalid idset {_show(s)}: holds {n} ids, which exceeds {bound}")
    out: list[int] = []
    for lo, hi in ranges:
        out.extend(range(lo, hi + 1))
    return out


def encode(ids: Iterable[int], *, brackets: bool = False, ranges: bool = True) -> str:
    """Encode ids as an RFC 22 string: ascending, unique, consecutive ids folded into ranges.

    ``brackets`` wraps a non-singleton set in ``[]`` (like IDSET_FLAG_BRACKETS).
    """
    values: set[int] = set()
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise IdsetError(f"invalid id {i!r}: ids must be non-negative integers")
        values.add(i)
    ordered = sorted(values)
    parts: list[str] = []
    idx = 0
    while idx < len(ordered):
        lo = hi = ordered[idx]
        if ranges:
            while idx + 1 < len(ordered) and ordered[idx + 1] == hi + 1:
                idx += 1
                hi = ordered[idx]
        parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
        idx += 1
    text = ",".join(parts)
    if brackets and len(ordered) > 1:
        text = f"[{text}]"
    return text
