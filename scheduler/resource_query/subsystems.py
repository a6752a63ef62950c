"""``-S``/``--match-subsystems``: which subsystems the matcher walks, by Fluxion's names.

Fluxion's resource-query knows a fixed table of names (``set_subsystems_use`` in
resource-query.cpp and reapi_cli_impl.hpp), each a list of subsystems whose first is the
dominant one the traversal walks down, the others auxiliary. It also takes each name in
lower case, and nothing else: any other name is a ``std::map::at`` that nothing catches,
so the program aborts. Every subsystem of the list must have a root in the graph, or the
traverser's ``initialize`` fails (ENOTSUP) and resource-query stops with its runtime
error. Both are kept here, in Fluxion's words, so a script that relies on them sees what
Fluxion's resource-query does.
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxnode.scheduler.traversers.match_errors import ABORT_EXIT, terminate_message

CONTAINMENT = "containment"
IBNET, IBNETBW, PFS1BW, POWER, VIRTUAL1 = "ibnet", "ibnetbw", "pfs1bw", "power", "virtual1"

# set_subsystems_use's subsystem_map, in its order
SUBSYSTEM_SETS: dict[str, tuple[str, ...]] = {
    "CA": (CONTAINMENT,),
    "IBA": (IBNET,),
    "IBBA": (IBNETBW,),
    "PA": (POWER,),
    "PFS1BA": (PFS1BW,),
    "C+IBA": (CONTAINMENT, IBNET),
    "C+IBBA": (CONTAINMENT, IBNETBW),
    "C+PA": (CONTAINMENT, POWER),
    "C+PFS1BA": (CONTAINMENT, PFS1BW),
    "IB+IBBA": (IBNET, IBNETBW),
    "C+P+IBA": (CONTAINMENT, POWER, IBNET),
    "V+PFS1BA": (VIRTUAL1, PFS1BW),
    "VA": (VIRTUAL1,),
    "ALL": (CONTAINMENT, IBNET, IBNETBW, PFS1BW, POWER),
}

# what an unknown name does to Fluxion's resource-query: an uncaught std::out_of_range
# (libstdc++'s terminate handler writes this), then abort()
UNKNOWN_NAME_STDERR = terminate_message("std::out_of_range", "map::at")
UNKNOWN_NAME_EXIT = ABORT_EXIT  # 128 + SIGABRT, as the shell reports it
# a subsystem the graph has no root for: the runtime error main() prints (e.what() ends
# in a newline of its own)
NO_ROOT_STDERR = (": Runtime error: initialize_matchers_and_traversers: ERROR: can't "
                  "initialize traverser\n\n")


class UnknownSubsystems(ValueError):
    """A ``-S`` name that is not in Fluxion's table."""


def subsystems_of(name: str) -> tuple[str, ...]:
    """The subsystems ``name`` stands for, dominant first (UnknownSubsystems if none):
    the table's names as written, or all in lower case."""
    found = SUBSYSTEM_SETS.get(name)
    if found is None and name == name.lower():
        found = SUBSYSTEM_SETS.get(name.upper())
    if found is None:
        raise UnknownSubsystems(name)
    return found


def missing_roots(subsystems: Iterable[str], roots: Iterable[str]) -> list[str]:
    """The subsystems the graph has no root for (dfu_impl_t's initialize refuses them)."""
    have = set(roots)
    return [s for s in subsystems if s not in have]
