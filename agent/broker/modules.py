"""Broker modules: Python modules the leader loads by name (flux-core's module.c).

`broker.modules` (default `DEFAULT_MODULES`, the scheduler service) is a comma list
of importable names; each must define ``load(broker: BrokerHandle) -> object``, and
the object's ``close()``, if any, is called on shutdown in reverse order. The broker
runtime never imports a module's package itself, so the scheduler stays a plug-in.

A module sees the broker only through `BrokerHandle` (docs/developers/interfaces.md): it may
offer services, publish events, read R and the down ranks, watch R change, and run
callbacks on the broker's one event loop.

A default module that is not installed is skipped quietly. Any other failure -- a
module named explicitly that cannot be imported, no ``load``, or ``load`` raising (the
scheduler finding its journal damaged) -- is fatal: `ModuleLoadError`, and the broker
exits non-zero before it binds anything. A leader running without its scheduler would
answer ``sched.*`` with ENOSYS while looking healthy; stopping makes the failure seen
(the node agent reports the broker's exit) and never lets anything reuse what the
unreadable state held.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fluxnode.agent.broker.boot import BrokerError, InstanceState
from fluxnode.agent.broker.broker_log import BrokerLog
from fluxnode.agent.broker.events import EventBus
from fluxnode.agent.broker.quorum import Quorum
from fluxnode.agent.broker.reactor import Reactor
from fluxnode.agent.broker.resource_service import ResourceService
from fluxnode.agent.broker.services import Handler, ServiceRegistry

DEFAULT_MODULES = "fluxnode.scheduler.service"


class ModuleLoadError(BrokerError):
    """A broker module could not be loaded: the broker must not run without it."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        self.problem = problem
        super().__init__(f"module {name} failed to load: {problem}")


class BrokerHandle:
    """What a broker module sees of the broker (see docs/developers/interfaces.md)."""

    def __init__(self, name: str, state: InstanceState, services: ServiceRegistry, events: EventBus,
                 resources: ResourceService, quorum: Quorum, reactor: Reactor) -> None:
        self.name = name
        self.rank = state.rank
        self.attrs = state.attrs
        self.statedir: Path = state.statedir
        import logging  # a module logs through the stdlib, bridged to the broker's lines

        self.log = logging.getLogger(f"fluxnode.module.{name}")
        self._state = state
        self._services = services
        self._events = events
        self._resources = resources
        self._quorum = quorum
        self._reactor = reactor

    @property
    def size(self) -> int:
        """The instance size now (``config.reload`` may change it)."""
        return self._state.size

    def register(self, topic: str, handler: Handler) -> None:
        self._services.register(topic, handler)

    def publish(self, topic: str, payload: dict | None = None) -> None:
        self._events.publish(topic, payload)

    def resources(self) -> dict:
        return self._resources.R()

    def down_ranks(self) -> list[int]:
        return self._quorum.down_ranks()

    def expected_ranks(self) -> list[int]:
        """The ranks R holds once every broker has reported (all but `[resource] exclude`d
        ones); `resources()` may lack some while brokers (re)join."""
        return self._resources.expected_ranks()

    def on_resources_changed(self, callback: Callable[[dict, list[int]], None]) -> None:
        self._resources.watchers.append(callback)

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run `callback` on the broker's event loop after `delay` seconds."""
        self._reactor.call_later(delay, callback)


class ModuleLoader:
    """Loads the `broker.modules` on the leader and closes them on shutdown."""

    def __init__(self, log: BrokerLog) -> None:
        self.log = log
        self.loaded: list[tuple[str, Any]] = []

    def load(self, spec: str | None, make_handle: Callable[[str], BrokerHandle]) -> None:
        """Load each module of `spec` (None: the defaults); `make_handle(short_name)` builds its
        handle."""
        explicit = spec is not None
        names = [n.strip() for n in (spec if explicit else DEFAULT_MODULES).split(",") if n.strip()]
        if names:
            self.log.bridge_stdlib()  # what the modules log goes where the broker's lines go
        for name in names:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                if not explicit and _not_installed(name, exc):
                    self.log.info("broker: module %s not loaded: %s", name, exc)
                    continue
                raise ModuleLoadError(name, f"cannot import it: {exc}") from exc
            loader = getattr(module, "load", None)
            if loader is None:
                raise ModuleLoadError(name, "it has no load(broker) function")
            try:
                obj = loader(make_handle(name.rsplit(".", 1)[-1]))
            except Exception as exc:
                if not isinstance(exc, (RuntimeError, ValueError, OSError)):
                    # A bug, not a reported failure: its traceback goes to the log file.
                    self.log.debug("broker: module %s failed to load", name, exc_info=True)
                raise ModuleLoadError(name, " ".join(str(exc).split()) or repr(exc)) from exc
            self.loaded.append((name, obj))
            self.log.info("broker: loaded module %s", name)

    def close(self) -> None:
        for name, obj in reversed(self.loaded):
            close = getattr(obj, "close", None)
            if close:
                try:
                    close()
                except Exception:
                    self.log.exception("module %s: close failed", name)


def _not_installed(name: str, exc: ImportError) -> bool:
    """True if importing `name` failed because it (or a package above it) is not installed,
    not because something it imports is missing or broken."""
    missing = getattr(exc, "name", None)
    return isinstance(exc, ModuleNotFoundError) and bool(missing) and (
        name == missing or name.startswith(f"{missing}.")
    )
