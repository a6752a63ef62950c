"""Which implementation of a compiled loop runs: the C one, or its Python reference.

The scheduler has loops compiled from C (``traversers/_whole_leaves.c``,
``_leaf_shapes.c``, ``_leaf_scores.c``, ``_pruned_skip.c``, ``policies/_stdsort.c``, built
by ``pip install`` as optional setuptools extensions, see pyproject.toml). Each has a
Python reference beside it (``whole_leaves.py``, ``update_recipes.py``, ``leaf_shapes.py``,
``leaf_scores.py``, ``pruned_skip.py``, ``stdsort.py``) that the C one must equal, and a
test that holds them to each other. Where no C compiler was found the extension is
missing and the reference runs; ``FLUXNODE_PURE_PYTHON=1`` in the environment selects
the references on purpose (read once, at import). It sits in ``fluxnode.scheduler``
itself, so that the policies and the traversers both reach it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

ENV_PURE_PYTHON = "FLUXNODE_PURE_PYTHON"


def compiled(module: str, name: str) -> Callable[..., Any] | None:
    """``module.name`` when the extension ``module`` is built and not switched off."""
    if os.environ.get(ENV_PURE_PYTHON, "") not in ("", "0"):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:  # built without a compiler (optional extension)
        return None
