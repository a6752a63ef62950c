"""The flexible traverser (``resource-query -T flexible``): slots with alternatives.

Fluxion's dfu_flexible lets one jobspec level hold several sibling slots
("or-slots"); at the vertex where they match it picks, from the free
resources found below, the combination of slot shapes that fits the most
slots (a memoised search over remaining counts, earliest shape first on ties)
and emits one slot per pick. ``xor_slot`` siblings are alternatives instead:
exactly one of them is used, the first (in jobspec order) that can run now, or
the one that can start earliest when the request may be reserved.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from fluxnode.scheduler.jobspec.request import Request, calc_count, effective_max, to_requests
from fluxnode.scheduler.policies.scoring import Scoring
from fluxnode.scheduler.traversers.dfu import (
    NO_ALLOC_OPS,
    MatchResult,
    NoMatch,
    Traverser,
    Unsatisfiable,
)
from fluxnode.scheduler.traversers.dfu_select import take_slot


class FlexibleTraverser(Traverser):
    _subtree_cacheable = False  # or-slot unions are built per walk

    def match(self, jobspec, op: str = "allocate", jobid: int | None = None,
              at: int | None = None) -> MatchResult:
        """``xor_slot`` siblings are alternatives: exactly one of them is matched. The
        request is tried with one alternative per xor level, in jobspec order: the first
        that allocates now wins; failing that (allocate_orelse_reserve), the one that
        can start earliest, the first of those on a tie."""
        req = self._request(jobspec)
        alternatives = _xor_alternatives(req.resources)
        if alternatives is None:
            return super().match(req, op, jobid, at)
        jobid = self.next_jobid if jobid is None else jobid
        tries = [replace(req, resources=alt) for alt in alternatives]
        # a plain allocate gives no satisfiability verdict (as the base traverser's), the
        # other ops do: an alternative that is only busy makes the whole request busy
        now_op = op if op in ("satisfiability", "allocate_with_satisfiability") else (
            "without_allocating" if op in NO_ALLOC_OPS else "allocate")
        busy = False
        for one in tries:
            try:
                return super().match(one, now_op, jobid, at)
            except NoMatch as exc:
                busy = busy or exc.busy
        if op in ("allocate_orelse_reserve", "without_allocating_future"):
            best = None
            busy = False
            for i, one in enumerate(tries):
                try:
                    res = super().match(one, op, jobid, at)
                except NoMatch as exc:
                    busy = busy or exc.busy
                    continue
                if res.status != "MATCHED":
                    self.cancel(res.jobid)
                if best is None or res.at < best[0]:
                    best = (res.at, i)
            if best is not None:
                return super().match(tries[best[1]], op, jobid, at)
        if op not in ("allocate", "without_allocating") and not busy:
            raise Unsatisfiable()
        raise NoMatch(True)

    def _test(self, u, resources: list[Request], pristine: bool):
        # As the base test, but a level may hold sibling slots (or-slots): all of them
        # are candidates, and when none sits at ``u`` the level passes on unmatched.
        slots: list[Request] | None = None
        match_r = None
        nslots = 0
        matched = or_matched = False
        for r in resources:
            if u.type == r.type:
                if matched or or_matched:  # match (): siblings of one type
                    return resources, "siblings", 0, "", pristine
                match_r = r
                for c in r.with_:
                    if c.type == "slot":
                        slots = r.with_
                        nslots = effective_max(c)
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, "siblings", 0, "", pristine
                slots = resources
                nslots = effective_max(r)
                or_matched = True
        if slots is not None:
            if any(self._slot_sits_at(u, s.with_) for s in slots):
                return slots, "slot", nslots, "", False
            return resources, ("pristine" if pristine else "none"), nslots, "", pristine
        if match_r is not None:
            return match_r.with_, "resource", nslots, "", False
        return resources, ("pristine" if pristine else "none"), nslots, "", pristine

    def _prune_resources(self, m, x_in: bool, u, resources: list[Request]) -> bool:
        # As Fluxion's flexible prune: a failed or-slot check does not stop the loop,
        # but the verdict of the last checked resource stands.
        pruned = False
        for r in resources:
            if r.type != u.type and r.type != "slot":
                continue
            if r.type != "slot":
                if self._excl_busy(m, x_in, u, r) or self._short(m, u, r):
                    return True
                pruned = False
            else:
                pruned = self._short(m, u, r)
        return pruned

    def _wanted(self, resources: list[Request], t: str) -> int:
        # the top level primed as every other level (Fluxion's dfv)
        return self._primed(resources).get(t, 0)

    def _user_data(self, r: Request) -> dict[str, int]:
        cache = self.__dict__.setdefault("_ud_cache", {})
        got = cache.get(id(r))
        if got is None:
            got = cache[id(r)] = (r, self._primed(r.with_))
        return got[1]

    def _primed(self, resources: list[Request]) -> dict[str, int]:
        """What one level asks below its parent, as dfu_flexible_t::prime_jobspec sums
        it: a request's own count and its aggregates times its count add up, but an
        or-slot's aggregates are alternatives: each lowers a type to the smaller of
        the two, and a type the level has so far that the slot lacks drops to 0 (a
        later slot can still raise none: {core 8, gpu 1} then {core 10} asks core 8,
        gpu 0; the other way round, core 8, gpu 1)."""
        got: dict[str, int] = {}
        for c in resources:
            got[c.type] = got.get(c.type, 0) + c.count.min
            sub = self._user_data(c)
            if c.type in ("slot", "xor_slot"):
                for t, n in sub.items():
                    n *= c.count.min
                    got[t] = min(got[t], n) if t in got else n
                for t in got:
                    if t not in sub and t != c.type:
                        got[t] = 0
            else:
                for t, n in sub.items():
                    got[t] = got.get(t, 0) + c.count.min * n
        return got

    def _dom_slot(self, m, u, slots: list[Request], nslots: int, pristine: bool, label: str,
                  dfu: Scoring) -> int:
        # one request per type to explore with (dfu_flexible_t::dom_slot's pre_union):
        # of the alternatives of a type, the first with the largest count.min (not its
        # effective max), so a stop-on-first exploration finds enough for whichever
        # slot shape wins; its label is the one the vertices it completes keep. (The
        # union's order, a std::map's by interned type id, decides nothing here.)
        by_type: dict[str, Request] = {}
        for s in slots:
            for r in s.with_:
                kept = by_type.get(r.type)
                if kept is None or kept.count.min < r.count.min:
                    by_type[r.type] = r
        union = list(by_type.values())
        counts = dict.fromkeys(by_type, 0)
        dfu_slot = Scoring()
        if self._explore(m, u, union, pristine, True, dfu_slot, nslots) != 0:
            return -1
        self.policy.finish_slot(dfu_slot)
        for t in counts:
            counts[t] = dfu_slot.qualified_count(t)
        memo: dict[tuple, tuple[dict[str, int], int, int]] = {}
        config = _select(slots, dict(sorted(counts.items())), nslots, memo)
        qual = config[1]
        if qual < 0:
            # Fluxion loops for (unsigned) qual slots until the slots run out: no match
            self.err_msg.append("dom_slot: not enough slots.\n")
            return -1
        groups = []
        for _ in range(qual):
            idx = config[2]
            if idx < 0:
                return -1
            group = take_slot(dfu_slot, slots[idx].with_)
            if group is None:
                self.err_msg.append("dom_slot: not enough slots.\n")
                return -1
            groups.append(group)
            config = memo.get(_key(config[0]), ({}, 0, -1))
        for g in groups:
            dfu.add("slot", g)
        return 0 if qual else -1


def _key(counts: dict[str, int]) -> tuple:
    return tuple(sorted(counts.items()))


def _select(slots: list[Request], counts: dict[str, int], nslots: int,
            memo: dict[tuple, tuple[dict[str, int], int, int]]) -> tuple[dict[str, int], int, int]:
    """(counts left after the best pick, slots that fit, index of the pick)."""
    key = _key(counts)
    if key in memo:
        return memo[key]
    if len(slots) == 1:
        # as many of the one shape as the qualified counts hold (dom_slot's cnt_slot)
        # Fluxion keeps nslots (unsigned) in an int: a count without a max (effective
        # max UINT_MAX) or with one over INT_MAX wraps negative, and no slot is matched
        fit = nslots - 2**32 if nslots >= 2**31 else nslots
        for elem in slots[0].with_:
            have = counts.get(elem.type, 0)
            count = calc_count(elem, have)
            if count <= 0 or have < count:
                fit = 0
                break
            fit = min(fit, have // count)
        memo[key] = (counts, fit, 0 if fit else -1)
        return memo[key]
    best = -1
    for i, slot in enumerate(slots):
        updated = dict(counts)
        fits = True
        for elem in slot.with_:
            count = calc_count(elem, counts.get(elem.type, 0))
            if count <= 0:
                fits = False
                break
            updated[elem.type] = updated.get(elem.type, 0) - count
        if not fits:
            continue
        test = _select(slots, updated, nslots, memo)[1]
        if best < test:
            best = test
            memo[key] = (updated, best + 1, i)
    if best < 0:
        memo[key] = ({}, 0, -1)
    return memo[key]


def _xor_alternatives(resources: list[Request]) -> list[list[Request]] | None:
    """Every request that takes one ``xor_slot`` per level (as a plain ``slot``), in
    jobspec order; None when the request has no xor slots."""
    def has_xor(rs: list[Request]) -> bool:
        return any(r.type == "xor_slot" or has_xor(r.with_) for r in rs)

    if not has_xor(resources):
        return None

    def expand(rs: list[Request]) -> list[list[Request]]:
        # the other resources of a level, each with every expansion of what it holds...
        others = [(i, [replace(r, with_=w) for w in expand(r.with_)])
                  for i, r in enumerate(rs) if r.type != "xor_slot"]
        # ...with exactly one of the level's xor slots, as a plain slot, in jobspec order
        picks = [(i, replace(r, type="slot", with_=w))
                 for i, r in enumerate(rs) if r.type == "xor_slot" for w in expand(r.with_)]
        out = []
        for pick in picks or [None]:
            for combo in product(*(options for _i, options in others)):
                level = dict(zip((i for i, _options in others), combo, strict=True))
                if pick is not None:
                    level[pick[0]] = pick[1]
                out.append([level[i] for i in sorted(level)])
        return out

    return [to_requests(alt) for alt in expand(resources)]
