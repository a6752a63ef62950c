"""Deep copies of JSON-shaped objects (dicts, lists, strings, numbers, booleans, None).

The store copies what it hands out and what it is given, and a patch copies the object it
changes: several times faster than copy.deepcopy, which has to remember every object it
copied (a JSON document has no shared or cyclic parts to remember). Anything else falls
back to copy.deepcopy.
"""

from __future__ import annotations

import copy
from typing import Any

_ATOMS = (str, int, float, bool, type(None))


def json_copy(obj: Any) -> Any:
    """A deep copy of a JSON-shaped object."""
    cls = type(obj)
    if cls is dict:
        return {k: v if type(v) in _ATOMS else json_copy(v) for k, v in obj.items()}
    if cls is list:
        return [v if type(v) in _ATOMS else json_copy(v) for v in obj]
    if cls in _ATOMS:
        return obj
    return copy.deepcopy(obj)
