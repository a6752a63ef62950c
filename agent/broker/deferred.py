"""Modules registered under their names but run only when someone first needs them (issue 32).

A module that a broker imports sometimes imports another only for a path the broker never
takes: pyzmq's package `__init__`s load its sugar layer, which a broker never calls
(`zmq_core`), and `dataclasses` imports `inspect` (with `ast`, `dis`, `tokenize` and
`linecache` behind it, 0.95 MiB of a lone worker's RSS) only to write a signature as
the docstring of a class that has none. `DeferredModules(names)` puts a module object
made from each name's real spec into `sys.modules`, without running its code, so
`import name` finds it there and stops. Each gets a module `__getattr__` (PEP 562): the
first time anyone asks one of them for a name it does not have yet, every module of the
group runs in place, last name first (a package's innermost `__init__` first, as
importing it would), and the process has the real modules as if they had been imported
at the start.

`importlib.util.LazyLoader` is the standard library's way to do this, but on CPython
3.11 the next `import name` of a lazy module reads its `__spec__`, which runs it; a
module `__getattr__` is only called for names the module lacks, and `__spec__` it has.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


class DeferredModules:
    """A group of modules put in `sys.modules` unexecuted, run together on first use."""

    def __init__(self, names: tuple[str, ...]) -> None:
        """`names` in import order (a package before its subpackages); none imported yet."""
        self.names = names
        self.done = False
        for name in names:
            self._register(name)

    def complete(self) -> None:
        """Run every module of the group (once), the last name first."""
        if self.done:
            return
        self.done = True
        for name in reversed(self.names):
            module = sys.modules[name]
            module.__dict__.pop("__getattr__", None)
            module.__spec__.loader.exec_module(module)  # type: ignore[union-attr]

    def _register(self, name: str) -> None:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module named {name!r} to defer")
        module = importlib.util.module_from_spec(spec)

        def __getattr__(attr: str) -> Any:  # noqa: N807 (a module's __getattr__, PEP 562)
            if attr.startswith("__") or self.done:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}")
            self.complete()
            return getattr(module, attr)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def defer_unused_stdlib() -> DeferredModules | None:
    """Defer `inspect` (see above), unless it is already imported: what `python -m fluxnode
    broker` calls before anything imports `dataclasses`. Every dataclass a broker defines
    has a docstring, so none asks `inspect` for a signature; one that did would run it, and
    be none the worse."""
    if "inspect" in sys.modules:
        return None
    return DeferredModules(("inspect",))
