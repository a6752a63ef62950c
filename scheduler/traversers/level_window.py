"""One key for "this request level in this job window", shared by every cache of the walk.

Design: four caches keep something per request level and job window: the subtree cache
(``DfuSelect._dom_dfv``, a subtree's outcome, with the node-centric score the walk
enters with), the fast traverser's root index (``root_index.py``, the same), the first-
match walk's remembered prunes (``first_match_walk.py``, compared by identity) and the
shape templates (``shape_templates.py``, per level in any window: a template stands only
for an untouched subtree, which no window changes). Each used to build its own tuple of
the same fields in its own order. :class:`LevelWindow` is that key, once: the policy's
key (the service changes policy between matches), the level's structure
(``DfuSelect._sig``: equal for equal requests of different matches), how the walk enters
it (pristine, exclusive) and the match type, as one tuple (``LevelWindow.level``, the
templates' key), and the window. What changes under a kept outcome reaches every cache
by one path, the subtree cache's ``pop`` (``dfu_impl.SubtreeCache``). The subtree cache
is also emptied when the window or the policy changes, though its key names both: a hit
skips the visits of its subtree, which resource-query prints, and the plain walk and the
fast one count alike only when each window starts empty (``DfuSelect._select``).

A walk meets the same level at many vertices; :class:`WalkLevel` holds its key for the
walk (found by the level's identity, which hashes fast) with what each cache derived from
it, so a vertex's lookup is one small dict probe (``DfuSelect._walk_level``).
"""

from __future__ import annotations

from typing import NamedTuple


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
