"""``find`` expressions (Fluxion's expr_eval): which vertices match predicates.

Grammar: predicates ``key=value`` joined by ``and`` / ``or`` (and binds
tighter; juxtaposition means and) with parentheses. Keys: ``status``,
``sched-now``, ``sched-future``, ``jobid-alloc``, ``jobid-span``, ``jobid-tag``,
``jobid-reserved``, ``agfilter``, ``property``, ``names``.
"""

from __future__ import annotations

import functools
import re

from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.traversers.dfu_impl import Emit

KEYS = ("status", "sched-now", "sched-future", "jobid-alloc", "jobid-span", "jobid-tag",
        "jobid-reserved", "agfilter", "property", "names")


class FindError(ValueError):
    pass


def _tokens(expr: str) -> list[str]:
    return re.findall(r"\(|\)|[^\s()]+", expr)


def _parse(tokens: list[str]):
    pos = 0

    def primary():
        nonlocal pos
        if pos >= len(tokens):
            raise FindError("find: invalid criteria")
        tok = tokens[pos]
        if tok == "(":
            pos += 1
            node = orexpr()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise FindError("find: unbalanced parentheses")
            pos += 1
            return node
        key, sep, value = tok.partition("=")
        if not sep or key not in KEYS or not value:
            raise FindError(f"find: invalid criteria: {tok}")
        pos += 1
        return ("pred", key, value)

    def andexpr():
        nonlocal pos
        node = primary()
        while pos < len(tokens) and tokens[pos] not in (")", "or"):
            if tokens[pos] == "and":
                pos += 1
            node = ("and", node, primary())
        return node

    def orexpr():
        nonlocal pos
        node = andexpr()
        while pos < len(tokens) and tokens[pos] == "or":
            pos += 1
            node = ("or", node, andexpr())
        return node

    tree = orexpr()
    if pos != len(tokens):
        raise FindError("find: invalid criteria")
    return tree


def _eval(node, v, ov) -> bool:
    """``ov`` = (down, allocated, reserved) inherited from ancestors (Fluxion's overrides)."""
    if node[0] == "and":
        return _eval(node[1], v, ov) and _eval(node[2], v, ov)
    if node[0] == "or":
        return _eval(node[1], v, ov) or _eval(node[2], v, ov)
    _, key, value = node
    lv = value.lower()
    if key == "status":
        return ("down" if ov[0] else "up") == lv
    if key == "sched-now":
        return ov[1] == (lv == "allocated")
    if key == "sched-future":
        return ov[2] == (lv == "reserved")
    if key == "agfilter":
        return True
    try:
        jid = int(value)
    except ValueError:
        jid = None
    if key == "jobid-alloc":
        return jid in v.allocations
    if key == "jobid-reserved":
        return jid in v.reservations
    if key == "jobid-span":  # the job's span in this vertex's subtree filter (Fluxion's job2span)
        return jid in v.agspans
    if key == "jobid-tag":
        return jid in v.tags
    if key == "property":
        k, sep, val = value.partition("=")
        return k in v.properties and (not sep or v.properties[k] == val)
    if key == "names":
        return v.name in _matcher(value)
    return False


@functools.lru_cache(maxsize=64)
def _matcher(value: str) -> hostlist.Matcher:
    """A names= hostlist, read once per expression (not per vertex) and never expanded."""
    return hostlist.Matcher(value)


def _preds(node, out: dict) -> dict:
    if node[0] == "pred":
        out.setdefault(node[1], node[2])
    else:
        _preds(node[1], out)
        _preds(node[2], out)
    return out


def find(traverser, criteria: str) -> list[Emit]:
    tree = _parse(_tokens(criteria))
    preds = _preds(tree, {})
    agfilter = preds.get("agfilter", "").lower() in ("true", "t")
    jobid = None
    for key in ("jobid-alloc", "jobid-span", "jobid-tag", "jobid-reserved"):
        if key in preds:
            try:
                jobid = int(preds[key])
            except ValueError as exc:
                raise FindError(f"find: invalid jobid {preds[key]}") from exc
    out: list[Emit] = []

    def rec(v, level, ov) -> int:
        ov = (ov[0] or v.status == "down", ov[1] or bool(v.allocations),
              ov[2] or bool(v.reservations))
        n = 0
        for c in v.children:
            n += rec(c, level + 1, ov)
        if not (_eval(tree, v, ov) or n):
            return 0
        extra = None
        if agfilter:
            extra = traverser.agfilter(v, jobid)
            if extra is None:
                return 0
        out.append(Emit(v, v.size, True, level, extra))
        return n + 1

    # Fluxion's find walk starts at the traversal level updates left (dfu_update._update)
    rec(traverser.g.root, 1 + getattr(traverser, "level_leak", 0), (False, False, False))
    return out
