"""What a template lookup reads of a leaf parent: its fields and its children's.

``dfu_fast`` replays the walk of an untouched leaf parent (a socket of cores) for every
other of the same shape, and names a shape by :func:`leaf_fields`: the parent's type,
id, size and status, then its children's types, ids, sizes and statuses, one tuple
each. On a fresh graph every vertex is met once, so a 1,000-node gang reads these for
2,000 sockets of 34 children. Two implementations of one contract, as in
``whole_leaves.py``: ``_leaf_shapes.c`` (compiled when a C compiler is there; it reads
the slots at their offsets, about ten times faster) and :func:`_leaf_fields_py`, the
reference it must equal (tests/scheduler/traversers/test_leaf_shapes.py).

:func:`leaf_number` is the lookup of a shape already numbered: ``buckets`` maps a hash
of the fields to the ``(fields, number)`` pairs numbered with that hash, and a shape met
before is found without building its tuple (in C: hashed and compared where the fields
are). Each implementation hashes its own way, so one ``buckets`` is filled and read by
one of them only (a process uses one).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from fluxnode.scheduler.compiled import compiled

_children_of = attrgetter("children")
_type_of, _id_of = attrgetter("type"), attrgetter("id")
_size_of, _status_of = attrgetter("size"), attrgetter("status")


def _leaf_fields_py(u: Any) -> tuple | None:
    """``u``'s and its children's fields, or None when a child has children."""
    kids = u.children
    if any(map(_children_of, kids)):
        return None
    # four tuples of the children's fields (not one tuple per child): fewer objects
    return (u.type, u.id, u.size, u.status, tuple(map(_type_of, kids)),
            tuple(map(_id_of, kids)), tuple(map(_size_of, kids)),
            tuple(map(_status_of, kids)))


def _leaf_number_py(u: Any, buckets: dict[int, list[tuple[tuple, int]]]) -> Any:
    """The number ``buckets`` holds for ``u``'s :func:`leaf_fields`; None when a child
    of ``u`` has children; ``(hash, fields)`` when no shape numbered so far is equal
    (the caller numbers it and appends ``(fields, number)`` to ``buckets[hash]``)."""
    whole = _leaf_fields_py(u)
    if whole is None:
        return None
    h = hash(whole)
    for fields, number in buckets.get(h, ()):
        if fields == whole:
            return number
    return h, whole


def _deep_number_py(u: Any, shapes: dict[int, int | None],
                    buckets: dict[int, list[tuple[tuple, int]]], weights: dict[int, int],
                    shape_ids: dict[tuple, int]) -> int | None:
    """``u``'s deep shape number (dfu_fast's ``_deep_shape``: its type, size and status,
    each child's leaf-parent shape number or, for a leaf, its fields, and each child's
    edge weight) when every part of it is numbered already: a child's number kept in
    ``shapes`` or found in ``buckets`` (then kept in ``shapes``), and the whole in
    ``shape_ids``. None when anything is new (a shape to number, a child with
    grandchildren): the caller's own walk then does it all. A fresh node of a gang
    costs the select walk one call instead of three."""
    parts = []
    for c in u.children:
        if c.children:
            got = shapes.get(c.uniq_id, False)
            if got is False:
                got = _leaf_number_py(c, buckets)
                if type(got) is int:
                    shapes[c.uniq_id] = got
            if type(got) is not int:
                return None
            parts.append(got)
        else:
            parts.append((c.type, c.id, c.size, c.status))
    order = tuple(weights.get(c.uniq_id, 0) for c in u.children)
    got = shape_ids.get(("deep", u.type, u.size, u.status, tuple(parts), order))
    return got if type(got) is int else None


_c_fields = compiled("fluxnode.scheduler.traversers._leaf_shapes", "leaf_fields")
_c_number = compiled("fluxnode.scheduler.traversers._leaf_shapes", "leaf_number")
_c_deep = compiled("fluxnode.scheduler.traversers._leaf_shapes", "deep_number")
COMPILED = _c_fields is not None and _c_number is not None and _c_deep is not None
leaf_fields: Callable[[Any], tuple | None] = _c_fields if COMPILED else _leaf_fields_py
leaf_number: Callable[[Any, dict], Any] = _c_number if COMPILED else _leaf_number_py
deep_number: Callable[..., int | None] = _c_deep if COMPILED else _deep_number_py
