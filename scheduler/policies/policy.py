"""Match policies: how candidates are ranked (Fluxion's dfu_match_* callbacks).

Every named policy is a combination of four knobs, as in Fluxion:
``policy=high|low`` (prefer higher or lower vertex ids), ``node_centric``
(rank by node first: a per-node score factor), ``node_exclusive`` (nodes are
always allocated whole) and ``stop_on_1_matches`` (explore children in
availability order and stop at the first sufficient match: "first").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fluxnode.scheduler.jobspec.request import Request, calc_count
from fluxnode.scheduler.policies.locality import RunFloors
from fluxnode.scheduler.policies.scoring import MATCH_MET, MATCH_UNMET, Scoring

NAMED = {
    "first": "policy=high node_centric=true stop_on_1_matches=true",
    "firstnodex": "policy=high node_centric=true node_exclusive=true stop_on_1_matches=true",
    "high": "policy=high",
    "low": "policy=low",
    "lonode": "policy=low node_centric=true",
    "hinode": "policy=high node_centric=true",
    "lonodex": "policy=low node_centric=true node_exclusive=true",
    "hinodex": "policy=high node_centric=true node_exclusive=true",
    "locality": "policy=high",
    "variation": "policy=low variation=true",
}
#: The property the variation policy scores by, and the class of a vertex without one
PERF_CLASS = "perf_class"
WORST_PERF_CLASS = 9999
# what std::stoi reads of a string (in the C locale): whitespace, a sign, digits
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
#: The policy names a user may give (the service, `fluxnode alloc`, the binder).
POLICIES = tuple(NAMED)
_OPTIONS = ("policy", "node_centric", "stop_on_1_matches", "node_exclusive", "variation")


class PolicyError(ValueError):
    """Unknown policy name or malformed custom policy string."""


@dataclass
class Policy:
    name: str
    high: bool = True
    node_centric: bool = False
    node_exclusive: bool = False
    stop_on_1: bool = False
    variation: bool = False
    exclusive_types: set[str] = field(default_factory=set)
    ml_scores: int = 0
    last_factor: int = 0
    #: The tie rule among equal scores: False keeps Fluxion's (the order its unstable
    #: std::sort leaves, replayed by stdsort); True is the fast mode's (the candidate met
    #: first in the walk, i.e. the lowest vertex id, wins: a stable sort). Scores, and so
    #: every level's choice up to ties, are the same either way.
    stable_ties: bool = False
    #: Fluxion's ``locality`` (policies.locality): ``high``, but the root chooses by
    #: runs of consecutive scores. Only the name gives it, as in Fluxion.
    locality: bool = False

    @classmethod
    def parse(cls, name: str, stable_ties: bool = False) -> Policy:
        spec = NAMED.get(name, name)
        opts: dict[str, str] = {}
        for word in spec.replace(",", " ").split():
            key, sep, value = word.partition("=")
            if key not in _OPTIONS or not sep:
                raise PolicyError(f"invalid policy option: {key}")
            if key == "policy":
                if value not in ("high", "low"):
                    raise PolicyError("policy key within custom policy accepts only low or high")
            elif value not in ("true", "false"):
                raise PolicyError(f"Policy option {key} requires true or false, got {value}")
            opts[key] = value
        if "policy" not in opts:
            raise PolicyError(f"unknown match policy: {name}")
        p = cls(name=name, high=opts["policy"] == "high",
                node_centric=opts.get("node_centric") == "true",
                node_exclusive=opts.get("node_exclusive") == "true",
                stop_on_1=opts.get("stop_on_1_matches") == "true",
                variation=opts.get("variation") == "true", stable_ties=stable_ties,
                locality=name == "locality")
        if p.node_exclusive:
            p.exclusive_types.add("node")
        return p

    # -- callbacks --------------------------------------------------------
    def discover(self, u) -> None:
        if self.node_centric and u.type == "node":
            self.last_factor = self.node_factor(u)
            self.ml_scores += self.last_factor

    @staticmethod
    def node_factor(u) -> int:
        """What a node-centric policy adds to every score below node ``u`` while it is
        walked (Fluxion's node-centric "last factor": the node's id, then uniq_id)."""
        return (u.id + 1 + 1) * 10000 + abs(u.uniq_id % 10000 - 1)

    def finish_vtx(self, u, resources: list[Request], dfu: Scoring) -> bool:
        score = MATCH_MET
        for r in resources:
            if r.type != u.type:
                continue
            for c in r.with_:
                count = calc_count(c, dfu.qualified_count(c.type))
                if count == 0:
                    score = MATCH_UNMET
                    break
                dfu.choose_best_k(c.type, count, self.high, self.stable_ties)
        if self.node_centric and u.type == "node":
            self.ml_scores -= self.last_factor
        if score != MATCH_MET:
            dfu.overall = score
        elif self.variation:
            # variation-aware: rank by the node's perf_class property (lower is better)
            dfu.overall = score + self.perf_class(u)
        else:
            dfu.overall = score + self.ml_scores + u.id + 1
        return score == MATCH_MET

    @staticmethod
    def perf_class(u) -> int:
        """``u``'s ``perf_class`` as Fluxion's variation policy reads it: ``std::stoi``
        (leading C whitespace, a sign, ASCII digits, the rest ignored: "12abc" is 12),
        9999 (the worst) when it is missing, has no number, or is outside 0..9999."""
        got = _STOI.match(u.properties.get(PERF_CLASS, ""))
        if got is None:
            return WORST_PERF_CLASS
        pc = int(got.group(1))
        return pc if 0 <= pc <= WORST_PERF_CLASS else WORST_PERF_CLASS

    def finish_slot(self, dfu: Scoring) -> None:
        # Fluxion's variation-aware policy keeps the default (descending) order here
        for t in dfu.sorted_types():
            dfu.choose_all(t, True if self.variation else self.high, self.stable_ties)

    def finish_graph(self, resources: list[Request], dfu: Scoring) -> bool:
        score = MATCH_MET
        # fast mode's tie rule makes locality's root choice high's (policies.locality)
        runs = RunFloors() if self.locality and not self.stable_ties else None
        for r in resources:
            count = calc_count(r, dfu.qualified_count(r.type))
            if count == 0:
                score = MATCH_UNMET
                break
            if runs is not None:
                runs.add(eg.score for eg in dfu.evals(r.type).egroups)
                dfu.choose_best_k_by(r.type, count, runs.key)
            else:
                dfu.choose_best_k(r.type, count, self.high, self.stable_ties)
        dfu.overall = score
        self.ml_scores = 0
        return score == MATCH_MET
