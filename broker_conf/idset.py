"""RFC 22 idsets: sets of non-negative integers written as ``0-3,7`` (optionally ``[0-3,7]``).

Used for broker ranks, core ids and GPU ids. Decoding accepts ids in any order and
repeated ids (as flux's idset_decode does) but rejects leading zeros, signs and blanks.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["IdsetError", "decode", "encode", "parse_id", "MAX_IDS"]

#: Refuse to expand more ids than this from one string (guards against ``0-4294967295``).
MAX_IDS = 1 << 24


class IdsetError(ValueError):
    """An idset string or id collection that does not follow RFC 22."""


def parse_id(token: str, whole: str, *, what: str = "idset", error: type[ValueError] = IdsetError,
             leading_zeros: bool = False) -> int:
    """One decimal id of `whole` (an idset, or a hostlist's bracketed ids, which may be
    zero-padded).

    Errors are `error` and read ``invalid <what> '<whole>': <problem>``.
    """
    if not token or not token.isascii() or not token.isdigit():
        raise error(f"invalid {what} {whole!r}: {token!r} is not a non-negative integer")
    if not leading_zeros and len(token) > 1 and token.startswith("0"):
        raise error(f"invalid {what} {whole!r}: {token!r} has a leading zero")
    return int(token)


def decode(s: str) -> list[int]:
    """Return the ids of an idset string, sorted and unique."""
    if not isinstance(s, str):
        raise IdsetError(f"idset must be a string, not {type(s).__name__}")
    body = s
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if body == "":
        return []
    ids: set[int] = set()
    for item in body.split(","):
        lo_s, sep, hi_s = item.partition("-")
        lo = parse_id(lo_s, s)
        hi = parse_id(hi_s, s) if sep else lo
        if hi < lo:
            raise IdsetError(f"invalid idset {s!r}: range {item!r} is descending")
        if len(ids) + (hi - lo + 1) > MAX_IDS:
            raise IdsetError(f"invalid idset {s!r}: more than {MAX_IDS} ids")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


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
