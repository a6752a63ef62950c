"""One key for "this request level in this job window", shared by the fast traverser's caches.

Design: three of the fast traverser's caches keep something per request level and job
window: the root index (``root_index.py``, per level, window and the node-centric score
the walk enters with), the first-match walk's remembered prunes (``first_match_walk.py``,
compared by identity) and the shape templates (``shape_templates.py``, per level in any
window: a template stands only for an untouched subtree, which no window changes). Each
used to build its own tuple of the same fields in its own order. :class:`LevelWindow`
is that key, once: the policy's key (the service changes policy between matches), the
level's structure (``DfuSelect._sig``: equal for equal requests of different matches),
how the walk enters it (pristine, exclusive) and the match type, as one tuple
(``LevelWindow.level``, the templates' key), and the window.

A walk meets the same level at many vertices; :class:`WalkLevel` holds its key for the
walk (found by the level's identity, which hashes fast) with what each cache derived from
it, so a vertex's lookup is one small dict probe.
"""

from __future__ import annotations

from typing import NamedTuple

from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.traversers.dfu_impl import JobMeta
from fluxnode.scheduler.traversers.dfu_select import DfuSelect

_new_tuple = tuple.__new__


class LevelWindow(NamedTuple):
    """A request level, as a walk enters it, in one job window."""

    # (policy key, level structure, pristine, exclusive, match type, satisfiability):
    # FastTraverser's policy key (the service changes policy between matches), the
    # level's structure (DfuSelect._sig), whether the walk entered it before any request
    # named a vertex and exclusively, JobMeta.alloc and JobMeta.sat. Alone, it is the
    # key of the level in every window (the shape templates').
    level: tuple
    at: int  # the window
    duration: int


class WalkLevel:
    """One request level's key within one walk, with what the caches made of it."""

    __slots__ = ("key", "prune_key", "template_ctx")

    def __init__(self, key: LevelWindow) -> None:
        self.key = key
        # the first-match walk's interned copy of ``key`` (its prunes compare by identity)
        self.prune_key: LevelWindow | None = None
        # the number of ``key.level`` (any window) among the shape templates' levels
        self.template_ctx: int | None = None


class LevelWindowKeys(DfuSelect):
    """Where the fast traverser's parts get their keys (a mixin of every part)."""

    _cache_policy: tuple | None  # the policy's key, set by FastTraverser._select
    _walk_levels: dict[tuple[int, bool, bool], WalkLevel]  # this walk's, by level id

    def _walk_level(self, m: JobMeta, resources: list[Request], pristine: bool,
                    excl: bool) -> WalkLevel:
        """This walk's key for the request level ``resources`` entered so. Within one
        walk the match (its type and window) is one: the level's identity finds it."""
        here = (id(resources), pristine, excl)
        got = self._walk_levels.get(here)
        if got is None:
            level = (self._cache_policy, self._sig(resources), pristine, excl, m.alloc, m.sat)
            # LevelWindow(level, m.at, m.duration) without its Python-level __new__
            key = _new_tuple(LevelWindow, (level, m.at, m.duration))
            got = self._walk_levels[here] = WalkLevel(key)
        return got
