"""The flexible traverser (``resource-query -T flexible``): slots with alternatives.

Fluxion's dfu_flexible lets one jobspec level hold several sibling slots
("or-slots"); at the vertex where they match it picks, from the free
resources found below, the combination of slot shapes that fits the most
slots (a memoised search over remaining counts, earliest shape first on ties)
and emits one slot per pick.
"""

from __future__ import annotations

from .request import Request, calc_count, effective_max
from .scoring import Scoring
from .traverser import Traverser, take_slot


class FlexibleTraverser(Traverser):
    _subtree_cacheable = False  # or-slot unions are built per walk

    def _test(self, u, resources: list[Request], pristine: bool):
        slots: list[Request] | None = None
        match_r = None
        nslots = 0
        matched = or_matched = False
        for r in resources:
            if u.type == r.type:
                if matched or or_matched:
                    return resources, "none", 0, "", pristine
                match_r = r
                for c in r.with_:
                    if c.type == "slot":
                        slots = r.with_
                        nslots = effective_max(c)
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, "none", 0, "", pristine
                slots = resources
                nslots = effective_max(r)
                or_matched = True
        if slots is not None:
            child_types = {c.type for c in u.children}
            if any(all(c.type in child_types for c in s.with_) for s in slots):
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
        # top-level or-slots: the smallest alternative counts, as in Fluxion's prime
        total = 0
        best_slot: int | None = None
        for r in resources:
            n = r.count.min if r.type == t else r.count.min * self._user_data(r).get(t, 0)
            if r.type == "slot":
                best_slot = n if best_slot is None else min(best_slot, n)
            else:
                total += n
        return total + (best_slot or 0)

    def _user_data(self, r: Request) -> dict[str, int]:
        # or-slots are alternatives: a level needs the smallest of them, not the sum
        cache = self.__dict__.setdefault("_ud_cache", {})
        got = cache.get(id(r))
        if got is None:
            got = {}
            for c in r.with_:
                got[c.type] = got.get(c.type, 0) + c.count.min
                sub = self._user_data(c)
                for t, n in sub.items():
                    n *= c.count.min
                    if c.type == "slot":
                        got[t] = min(got[t], n) if t in got else n
                    else:
                        got[t] = got.get(t, 0) + n
            cache[id(r)] = (r, got)
            return got
        return got[1]

    def _dom_slot(self, m, u, slots: list[Request], nslots: int, pristine: bool, label: str,
                  dfu: Scoring) -> int:
        # one request per type to explore with; the largest alternative, so a
        # stop-on-first exploration finds enough for whichever slot shape wins
        union: list[Request] = []
        counts: dict[str, int] = {}
        for s in slots:
            for r in s.with_:
                if r.type not in counts:
                    counts[r.type] = 0
                    union.append(r)
                else:
                    i = next(k for k, q in enumerate(union) if q.type == r.type)
                    if effective_max(r) > effective_max(union[i]):
                        union[i] = r
        dfu_slot = Scoring()
        if self._explore(m, u, union, pristine, True, dfu_slot, nslots) != 0:
            return -1
        self.policy.finish_slot(dfu_slot)
        for t in counts:
            counts[t] = dfu_slot.qualified_count(t)
        memo: dict[tuple, tuple[dict[str, int], int, int]] = {}
        config = _select(slots, dict(sorted(counts.items())), nslots, memo)
        qual = config[1]
        groups = []
        for _ in range(qual):
            idx = config[2]
            if idx < 0:
                return -1
            group = take_slot(dfu_slot, slots[idx].with_)
            if group is None:
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
        memo[key] = (counts, nslots, 0)
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
