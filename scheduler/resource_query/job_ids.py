"""Fluxion's job ids and the traverser's: the same, until a match writer fails.

``reapi_cli_t::match_allocate`` (flux-sched's resource/reapi/bindings/c++/
reapi_cli_impl.hpp) counts a job id with ``incr_job_counter`` only after the writer
has emitted R. When that emit fails, the traversal has already planned the job, but the
job is neither in resource-query's allocations nor its reservations and the counter
stays: the next match runs under the same id. Fluxion's planners then hold both jobs;
its vertex maps from job id to span (``schedule.allocations``, ``idata.job2span``, ...)
keep the newer span where both jobs took a vertex, so the older job stays planned for
good: ``cancel`` of that id answers "nonexistent job" while it is not registered, and
never reaches the older spans it overwrote.

fluxnode's traverser refuses an id it already holds. :class:`JobIds` therefore gives the
next match under a leaked id a traverser id of its own, above any id resource-query can
count to in a session (``HIDDEN_BASE``), and leaves the leaked job where it is: planned,
never cancelled. Every command that names a job (``cancel``, ``partial-cancel``,
``update``, ``find jobid-...=N``) goes through :meth:`JobIds.of`; ``find`` asks for every
traverser id the job id has had, as Fluxion's tags and maps still name the id on the
older job's vertices. Not followed: once a later match under that id writes, Fluxion's
``cancel`` frees the older job's spans on the vertices the newer one did not take too;
fluxnode frees the newer job only.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass, field

# traverser ids handed to matches under a leaked job id: far above the ids a session
# counts to, below 2**63 (Fluxion's jobids are int64_t)
HIDDEN_BASE = 1 << 48
_JOBID_PRED = re.compile(r"(jobid-[a-z]+)=(\d+)")


@dataclass
class JobIds:
    """Fluxion's job id -> the traverser id its latest job has, when they differ."""

    current: dict[int, int] = field(default_factory=dict)
    # Fluxion's job id -> every traverser id a job under it had (leaked ones first)
    history: dict[int, list[int]] = field(default_factory=dict)
    _next: int = HIDDEN_BASE

    def of(self, jobid: int) -> int:
        """The traverser id of ``jobid``'s latest job."""
        return self.current.get(jobid, jobid)

    def fluxion_id(self, tid: int) -> int | None:
        """The Fluxion job id whose latest job has traverser id ``tid``; None for a
        leaked job (no job id names it any more)."""
        if not self.history:
            return tid
        for jobid, tids in self.history.items():
            if tid in tids:
                return jobid if tids[-1] == tid else None
        return tid

    def for_match(self, jobid: int, held: Container[int]) -> int:
        """The traverser id a match under ``jobid`` runs with. ``held``: the ids the
        traverser holds. A held id is a job whose writer failed, or one an ``update``
        placed above the job counter, which later counts up to it: Fluxion plans the
        match under the same id either way, and the older job leaks."""
        tid = self.of(jobid)
        if tid in held:
            self.history.setdefault(jobid, [tid])
            tid = self.current[jobid] = self._next
            self._next += 1
            self.history[jobid].append(tid)
        return tid

    def criteria(self, expression: str) -> str:
        """A ``find`` expression with each ``jobid-KEY=N`` (decimal) of a job id that
        leaked made ``(jobid-KEY=T1 or jobid-KEY=T2 ...)`` over its traverser ids."""
        if not self.history:
            return expression

        def widen(m: re.Match) -> str:
            tids = self.history.get(int(m.group(2)))
            if not tids:
                return m.group(0)
            return "(" + " or ".join(f"{m.group(1)}={t}" for t in tids) + ")"

        return _JOBID_PRED.sub(widen, expression)
