"""The resource request tree the traverser walks (Fluxion's Jobspec::Resource view).

Built from a parsed :class:`~fluxnode.scheduler.jobspec.Jobspec`. Each request
carries ``user_data``: the aggregate count of every type below one instance of
it, which the pruning filters compare against subtree availability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fluxnode.scheduler.jobspec.constraint import Constraint
from fluxnode.scheduler.jobspec.jobspec import Jobspec
from fluxnode.scheduler.jobspec.model import Count


@dataclass(eq=False)
class Request:
    type: str
    count: Count
    exclusive: bool | None = None
    label: str = ""
    with_: list[Request] = field(default_factory=list)
    user_data: dict[str, int] = field(default_factory=dict)

    @property
    def min(self) -> int:
        return self.count.min


@dataclass
class MatchRequest:
    resources: list[Request]
    duration: int
    constraint: Constraint | None
    task_slots: list[str]


def to_requests(res) -> list[Request]:
    """Request trees (with their ``user_data``) from jobspec resources, or from requests
    whose shape was changed (the flexible traverser's xor alternatives)."""
    out = []
    for r in res:
        req = Request(r.type, r.count, r.exclusive, r.label, to_requests(r.with_))
        for c in req.with_:
            req.user_data[c.type] = req.user_data.get(c.type, 0) + c.count.min
            for t, n in c.user_data.items():
                req.user_data[t] = req.user_data.get(t, 0) + c.count.min * n
        out.append(req)
    return out


def from_jobspec(js: Jobspec | Mapping | str) -> MatchRequest:
    if not isinstance(js, Jobspec):
        js = Jobspec.parse(js)
    # Fluxion's jobmeta_t::build rounds a fractional duration up (0.5 s is 1 s, not none);
    # a negative one (-0.5 too) stays negative, which the traverser refuses (EINVAL)
    duration = math.ceil(js.duration) if js.duration >= 0 else min(math.floor(js.duration), -1)
    return MatchRequest(to_requests(js.resources), duration, js.constraints,
                        [t.slot for t in js.tasks])


def effective_max(r: Request) -> int:
    return r.count.effective_max


def calc_count(r: Request, qc: int) -> int:
    return r.count.calc(qc)
