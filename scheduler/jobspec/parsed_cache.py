"""Parsed jobspecs kept by their text, for a command stream that reads the same file often.

Why: a resource-query stream names the same few jobspec files again and again (Fluxion's
own t/ scripts and every benchmark stream do), and reading a small jobspec's YAML is a
third of a single-core ``first`` match (libyaml's events become Python objects one by
one). Fluxion parses the text on every match; a parse is a pure function of the text
(and of the resource types known, which only ever refuse), so handing back the same
`Jobspec` for the same bytes gives every later step exactly what a fresh parse would.

What is kept: only jobspecs that parsed (an error is parsed again each time, so its
message is made as before), only with the default `Limits`, only texts up to
``max_text`` bytes, at most ``max_entries`` of them (the oldest dropped first). A hit
is checked against the types known now: a parse refuses a type outside them, so an
entry naming one (a set of known types that shrank) is parsed again. The `Jobspec` is
frozen and its request tree is not changed by a match; callers must not change its
``attributes`` mapping either, since later matches of the same text share it.

The caller still reads the file and looks the text up inside its timed step (a
resource-query ELAPSE covers the lookup and hashing the text, as it covered the parse).
"""

from __future__ import annotations

from collections.abc import Collection

from fluxnode.scheduler.jobspec.jobspec import Jobspec

__all__ = ["ParsedJobspecs"]


class ParsedJobspecs:
    """`Jobspec.parse` with the jobspecs that parsed kept by their text."""

    __slots__ = ("_kept", "max_entries", "max_text")

    def __init__(self, max_entries: int = 64, max_text: int = 1 << 16) -> None:
        self.max_entries = max_entries
        self.max_text = max_text
        # text -> (the parsed jobspec, the resource types it names)
        self._kept: dict[bytes, tuple[Jobspec, frozenset[str]]] = {}

    def parse(self, text: bytes, known_types: Collection[str] | None = None) -> Jobspec:
        """What ``Jobspec.parse(text, known_types=known_types)`` returns or raises."""
        got = self._kept.get(text)
        if got is not None and (known_types is None or got[1].issubset(known_types)):
            return got[0]
        js = Jobspec.parse(text, known_types=known_types)
        if len(text) <= self.max_text:
            if len(self._kept) >= self.max_entries:
                del self._kept[next(iter(self._kept))]
            self._kept[text] = (js, frozenset(js.types()))
        return js

    def __len__(self) -> int:
        return len(self._kept)
