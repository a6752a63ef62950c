"""RFC 29 hostlists: a compact, *ordered* list of hostnames such as ``node[1-4,7],login0``.

Order is significant (a broker's rank is its position in the bootstrap hosts list),
so encoding never sorts: only runs of adjacent hosts that share a prefix are folded
into one bracketed idlist, and consecutive ascending ids become ``lo-hi`` ranges.
Zero padding is taken from the first id of an idlist (``node[01-10]``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from fluxnode.broker_conf import idset
from fluxnode.broker_conf.idset import _show

__all__ = ["HostlistError", "Matcher", "count", "decode", "encode", "MAX_HOSTS"]

#: Refuse to expand more hosts than this from one string (guards against ``n[0-999999999]``).
MAX_HOSTS = 1_000_000

_SPECIAL = set("[],")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A hostlist string or hostname that does not follow RFC 29."""


def _bad_char(text: str) -> str | None:
    for ch in text:
        if ch in _SPECIAL or not ch.isascii() or not ch.isprintable() or ch.isspace():
            return ch
    return None


def _check_affix(text: str, whole: str, what: str) -> None:
    ch = _bad_char(text)
    if ch is not None:
        raise HostlistError(
            f"invalid hostlist {_show(whole)}: bad character {ch!r} in {what} {_show(text)}"
        )


def _split_top_level(s: str) -> list[str]:
    """Split on commas that are not inside brackets, checking bracket balance."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(s):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"invalid hostlist {_show(s)}: nested '[' at position {i}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"invalid hostlist {_show(s)}: unmatched ']' at position {i}")
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"invalid hostlist {_show(s)}: unmatched '['")
    parts.append(s[start:])
    return parts


def _parse_idlist(idlist: str, whole: str) -> tuple[int, list[tuple[int, int]]]:
    """The zero-padding width and the ``(lo, hi)`` ranges of a bracketed idlist, in order."""
    if idlist == "":
        raise HostlistError(f"invalid hostlist {_show(whole)}: empty brackets")
    items = idlist.split(",")
    first = items[0].split("-", 1)[0]
    width = len(first) if first.startswith("0") else 0
    ranges: list[tuple[int, int]] = []
    for item in items:
        lo_s, sep, hi_s = item.partition("-")
        lo = idset.parse_id(lo_s, whole, what="hostlist", error=HostlistError, leading_zeros=True)
        hi = (
            idset.parse_id(hi_s, whole, what="hostlist", error=HostlistError, leading_zeros=True)
            if sep
            else lo
        )
        if hi < lo:
            raise HostlistError(
                f"invalid hostlist {_show(whole)}: range {_show(item)} is descending"
            )
        ranges.append((lo, hi))
    return width, ranges


_Term = tuple[str, int, "list[tuple[int, int]] | None", str]


def _parse(s: str) -> list[_Term]:
    """The hostlist as ``(prefix, width, ranges, suffix)`` terms (``ranges`` None for a
    plain hostname), checked but not expanded: cost linear in the text."""
    if not isinstance(s, str):
        raise HostlistError(f"hostlist must be a string, not {type(s).__name__}")
    if s == "":
        return []
    terms: list[_Term] = []
    for expr in _split_top_level(s):
        if expr == "":
            raise HostlistError(f"invalid hostlist {_show(s)}: empty hostname (stray ',')")
        if "[" not in expr:
            _check_affix(expr, s, "hostname")
            terms.append((expr, 0, None, ""))
        else:
            prefix, _, rest = expr.partition("[")
            idlist, _, suffix = rest.partition("]")
            if "[" in suffix or "]" in suffix:
                raise HostlistError(
                    f"invalid hostlist {_show(s)}: more than one [idlist] in {_show(expr)}"
                )
            _check_affix(prefix, s, "prefix")
            _check_affix(suffix, s, "suffix")
            width, ranges = _parse_idlist(idlist, s)
            terms.append((prefix, width, ranges, suffix))
    return terms


def _count(terms: list[_Term]) -> int:
    return sum(1 if r is None else sum(hi - lo + 1 for lo, hi in r) for _, _, r, _ in terms)


def count(s: str) -> int:
    """How many hostnames `s` expands to (duplicates counted), without expanding it."""
    return _count(_parse(s))


def decode(s: str, *, limit: int | None = None) -> list[str]:
    """Expand a hostlist string into the ordered list of hostnames (duplicates kept).

    More than ``limit`` hostnames (default `MAX_HOSTS`) is a `HostlistError` reading
    ``... names N hosts, which exceeds L``, raised before anything is expanded.
    """
    terms = _parse(s)
    bound = MAX_HOSTS if limit is None else limit
    n = _count(terms)
    if n > bound:
        raise HostlistError(f"invalid hostlist {_show(s)}: names {n} hosts, which exceeds {bound}")
    hosts: list[str] = []
    for prefix, width, ranges, suffix in terms:
        if ranges is None:
            hosts.append(prefix)
            continue
        for lo, hi in ranges:
            hosts.extend(f"{prefix}{str(i).zfill(width)}{suffix}" for i in range(lo, hi + 1))
    return hosts


class Matcher:
    """Membership in a hostlist without expanding it: ``name in Matcher(s)`` is
    ``name in decode(s)``, built in time linear in `s` and answered in time
    quadratic in the name's length and logarithmic in `s`, whatever `s` names."""

    def __init__(self, s: str) -> None:
        self.names: set[str] = set()
        # (prefix, suffix) -> [(width, starts, ranges)], ranges merged and sorted
        self.terms: dict[tuple[str, str], list[tuple[int, list[int], list[tuple[int, int]]]]]
        self.terms = {}
        grouped: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        for prefix, width, ranges, suffix in _parse(s):
            if ranges is None:
                self.names.add(prefix)
            else:
                grouped.setdefault((prefix, suffix, width), []).extend(ranges)
        for (prefix, suffix, width), ranges in grouped.items():
            merged = _merge(ranges)
            self.terms.setdefault((prefix, suffix), []).append(
                (width, [lo for lo, _ in merged], merged))

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self.names:
            return True
        if not self.terms:
            return False
        for i in range(len(name)):
            j = i
            while j < len(name) and "0" <= name[j] <= "9":
                j += 1
                groups = self.terms.get((name[:i], name[j:]))
                if groups is None:
                    continue
                digits = name[i:j]
                if len(digits.lstrip("0")) > 20:
                    break
                n = int(digits)
                for width, starts, ranges in groups:
                    if str(n).zfill(width) != digits:
                        continue
                    k = bisect.bisect_right(starts, n) - 1
                    if k >= 0 and n <= ranges[k][1]:
                        return True
        return False


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


class _Run:
    """Adjacent hosts sharing a prefix, folded into ``prefix[ranges]``."""

    def __init__(self, prefix: str, digits: str) -> None:
        self.prefix = prefix
        self.width = len(digits) if digits.startswith("0") else 0
        n = int(digits)
        self.ranges: list[list[int]] = [[n, n]]
        self.count = 1
        self.first_digits = digits

    def accepts(self, prefix: str, digits: str) -> bool:
        return prefix == self.prefix and str(int(digits)).zfill(self.width) == digits

    def add(self, digits: str) -> None:
        n = int(digits)
        last = self.ranges[-1]
        if n == last[1] + 1:
            last[1] = n
        else:
            self.ranges.append([n, n])
        self.count += 1

    def render(self) -> str:
        if self.count == 1:
            return self.prefix + self.first_digits
        fmt = [
            str(lo).zfill(self.width)
            if lo == hi
            else f"{str(lo).zfill(self.width)}-{str(hi).zfill(self.width)}"
            for lo, hi in self.ranges
        ]
        return f"{self.prefix}[{','.join(fmt)}]"


def encode(hosts: Iterable[str]) -> str:
    """Compress an ordered list of hostnames into the shortest RFC 29 form that keeps order."""
    parts: list[str] = []
    run: _Run | None = None
    for host in hosts:
        if not isinstance(host, str) or host == "":
            raise HostlistError(f"invalid hostname {host!r}: must be a non-empty string")
        ch = _bad_char(host)
        if ch is not None:
            raise HostlistError(f"invalid hostname {host!r}: bad character {ch!r}")
        m = _TRAILING_NUMBER.match(host)
        if m is None:
            if run is not None:
                parts.append(run.render())
                run = None
            parts.append(host)
            continue
        prefix, digits = m.group(1), m.group(2)
        if run is not None and run.accepts(prefix, digits):
            run.add(digits)
            continue
        if run is not None:
            parts.append(run.render())
        run = _Run(prefix, digits)
    if run is not None:
        parts.append(run.render())
    return ",".join(parts)
