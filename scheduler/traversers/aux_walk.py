"""The walk of the auxiliary subsystems (``-S C+PA``...): Fluxion's UPV explore in ``dom_exp``.

Design. With a selection of more than one subsystem, Fluxion's ``dom_exp`` (dfu_impl.cpp)
explores a vertex's out-edges in each subsystem in turn: the dominant one down
(``dom_dfv``), every other "up" (``aux_upv``), into the same scoring the vertex's own
children fill. Each auxiliary child that ``aux_upv`` accepts adds one group under
(subsystem, the child's type), scored with what that scoring holds at the time: the
``overall_score()`` and ``avail()`` that the last dominant child to qualify left there,
or the defaults (-1 and 0) where none did (a pdu, which has no containment children).
``aux_upv`` never sets them: it prunes the child (status, constraint, availability,
exclusivity; the auxiliary subsystem has no subtree filters), walks the child's own
auxiliary edges into a scoring of its own, whose score stays -1 so ``resolve`` merges
nothing of it, and accepts the child if its planner has units free.

The groups then travel with the vertex's scoring: merged into the parent's unless the
vertex chose its own children (a matched node), and at the root ``has_remaining`` fails
the match when any type of any subsystem has no qualified count. So a pdu's power
children (score -1) fail every match whose walk reaches the pdu, and under a stop-on-1
policy (``first``) the share tally's ``total_count`` makes an empty group per request
type of the level (``scoring_api_t``'s ``operator[]``), which fails it too.

Here the groups of auxiliary subsystem S and type T sit in the same ``Scoring`` under
the key ``S + "\\0" + T`` (``aux_key``): no GraphML or Fluxion type holds a NUL, so the
policies' choices (by request type) never see them, merges carry them, and the root's
check of every type's qualified count covers them. ``aux_upv`` and ``explore`` never
count visits (``-e``'s preorder/postorder are the dominant walk's).

Not modelled: subtree filters in an auxiliary subsystem (Fluxion primes them only at a
vertex of type ``cluster`` there, which no graph of flux-sched's has).
"""

from __future__ import annotations

import errno as _errno
from operator import attrgetter

from fluxnode.scheduler.graph.resource_graph import Vertex
from fluxnode.scheduler.jobspec.request import Request
from fluxnode.scheduler.policies.scoring import Edge, EGroup, Evals, Scoring
from fluxnode.scheduler.traversers.dfu_impl import DfuImpl, JobMeta
from fluxnode.scheduler.traversers.dfu_select import ShareTally

_uniq_id = attrgetter("uniq_id")
_NODE_TYPES = ("node", "storage_node")  # the types an RFC 31 constraint tests


def aux_key(subsystem: str, rtype: str) -> str:
    """The Scoring key of auxiliary ``subsystem``'s groups of type ``rtype``."""
    return f"{subsystem}\0{rtype}"


class _SubsystemCounts:
    """One subsystem's totals in a Scoring, for ShareTally.count: each type asked for
    gets an entry, empty if need be, as Fluxion's ``total_count`` makes one."""

    __slots__ = ("dfu", "prefix")

    def __init__(self, dfu: Scoring, subsystem: str) -> None:
        self.dfu = dfu
        self.prefix = aux_key(subsystem, "")

    def total_count(self, rtype: str) -> int:
        return self.dfu.evals(self.prefix + rtype).total


class AuxWalk(DfuImpl):
    """``dom_exp``'s auxiliary part, for a selection with auxiliary subsystems (``_aux``)."""

    # aux_upv's root: a function-static in Fluxion, found once for the first auxiliary
    # subsystem walked and compared with every later one's vertices
    _aux_root: Vertex | None = None
    _aux_root_found: bool = False

    def _aux_exp(self, m: JobMeta, u: Vertex, resources: list[Request], excl: bool,
                 dfu: Scoring) -> None:
        """Explore ``u``'s out-edges in each auxiliary subsystem, after its dominant ones."""
        for s in self._aux:
            kids = u.aux_children.get(s)
            if kids:
                self._aux_explore(m, u, s, kids, resources, excl, dfu)

    def _aux_explore(self, m: JobMeta, u: Vertex, s: str, kids: list[Vertex],
                     resources: list[Request], excl: bool, dfu: Scoring) -> None:
        """explore(..., visit_t::UPV, ...): one group per accepted child, scored with
        ``dfu``'s score and availability as they stand."""
        prefix = aux_key(s, "")
        tally = None
        if self.policy.stop_on_1:
            # explore_dynamically: by_outedges' order, (weight, uniq_id) highest first;
            # no update walk ever re-weighs an auxiliary edge (upd_upv does nothing)
            tally = ShareTally(self._level(resources).per_share, 1)
            counts = _SubsystemCounts(dfu, s)
            kids = sorted(kids, key=_uniq_id, reverse=True)
        for c in kids:
            if tally is not None and c.type in tally.sat_types:
                continue
            if not self._aux_upv(m, c, s, resources, excl):
                continue
            count = dfu.avail
            ev = dfu.types.get(prefix + c.type)
            if ev is None:
                ev = dfu.types[prefix + c.type] = Evals()
            ev.add(EGroup(dfu.overall, count, excl, edges=[Edge(c, count, count, excl, u)]))
            if tally is not None and tally.count(counts):
                break

    def _aux_upv(self, m: JobMeta, u: Vertex, s: str, resources: list[Request],
                 excl: bool) -> bool:
        """aux_upv: is ``u`` accepted? Its own auxiliary children are walked (their
        prunes set errno as Fluxion's do), into a scoring nothing reads."""
        if self._aux_prune(m, excl, u, resources):
            return False
        if not self._aux_root_found:
            self._aux_root = self.g.roots.get(s)
            self._aux_root_found = True
        if u is not self._aux_root and u.aux_children:
            kids = u.aux_children.get(s)
            if kids:
                self._aux_explore(m, u, s, kids, resources, excl, Scoring())
        return self._avail(u, m) != 0

    def _aux_prune(self, m: JobMeta, x_in: bool, u: Vertex, resources: list[Request]) -> bool:
        """prune() in an auxiliary subsystem: status, constraint, availability and
        exclusivity as in the dominant walk; no subtree filter (by_subplan finds none)."""
        before, self.errno = self.errno, _errno.EBUSY  # what each prune sets
        pruned = ((not m.sat and u.status != "up")
                  or (m.constraint is not None and u.type in _NODE_TYPES
                      and not m.constraint.match(u.name, u.rank, u.properties))
                  or self._avail(u, m) == 0
                  or any(r.type == u.type and self._excl_busy(m, x_in, u, r)
                         for r in resources))
        if not pruned:
            self.errno = before
        return pruned
